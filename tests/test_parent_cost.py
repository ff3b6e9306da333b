"""scripts/parent_cost.py end to end: two trees (a git worktree of HEAD and this one) each run a point through the
worker pool against the fake server, save every record, and report the parent's CPU per request side by side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_both_trees_measure_a_saved_point_and_the_worktree_is_removed(tmp_path):
    out = tmp_path / "pc.json"
    before = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout
    p = subprocess.run([sys.executable, str(ROOT / "scripts/parent_cost.py"), "--baseline", "HEAD", "--repeats", "1",
                        "--concurrency", "8", "--seconds", "0.5", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(out.read_text())
    rows = res["rows"]
    assert [r["tree"] for r in rows] == ["baseline", "current"]
    assert rows[0]["llmcompare_from"] != rows[1]["llmcompare_from"] == str(ROOT)
    for r in rows:
        assert r["completed"] == r["lines_saved"] >= 32 and r["failed"] == 0  # every record saved, one line each
        assert r["parent_cpu_us_per_request"] > 0 and r["worker_cpu_us_per_request"] > 0
    s = res["summary"]["parent_cpu_us_per_request"]
    assert len(s["ratios"]) == 1 and s["ratios"][0] > 0
    assert "current/baseline" in p.stdout
    after = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout
    assert after == before  # the baseline's worktree is gone


def test_a_baseline_tree_stands_for_a_revision_and_bad_baselines_are_named(tmp_path):
    script = str(ROOT / "scripts/parent_cost.py")
    bad = subprocess.run([sys.executable, script, "--baseline", "no-such-rev"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--baseline no-such-rev: not a revision" in bad.stderr
    empty = subprocess.run([sys.executable, script, "--baseline-tree", str(tmp_path)], capture_output=True, text=True)
    assert empty.returncode != 0 and "no llmcompare/serve/workers.py there" in empty.stderr
    tree = tmp_path / "base"
    tree.mkdir()
    subprocess.run(f"git -C {ROOT} archive HEAD llmcompare | tar -x -C {tree}", shell=True, check=True)
    out = tmp_path / "pc.json"
    p = subprocess.run([sys.executable, script, "--baseline-tree", str(tree), "--repeats", "1", "--concurrency", "4",
                        "--seconds", "0.3", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["baseline"] == f"tree {tree.resolve()}" and res["rows"][0]["llmcompare_from"] == str(tree.resolve())
    assert tree.is_dir()  # a tree it was given is not removed
