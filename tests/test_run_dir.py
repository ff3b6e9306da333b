"""The run directory as a shared resource (issue 27): what the exit code counts, one writer at a time, and no
write that follows a link planted in it."""

import json
import shutil
from pathlib import Path

from llmcompare.serve import runner

DATA = Path(__file__).resolve().parent / "data"


def test_the_exit_code_counts_the_last_attempt_of_each_cell_not_every_attempt(tmp_path):
    # the committed H200 run: c=64 in=512 untrusted in both attempts of repeats 0 and 1 (the runner gave up on
    # them), c=256 in=512 repeat 1 untrusted once and trusted when measured again: 5 untrusted attempts, 2 cells
    d = tmp_path / "run"
    shutil.copytree(DATA / "h200-grid-vllm", d)
    assert runner.outcome(d) == (0, 2)
    run = json.loads((d / "run.json").read_text())  # `--resume --redo untrusted` measured both again, trusted
    pts = run["engines"]["vllm"]["points"]
    for r in (0, 1):
        again = next(p for p in pts if (p["index"], p["repeat"], p["attempt"]) == (6, r, 2))
        pts.append({**again, "attempt": 3, "status": "complete", "trust": {**again["trust"], "trusted": True}})
    (d / "run.json").write_text(json.dumps(run))
    assert runner.outcome(d) == (0, 0)
