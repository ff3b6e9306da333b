"""The engine's running requests against the client's concurrency (analysis/agreement.py): a note only where the
engine ran at least one whole request fewer, with what its scheduler held and no claim about the rest."""

from __future__ import annotations

from llmcompare.analysis import agreement
from llmcompare.schema.run import EngineCounters


def test_no_note_for_the_gaps_between_sends_at_low_concurrency():
    # the demo on the CPU vLLM, 2026-12-05: c=1 averaged <1 running, and the old rule said "the rest waited"
    assert agreement.running_note(EngineCounters(mean_running=0.85, target_in_flight=1)) is None
    assert agreement.running_note(EngineCounters(mean_running=240.0, target_in_flight=256)) is None  # within 90%


def test_a_note_says_what_the_scheduler_held_and_not_where_the_rest_were():
    note = agreement.running_note(EngineCounters(mean_running=142.0, mean_waiting=90.5, target_in_flight=256))
    assert "ran 142.0 requests at once" in note and "kept 256 in flight" in note
    assert "90.5 waited in its scheduler" in note and "other ~23.5 were outside it" in note
    assert "not measured which" in note
    bare = agreement.running_note(EngineCounters(mean_running=2.6, target_in_flight=4))
    assert "where the other ~1 were is not measured (no num_requests_waiting)" in bare


def test_mean_waiting_comes_from_the_points_samples():
    samples = [(0.5, {"num_requests_running": 3.0, "num_requests_waiting": 1.0}),
               (1.0, {"num_requests_running": 2.0, "num_requests_waiting": 0.0})]
    c = agreement.compare(samples, [], 4)
    assert (c.mean_running, c.mean_waiting, c.reported) == (2.5, 0.5, False)  # no token counters: not compared
