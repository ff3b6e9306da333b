"""The offline bundle builder's choices (scripts/gpu/bundle.py); building a bundle needs PyPI and minutes."""

import importlib.util
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("bundle", Path(__file__).parents[1] / "scripts/gpu/bundle.py")
bundle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bundle)
plan = importlib.import_module("bundle_plan")  # scripts/gpu/bundle_plan.py, on sys.path once bundle.py is loaded


def test_host_packages_and_unneeded_gpu_libraries_are_not_carried():
    host = {bundle.norm(n) for n in ("torch", "numpy", "transformers")}
    reqs = [("vllm", "0.26.0"), ("torch", "2.11.0+host"), ("NumPy", "2.5.2"), ("flashinfer-python", "0.6.14"),
            ("nvidia-cublas-cu12", "12.9.3.13"), ("apache_tvm_ffi", "0.1.10"), ("pydantic", "2.14.4")]
    assert bundle.keep(reqs, host) == [("vllm", "0.26.0"), ("apache_tvm_ffi", "0.1.10"), ("pydantic", "2.14.4")]


def test_sglang_keeps_what_its_source_imports_of_the_excluded():
    """SGLang 0.5.15 imports flashinfer.sampling at module level on CUDA (bundle_plan.KEEP); vLLM and lmdeploy still
    leave it out."""
    reqs = [("sglang", "0.5.15"), ("flashinfer-python", "0.6.12"), ("tilelang", "0.1.11"), ("sglang-kernel", "0.4.4")]
    assert bundle.keep(reqs, set(), "sglang") == [("sglang", "0.5.15"), ("flashinfer-python", "0.6.12"),
                                                 ("sglang-kernel", "0.4.4")]
    assert bundle.keep(reqs, set(), "vllm") == [("sglang", "0.5.15"), ("sglang-kernel", "0.4.4")]
    assert "sgl_kernel/sm100" in bundle.DROP["sglang"] and "sgl_kernel/sm90" not in bundle.DROP["sglang"]
    assert plan.drop_table(True)["sglang"] == bundle.DROP["sglang"] + ["sgl_kernel/flash_ops.abi3.so"]
    assert plan.drop_table(False) == bundle.DROP


def test_sglang_carries_its_own_transformers_over_the_hosts():
    """On an H100 (session 26) SGLang 0.5.15 did not start with the host's transformers 5.17.0 (its qwen3_asr config
    clashes); it started with its pinned 5.12.1 and tokenizers 0.22.2 in its own site. vLLM keeps the host's."""
    host = {bundle.norm(n) for n in ("torch", "transformers", "tokenizers", "huggingface-hub")}
    reqs = [("sglang", "0.5.15"), ("transformers", "5.12.1"), ("tokenizers", "0.22.2"), ("huggingface-hub", "1.33.0")]
    assert bundle.keep(reqs, host, "sglang") == [("sglang", "0.5.15"), ("transformers", "5.12.1"),
                                                ("tokenizers", "0.22.2")]
    assert bundle.keep(reqs, host, "vllm") == [("sglang", "0.5.15")]


def test_sglang_carries_no_cuda_compiler_wheels():
    """The first real build (2026-12-04) carried nvcc 13.4.92's wheels (~150 MB, tileiras included) for SGLang's JIT
    kernels; tvm-ffi never looks for nvcc in a site folder, and those wheels have no cuda_runtime.h: the host's
    nvcc is used (env.sh's CUDA_HOME)."""
    reqs = [("sglang", "0.5.15"), ("nvidia-cuda-nvcc", "13.4.92"), ("nvidia-cuda-crt", "13.4.92"),
            ("nvidia-nvvm", "13.4.92"), ("nvidia-cuda-tileiras", "13.4.92"), ("nvidia-cuda-cccl", "13.4.92")]
    assert bundle.keep(reqs, set(), "sglang") == [("sglang", "0.5.15")]


def test_xgrammar_dependency_is_kept():
    # the first vLLM start on the H200 failed with "No module named 'tvm_ffi'" (xgrammar imports it)
    assert "apache-tvm-ffi" not in plan.EXCLUDE


