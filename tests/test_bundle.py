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


def test_parts_reassemble_on_the_host(tmp_path):
    import io
    import subprocess
    import tarfile

    src = tmp_path / "src" / "vllm-site"
    src.mkdir(parents=True)
    (src / "payload.bin").write_bytes(bytes(range(256)) * 4000)  # ~1 MB
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        t.add(src, arcname="vllm-site")
    out, root = tmp_path / "gpu", tmp_path / "host"
    last = bundle.write_parts("vllm", buf.getvalue(), out, 2, size=len(buf.getvalue()) // 3 + 1)
    assert last == 5 and sorted(p.name for p in out.iterdir()) == ["b3", "b4", "b5"]
    msgs = [subprocess.run(["bash", str(out / b / "install.sh")], capture_output=True, text=True, check=True,
                           env={"LLMC_ROOT": str(root), "PATH": "/usr/bin:/bin"}).stdout for b in ("b3", "b4", "b5")]
    assert msgs[0].startswith("vllm part stored (1 of 3)") and msgs[2].startswith("vllm installed")
    assert (root / "vllm-site" / "payload.bin").read_bytes() == (src / "payload.bin").read_bytes()
