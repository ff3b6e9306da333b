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