def test_host_package_list_is_read():
    names = (Path(bundle.__file__).parent / "host_packages.txt").read_text().split()
    assert "torch" in names and "transformers" in names and "vllm" not in names


def _xz_tar(src_parent, name):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as t:
        t.add(src_parent / name, arcname=name)
    return buf.getvalue()


def _install(part, root):
    return subprocess.run(["bash", str(part / "install.sh")], capture_output=True, text=True, check=True,
                          env={"LLMC_ROOT": str(root), "PATH": "/usr/bin:/bin"}).stdout


def test_parts_reassemble_on_the_host(tmp_path):
    src = tmp_path / "src" / "site" / "vllm-0.26.0"
    src.mkdir(parents=True)
    (src / "payload.bin").write_bytes(bytes(range(256)) * 4000)  # ~1 MB, barely compressible
    data = _xz_tar(tmp_path / "src", "site")
    out, root = tmp_path / "gpu", tmp_path / "host"
    size = (len(data) - 1) // 3 + 1 + bundle.PART_SLACK
    dirs = bundle.write_parts([("vllm-0.26.0", data)], out, size, "# env\n")
    assert [d.name for d in dirs] == ["b1", "b2", "b3"]
    msgs = [_install(d, root) for d in dirs]
    assert msgs[0].startswith("vllm-0.26.0 part stored (1 of 3)") and msgs[2].startswith("vllm-0.26.0 installed")
    assert (root / "site" / "vllm-0.26.0" / "payload.bin").read_bytes() == (src / "payload.bin").read_bytes()
    assert (root / "env.sh").read_text() == "# env\n"


def test_parts_are_filled_across_archives_and_each_fits(tmp_path):
    archives = []
    for name, nbytes in (("common", 300_000), ("lmdeploy-0.17.0", 700_000), ("vllm-0.26.0", 200_000)):
        d = tmp_path / "src" / name / "site" / name
        d.mkdir(parents=True)
        (d / "blob").write_bytes(os.urandom(nbytes))
        archives.append((name, _xz_tar(tmp_path / "src" / name, "site")))
    size = 500_000
    dirs = bundle.write_parts(archives, tmp_path / "gpu", size, "# env\n")
    assert len(dirs) == 3  # 1.2 MB in parts of 500 kB less the slack: no part left half empty
    assert all(sum(f.stat().st_size for f in d.iterdir()) <= size for d in dirs)
    carried = [[ln.split()[0] for ln in (d / "ARCHIVES").read_text().splitlines()] for d in dirs]
    assert carried == [["common", "lmdeploy-0.17.0"], ["lmdeploy-0.17.0"], ["lmdeploy-0.17.0", "vllm-0.26.0"]]
    root = tmp_path / "host"
    msgs = [_install(d, root) for d in dirs]
    assert "common installed" in msgs[0] and "lmdeploy-0.17.0 part stored (1 of 3)" in msgs[0]
    assert "lmdeploy-0.17.0 installed" in msgs[2] and "vllm-0.26.0 installed" in msgs[2]
    for name, _ in archives:
        assert (root / "site" / name / "blob").exists()


def test_engine_specs_sites_and_env_names():
    assert bundle.parse_spec("LMDeploy==0.17.0") == ("lmdeploy", "0.17.0")
    assert bundle.env_key(bundle.site_name("lmdeploy", "0.17.0")) == "LMDEPLOY_0_17_0"
    with pytest.raises(SystemExit, match="NAME==VERSION"):
        bundle.parse_spec("lmdeploy>=0.17")
    specs = ["vllm==0.26.0", "lmdeploy==0.17.0", "lmdeploy==0.18.0"]
    assert bundle.resolve_order(specs) == ["lmdeploy==0.18.0", "lmdeploy==0.17.0", "vllm==0.26.0"]
    assert bundle.archive_order(["vllm-0.26.0", "lmdeploy-0.17.0", "lmdeploy-0.18.0"]) == [
        "lmdeploy-0.17.0", "lmdeploy-0.18.0", "vllm-0.26.0"]
    assert bundle.DEFAULT_ENGINES == ["lmdeploy==0.18.0", "vllm==0.26.0"]


