"""The package's structure: no import circle anywhere (function-level imports included), and the layer contracts
of pyproject.toml ([tool.importlinter]) kept. The graph is read from the source with ast, so it sees what
import-linter sees and also imports made inside functions."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "llmcompare"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The llmcompare modules `path` imports, anywhere in the file; `from P import m` is an arrow to P.m when m is
    a module, else to P."""
    me = module_name(path)
    base = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base.split(".")[: len(base.split(".")) - node.level + 1]
                src = ".".join(parent + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            for a in node.names:
                out.add(f"{src}.{a.name}" if f"{src}.{a.name}" in modules else src)
    return {m for m in out if m in modules and m != me}


def graph(pkg: Path = PKG) -> dict[str, set[str]]:
    files = list(pkg.rglob("*.py"))
    modules = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, modules) for p in files}


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a module importing itself."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_circle():
    g = graph()
    assert len(g) > 50, "the graph was not read"
    assert circles(g) == []


def test_the_circle_check_finds_a_circle(tmp_path):
    pkg = tmp_path / "llmcompare"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("from llmcompare.a import y\n")
    (pkg / "a" / "y.py").write_text("def f():\n    from llmcompare.a.x import z  # inside a function: still an arrow\n")
    files = list(pkg.rglob("*.py"))
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        modules = {module_name(p) for p in files}
        g = {module_name(p): imports_of(p, modules) for p in files}
    finally:
        ROOT = old
    assert circles(g) == [["llmcompare.a.x", "llmcompare.a.y"]]


def test_the_import_contracts_are_kept():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    p = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "BROKEN" not in p.stdout and " KEPT" in p.stdout


def test_no_module_is_over_400_lines_and_no_package_has_over_25_modules():
    long = {module_name(p): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
    for d in [PKG, *(p for p in PKG.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        assert len(list(d.glob("*.py"))) <= 25, d
