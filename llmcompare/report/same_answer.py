"""The report's same-answer section: each engine's answer to the fixed greedy request against the reference's (the
baseline), from the engines' records only (analysis/same_answer.py compares them); and the mark an engine whose
answer disagrees carries wherever the report names it (report.build.Served.title). engines: Served by label."""

from __future__ import annotations

from llmcompare.analysis import same_answer as sa
from llmcompare.report.doc import Doc

MARK = "different answer"  # after a disagreeing engine's title: "vllm-b (0.26.0) [different answer]"


def checks(engines: dict, baseline: str | None) -> dict[str, sa.AnswerCheck]:
    """Every engine's check against the baseline; {} when no engine has an answer on file (older runs)."""
    if baseline is None or not any(sv.rec.answer is not None for sv in engines.values()):
        return {}
    return sa.check_all({lb: sv.rec.answer for lb, sv in engines.items()}, baseline)


def mark(engines: dict, found: dict[str, sa.AnswerCheck]) -> None:
    for lb, c in found.items():
        if c.disagrees:
            engines[lb].mark = MARK


def said(engines: dict, baseline: str, found: dict[str, sa.AnswerCheck]) -> list[str]:
    """For the report's opening: the engines whose answer disagrees (nothing when every answer agrees)."""
    bad = [lb for lb, c in found.items() if c.disagrees]
    if not bad:
        return []
    names = ", ".join(engines[lb].label for lb in bad)
    return [f"Same work, same answer: {names} {'does' if len(bad) == 1 else 'do'} not give the answer "
            f"{engines[baseline].label} gives to the same greedy request ({'; '.join(found[lb].reasons[0] for lb in bad)}): "
            f"{'its' if len(bad) == 1 else 'their'} speed is not a like-for-like comparison, marked [{MARK}] "
            "throughout (section Same work, same answer)."]


def _cell(text: str, n: int = 40) -> str:
    r = repr(text[:n]) + ("..." if len(text) > n else "")
    return r.replace("|", "\\|")


def _agreement(c: sa.AnswerCheck) -> str:
    if c.basis == "text":
        return "texts differ at a near tie (one side)" if c.near_tie else \
            "texts " + ("the same" if c.verdict == sa.AGREES else "differ")
    if c.basis != "logprobs" or c.verdict == sa.REFERENCE:
        return "–"
    tail = f", then a near tie at {c.first_difference + 1}" if c.near_tie else ""
    return f"{c.agreeing} of {c.compared}{tail}"


def section(doc: Doc, engines: dict, baseline: str, found: dict[str, sa.AnswerCheck]) -> None:
    if not found:
        return
    doc.h(2, "Same work, same answer")
    ref = engines[baseline].rec.answer
    if ref is not None:
        doc.p(f"Before its first load point each engine was sent one fixed greedy request: the prompt "
              f"{_cell(ref.prompt, 80)}, {ref.max_tokens} output tokens, the top-{ref.top_k} logprobs of each. Each "
              f"answer is compared with the reference, {engines[baseline].title}: the generated tokens one by one "
              f"(a flip within {ref.tie_margin:g} nats in both engines is a near tie), and the first output token's "
              f"top-{ref.top_k} distribution, KL(reference || engine) over the tokens in both, renormalised over "
              f"them, at most {ref.max_kl:g} nats. An engine that disagrees is marked [{MARK}] wherever it is named: "
              "a faster kernel that computes something else is not faster.")
    rows = []
    for lb, c in found.items():
        a = engines[lb].rec.answer
        kl = "–" if c.kl is None else f"{c.kl:.3g}"
        rows.append([lb, c.verdict, c.basis or "–", _agreement(c), kl, "–" if c.common is None else str(c.common),
                     _cell(a.text) if a is not None and not a.error else "–",
                     "; ".join(c.reasons + (a.notes if a is not None else [])) or "–"])
    doc.table(["engine", "verdict", "compared on", "top-1 tokens agreeing", "first token KL (nats)",
               "common top-k", "answer", "why"], rows)
    if not any(c.verdict in (sa.AGREES, sa.DISAGREES) for c in found.values()):
        doc.p("No answer could be compared with the reference's (see why).")
    doc.method("Same work, same answer (llmcompare/analysis/same_answer.py)", sa.METHOD)