def test_shared_dependencies_go_to_common_and_differing_versions_stay():
    plans = {"lmdeploy-0.18.0": [("lmdeploy", "0.18.0"), ("fire", "0.7.1"), ("xgrammar", "0.2.6"), ("pydantic", "2.1")],
             "lmdeploy-0.17.0": [("lmdeploy", "0.17.0"), ("fire", "0.7.1"), ("xgrammar", "0.2.5")],
             "vllm-0.26.0": [("vllm", "0.26.0"), ("xgrammar", "0.2.6"), ("Pydantic", "2.2"), ("msgspec", "0.19")]}
    common, own = bundle.share(plans)
    assert common == [("fire", "0.7.1"), ("xgrammar", "0.2.6")]
    assert own == {"lmdeploy-0.18.0": [("lmdeploy", "0.18.0"), ("pydantic", "2.1")],
                   "lmdeploy-0.17.0": [("lmdeploy", "0.17.0"), ("xgrammar", "0.2.5")],
                   "vllm-0.26.0": [("vllm", "0.26.0"), ("Pydantic", "2.2"), ("msgspec", "0.19")]}


def test_older_version_prefers_the_newer_ones_dependencies(monkeypatch, tmp_path):
    calls = []

    def fake_resolve(spec, work, prefer=()):
        calls.append((spec, list(prefer)))
        engine, version = bundle.parse_spec(spec)
        return [(engine, version), ("fire", "0.7.1"), ("numpy", "2.5"), ("torch", "2.11.0+host")]

    monkeypatch.setattr(bundle, "resolve", fake_resolve)
    plans = bundle.plan_sites(["lmdeploy==0.17.0", "vllm==0.26.0", "lmdeploy==0.18.0"], tmp_path, {"numpy"})
    assert list(plans) == ["lmdeploy-0.18.0", "lmdeploy-0.17.0", "vllm-0.26.0"]
    assert plans["lmdeploy-0.17.0"] == [("lmdeploy", "0.17.0"), ("fire", "0.7.1")]
    assert calls == [("lmdeploy==0.18.0", []), ("lmdeploy==0.17.0", [("fire", "0.7.1")]), ("vllm==0.26.0", [])]


def _fake_python(tmp_path):
    """A python3 for env.sh and the wrappers: prints the environment it was given."""
    b = tmp_path / "bin"
    b.mkdir(exist_ok=True)
    (b / "python3").write_text('#!/bin/sh\ncase "$*" in *torch*) echo /sp;; *) echo "PP=$PYTHONPATH LD=$LD_LIBRARY_PATH ARGS=$*";; esac\n')
    (b / "python3").chmod(0o755)
    return f"{b}:/usr/bin:/bin"


def test_env_sh_names_every_site_and_the_newest_of_each_engine(tmp_path):
    sites = ["lmdeploy-0.18.0", "lmdeploy-0.17.0", "vllm-0.26.0"]
    (tmp_path / "env.sh").write_text(bundle.env_sh(sites))
    show = "echo $LLMC_PATH_LMDEPLOY_0_17_0 $LLMC_PATH_LMDEPLOY $LLMC_PY_VLLM $LLMC_CU12_LD_PATH $LLMC_TOOLS_SITE"
    out = subprocess.run(["bash", "-euc", f"source {tmp_path}/env.sh; {show}"], capture_output=True, text=True,
                         check=True, env={"LLMC_ROOT": "/r", "PATH": _fake_python(tmp_path)}).stdout.split()
    assert out == ["/r/site/lmdeploy-0.17.0:/r/site/common", "/r/site/lmdeploy-0.18.0:/r/site/common",
                   "/r/site/bin/python-vllm-0.26.0", "/r/site/cu12:/sp/nvidia/cu13/lib:/sp/nvidia/nccl/lib",
                   "/r/site/tools"]


