"""The offline bundle builder's choices (scripts/gpu/bundle.py); building a bundle needs PyPI and minutes."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("bundle", Path(__file__).parents[1] / "scripts/gpu/bundle.py")
bundle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bundle)


def test_host_packages_and_unneeded_gpu_libraries_are_not_carried():
    host = {bundle.norm(n) for n in ("torch", "numpy", "transformers")}
    reqs = [("vllm", "0.26.0"), ("torch", "2.11.0+host"), ("NumPy", "2.5.2"), ("flashinfer-python", "0.6.14"),
            ("nvidia-cublas-cu12", "12.9.3.13"), ("apache_tvm_ffi", "0.1.10"), ("pydantic", "2.14.4")]
    assert bundle.keep(reqs, host) == [("vllm", "0.26.0"), ("apache_tvm_ffi", "0.1.10"), ("pydantic", "2.14.4")]


def test_xgrammar_dependency_is_kept():
    # the first vLLM start on the H200 failed with "No module named 'tvm_ffi'" (xgrammar imports it)
    assert "apache-tvm-ffi" not in bundle.EXCLUDE


def test_host_package_list_is_read():
    names = (Path(bundle.__file__).parent / "host_packages.txt").read_text().split()
    assert "torch" in names and "transformers" in names and "vllm" not in names