def test_python_wrapper_puts_its_site_first(tmp_path):
    sites = ["lmdeploy-0.17.0", "vllm-0.26.0"]
    (tmp_path / "env.sh").write_text(bundle.env_sh(sites))
    (tmp_path / "site" / "bin").mkdir(parents=True)
    outs = {}
    for s in sites:
        w = tmp_path / "site" / "bin" / f"python-{s}"
        w.write_text(bundle.python_wrapper(s))
        w.chmod(0o755)
        outs[s] = subprocess.run([str(w), "-m", "x"], capture_output=True, text=True, check=True,
                                 env={"PATH": _fake_python(tmp_path), "PYTHONPATH": "/repo"}).stdout.strip()
    r = str(tmp_path)
    assert outs["lmdeploy-0.17.0"] == (f"PP={r}/site/lmdeploy-0.17.0:{r}/site/common:/repo "
                                       f"LD={r}/site/cu12:/sp/nvidia/cu13/lib:/sp/nvidia/nccl/lib ARGS=-m x")
    assert outs["vllm-0.26.0"] == f"PP={r}/site/vllm-0.26.0:{r}/site/common:/repo LD= ARGS=-m x"


def test_cublas_shim_covers_lmdeploy_017_imports(tmp_path):
    """0.17's _turbomind imports cublasSetMathMode and cublasGemmGroupedBatchedEx beyond 0.18's six (nm -D)."""
    if not (shutil.which("gcc") and shutil.which("nm")):
        pytest.skip("needs gcc and nm")
    names = ["cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetWorkspace_v2", "cublasGemmEx",
             "cublasGetMathMode", "cublasSetMathMode", "cublasGemmGroupedBatchedEx"]
    (tmp_path / "ext.c").write_text("".join(f"void {n}(void);" for n in names)
                                    + "void f(void){" + "".join(f"{n}();" for n in names) + "}\n")
    ext = tmp_path / "_turbomind.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(ext), str(tmp_path / "ext.c")], check=True)
    (tmp_path / "map").write_text("libcublas.so.12 { global: cublas*; local: *; };\n")
    here = Path(bundle.__file__).parent

    def shim(*sources):
        out = tmp_path / f"shim{len(sources)}.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), *map(str, sources), "-ldl",
                        f"-Wl,--version-script={tmp_path / 'map'}"], check=True)
        return out

    assert bundle.missing_cublas([ext], shim(here / "cublas12_shim.c")) == {
        str(ext): ["cublasGemmGroupedBatchedEx", "cublasSetMathMode"]}
    assert bundle.missing_cublas([ext], shim(here / "cublas12_shim.c", here / "cublas12_shim_extra.c")) == {}


def _cuda_home(tmp_path, sites, path, cuda_home=None):
    (tmp_path / "env.sh").write_text(bundle.env_sh(sites))
    env = {"LLMC_ROOT": "/r", "PATH": f"{path}:{_fake_python(tmp_path)}"} | ({"CUDA_HOME": cuda_home} if cuda_home else {})
    return subprocess.run(["bash", "-euc", f"source {tmp_path}/env.sh; echo ${{CUDA_HOME:-unset}}"], capture_output=True,
                          text=True, check=True, env=env).stdout.strip()


def _toolkit(root, nvcc_only=False):
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (root / "bin" / "nvcc").chmod(0o755)
    if not nvcc_only:
        (root / "include").mkdir()
        (root / "include" / "cuda_runtime.h").write_text("")
        (root / "lib64").mkdir()
        (root / "lib64" / "libcudart.so").write_text("")
    return root


def test_env_sh_gives_sglang_a_cuda_home_that_has_the_runtime(tmp_path):
    """tvm-ffi (SGLang's JIT) runs $CUDA_HOME/bin/nvcc and links -L$CUDA_HOME/lib64 -lcudart; unset, it takes the
    folder above `which nvcc`'s bin/, wrong for a wrapper nvcc (the link failed here so)."""
    kit = _toolkit(tmp_path / "cuda-13.0")
    wrapper = _toolkit(tmp_path / "wrap", nvcc_only=True)
    sites = ["sglang-0.5.15", "vllm-0.26.0"]
    assert _cuda_home(tmp_path, sites, kit / "bin") == str(kit)
    assert _cuda_home(tmp_path, sites, kit / "bin", cuda_home="/mine") == "/mine"
    assert _cuda_home(tmp_path, sites, wrapper / "bin") != str(wrapper)
    assert _cuda_home(tmp_path, ["vllm-0.26.0"], kit / "bin") == "unset"


def _env_var(tmp_path, sites, var, preset=None):
    (tmp_path / "env.sh").write_text(bundle.env_sh(sites))
    env = {"LLMC_ROOT": "/r", "PATH": _fake_python(tmp_path), "CUDA_HOME": "/kit"}
    env |= {var: preset} if preset else {}
    return subprocess.run(["bash", "-euc", f"source {tmp_path}/env.sh; echo ${{{var}:-unset}}"], capture_output=True,
                          text=True, check=True, env=env).stdout.strip()


def test_env_sh_points_sglang_jit_cache_at_the_bundles_folder(tmp_path):
    """SGLang's load_jit loads a module found in $TVM_FFI_CACHE_DIR instead of compiling it: the bundle's folder
    (what --jit-cache carried), unless one is set; without SGLang, nothing."""
    assert _env_var(tmp_path, ["sglang-0.5.15", "vllm-0.26.0"], "TVM_FFI_CACHE_DIR") == "/r/jit/tvm-ffi"
    assert _env_var(tmp_path, ["sglang-0.5.15"], "TVM_FFI_CACHE_DIR", preset="/mine") == "/mine"
    assert _env_var(tmp_path, ["vllm-0.26.0"], "TVM_FFI_CACHE_DIR") == "unset"


def test_jit_cache_carries_the_modules_not_their_build_files(tmp_path):
    mod = tmp_path / "cache" / "sgl_kernel_jit_kvcache_1024_true_c247__arch_9.0__tvmffi_0.1.11"
    mod.mkdir(parents=True)
    for name in ("sgl_kernel_jit_kvcache_1024_true_c247.so", "build.ninja", "cuda.cuda.o", ".ninja_log"):
        (mod / name).write_text("x")
    (tmp_path / "cache" / "BUILT.json").write_text("{}")
    shutil.copytree(tmp_path / "cache", tmp_path / "copy", ignore=bundle.jit_cache_ignore)
    assert sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*") if p.is_file()) \
        == ["BUILT.json", f"{mod.name}/sgl_kernel_jit_kvcache_1024_true_c247.so"]


def test_peer_commands_run_the_console_scripts_from_the_site(tmp_path):
    """bundle.py --peers: a peer's folder works like its venv (bin/python, bin/<command>) on a host without pip."""
    peers = importlib.import_module("bundle_peers")
    site = tmp_path / "fake-peer" / "site"
    (site / "fake_peer").mkdir(parents=True)
    (site / "fake_peer" / "__init__.py").write_text("import sys\nclass App:\n    @staticmethod\n"
                                                     "    def run():\n        print(sys.argv)\n        return 3\n")
    (site / "fake_peer-1.0.dist-info").mkdir()
    (site / "fake_peer-1.0.dist-info" / "entry_points.txt").write_text("[console_scripts]\nfake-peer = fake_peer:App.run\n")
    assert peers.write_commands(tmp_path / "fake-peer", "fake-peer") == ["fake-peer", "python"]
    r = subprocess.run([str(tmp_path / "fake-peer/bin/fake-peer"), "--x", "a b"], capture_output=True, text=True)
    assert (r.returncode, r.stdout.strip()) == (3, "['fake-peer', '--x', 'a b']")
    r = subprocess.run([str(tmp_path / "fake-peer/bin/python"), "-c", "import fake_peer; print(fake_peer.__file__)"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == str(site / "fake_peer" / "__init__.py")
