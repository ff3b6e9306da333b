"""Same work, same answer: each engine's answer to the one fixed greedy request (schema/answer.AnswerProbe) against
the reference engine's (the report's baseline). A faster kernel that computes something else is not faster: an
engine whose answer disagrees is marked wherever the report compares engines.

The method is METHOD below (the report states it in its Method section).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmcompare.schema.answer import AnswerProbe

REFERENCE, AGREES, DISAGREES, NOT_CHECKED = "reference", "agrees", "disagrees", "not checked"

METHOD = """Every engine is sent the same request once, after its server is ready and before its first load point:
checks.same_answer.prompt (text) to /v1/completions, not streamed, with the engine kind's greedy sampling fields
(temperature 0, top_k 1, neutral penalties), ignore_eos, max_tokens (default 8) and logprobs = top_k (default 5).
Its answer (the generated tokens, and per output position the top-k alternatives {token: logprob}, tokens as the
server spells them: decoded text) is kept on the engine's record in run.json. Each engine's answer is compared with
the reference engine's (the report's baseline), with the reference's tolerances:
  prompt             the same text, and where both servers report usage.prompt_tokens, the same count (else the
                     engines did not get the same input: disagrees)
  top-1 agreement    the generated tokens, position by position over the first min(both lengths) output tokens, up
                     to the first position where they differ; a difference there is a near tie (not a disagreement;
                     the positions after it are not compared, their inputs differ) when both tokens are among both
                     engines' top-k at that position and each engine puts them within tie_margin nats (default 0.1)
  KL                 of the first output token: P, Q the reference's and the engine's top-k there, S the tokens in
                     both (the intersection), each renormalised over S: p_t = exp(P_t) / sum over S of exp(P_s),
                     q_t likewise; KL(P || Q) = sum over S of p_t ln(p_t / q_t), in nats. Above max_kl (default
                     0.05) disagrees; S empty (no token in common) disagrees. The intersection leaves out the
                     probability of tokens only one engine lists; the report gives |S| beside the KL
  without logprobs   when either engine returned none, the generated texts are compared instead: equal agrees;
                     different disagrees, unless the one with logprobs shows a near tie on its own side: at its
                     first output token that leaves the other's text, the other's text goes on with a token of its
                     top-k there, within tie_margin of the one it picked (agrees, said as a one-sided near tie: the
                     other engine's side of the tie cannot be seen; seen on vLLM, whose two starts on one H100 picked
                     either of two tokens with equal logprobs, reports/h100-capacity)
  not checked        no answer on file (the check was off, or the run predates it), a probe that failed (its error
                     is shown), another prompt, or a reference without an answer
An engine disagrees when any of the above says so; the report marks it and states why.
"""


@dataclass
class AnswerCheck:
    """One engine's answer against the reference's."""

    engine: str
    verdict: str  # REFERENCE | AGREES | DISAGREES | NOT_CHECKED
    basis: str = ""  # logprobs | text ("" when not compared)
    compared: int = 0  # output positions compared for top-1 agreement
    agreeing: int = 0  # leading positions whose generated tokens are the same
    first_difference: int | None = None  # 0-based output position of the first different token
    near_tie: bool = False  # that difference is a near tie (METHOD)
    kl: float | None = None  # nats: KL(reference || engine) of the first output token over the common tokens
    common: int | None = None  # tokens in both top-k at the first output position
    reasons: list[str] = field(default_factory=list)

    @property
    def disagrees(self) -> bool:
        return self.verdict == DISAGREES


def _finite(d: dict) -> dict[str, float]:
    """The entries that are numbers and not NaN (-inf kept: probability 0)."""
    return {str(k): float(v) for k, v in (d or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)}


def _logsumexp(xs: list[float]) -> float:
    m = max(xs)
    return m if m == -math.inf else m + math.log(sum(math.exp(x - m) for x in xs))


def kl_common(p: dict, q: dict) -> tuple[float | None, int]:
    """(KL(P || Q) in nats over the tokens in both, each renormalised over them; how many there are). KL is None
    when there are none in common (or the reference gives them no probability at all)."""
    p, q = _finite(p), _finite(q)
    common = [t for t in p if t in q]
    if not common:
        return None, 0
    zp, zq = _logsumexp([p[t] for t in common]), _logsumexp([q[t] for t in common])
    if zp == -math.inf:
        return None, len(common)
    kl = 0.0
    for t in common:
        lp, lq = p[t] - zp, q[t] - zq
        if lp == -math.inf:
            continue
        if lq == -math.inf:
            return math.inf, len(common)
        kl += math.exp(lp) * (lp - lq)
    return max(kl, 0.0), len(common)  # rounding can leave -1e-17


def generated(a: AnswerProbe) -> list[str]:
    """The generated tokens: as the server listed them, else each position's most probable alternative."""
    if a.tokens:
        return list(a.tokens)
    out = []
    for d in a.top_logprobs:
        d = _finite(d)
        if not d:
            break
        out.append(max(d, key=d.get))
    return out


def _has_logprobs(a: AnswerProbe) -> bool:
    return a.logprobs_returned and bool(a.top_logprobs) and bool(_finite(a.top_logprobs[0]))


def _near_tie(ref: AnswerProbe, eng: AnswerProbe, i: int, a: str, b: str) -> bool:
    """Both tokens among both engines' top-k at position i, and each engine puts them within tie_margin."""
    for x in (ref, eng):
        d = _finite(x.top_logprobs[i]) if i < len(x.top_logprobs) else {}
        if a not in d or b not in d or abs(d[a] - d[b]) > ref.tie_margin:
            return False
    return True


def _one_sided_tie(a: AnswerProbe, other: str, margin: float) -> str | None:
    """Where a's generated tokens first leave the text `other`: is other's continuation one of a's top-k there,
    within margin nats of a's pick? The words for it, or None (METHOD, without logprobs)."""
    toks, done = generated(a), ""
    for i, t in enumerate(toks):
        if other.startswith(done + t):
            done += t
            continue
        d = _finite(a.top_logprobs[i]) if i < len(a.top_logprobs) else {}
        alt = [(x, lp) for x, lp in d.items() if x and x != t and other.startswith(done + x)]
        if t not in d or not alt:
            return None
        x, lp = max(alt, key=lambda p: p[1])
        if abs(d[t] - lp) > margin:
            return None
        return (f"a near tie on one side: at output token {i + 1} the engine with logprobs put {t!r} and the other's "
                f"{x!r} {abs(d[t] - lp):.4f} nats apart (within {margin:g}); the other's side is not seen")
    return None


def _tokens(out: AnswerCheck, ref: AnswerProbe, eng: AnswerProbe) -> None:
    """Top-1 agreement, position by position, to the first difference."""
    r, e = generated(ref), generated(eng)
    out.compared = min(len(r), len(e))
    if len(r) != len(e):
        out.reasons.append(f"answers of {len(r)} and {len(e)} tokens: the first {out.compared} compared")
    for i in range(out.compared):
        if r[i] != e[i]:
            out.first_difference, out.agreeing = i, i
            out.near_tie = _near_tie(ref, eng, i, r[i], e[i])
            what = "a near tie" if out.near_tie else "a disagreement"
            out.reasons.append(f"output token {i + 1} differs: {e[i]!r} where the reference has {r[i]!r} ({what}"
                               + (f": within {ref.tie_margin:g} nats in both)" if out.near_tie else ")"))
            return
    out.agreeing = out.compared


def compare(name: str, ref: AnswerProbe | None, eng: AnswerProbe | None) -> AnswerCheck:
    """Engine `name`'s answer against the reference's (METHOD), with the reference's tolerances."""
    out = AnswerCheck(name, NOT_CHECKED)
    if eng is None:
        out.reasons.append("no answer on file (checks.same_answer was off, or the run predates the check)")
        return out
    if eng.error:
        out.reasons.append(f"its probe failed: {eng.error}")
        return out
    if ref is None or ref.error:
        out.reasons.append("the reference engine has no answer to compare with")
        return out
    if eng.prompt != ref.prompt:
        out.reasons.append("it was sent another prompt than the reference (another checks.same_answer.prompt)")
        return out
    if None not in (ref.prompt_tokens, eng.prompt_tokens) and ref.prompt_tokens != eng.prompt_tokens:
        out.verdict, out.basis = DISAGREES, "prompt"
        out.reasons.append(f"not the same input: the prompt is {eng.prompt_tokens} tokens to it, {ref.prompt_tokens} "
                           "to the reference")
        return out
    if not (_has_logprobs(ref) and _has_logprobs(eng)):
        who = " and ".join(w for w, a in (("the reference", ref), ("this engine", eng)) if not _has_logprobs(a))
        out.basis = "text"
        same = eng.text == ref.text
        tie = None if same else (_one_sided_tie(eng, ref.text, ref.tie_margin) if _has_logprobs(eng) else
                                 _one_sided_tie(ref, eng.text, ref.tie_margin) if _has_logprobs(ref) else None)
        out.verdict, out.near_tie = AGREES if same or tie else DISAGREES, tie is not None
        out.reasons.append(f"{who} returned no logprobs: the texts compared, "
                           + ("the same" if same else f"different ({eng.text[:40]!r} against {ref.text[:40]!r})")
                           + (f"; {tie}" if tie else ""))
        return out
    out.basis = "logprobs"
    _tokens(out, ref, eng)
    if out.compared == 0:
        out.verdict = NOT_CHECKED
        out.reasons.append("no output tokens to compare")
        return out
    out.kl, out.common = kl_common(ref.top_logprobs[0], eng.top_logprobs[0])
    bad_tokens = out.first_difference is not None and not out.near_tie
    if out.kl is None:
        out.reasons.append("no token in common among the first output token's top-k")
    elif out.kl > ref.max_kl:
        out.reasons.append(f"first output token's KL {out.kl:.3g} nats is above {ref.max_kl:g} "
                           f"(over the {out.common} tokens in both top-k)")
    out.verdict = DISAGREES if bad_tokens or out.kl is None or out.kl > ref.max_kl else AGREES
    return out


def check_all(answers: dict[str, AnswerProbe | None], reference: str) -> dict[str, AnswerCheck]:
    """Every engine's check against `reference` (a key of `answers`), in the order given."""
    ref = answers.get(reference)
    out = {}
    for name, a in answers.items():
        if name != reference:
            out[name] = compare(name, ref, a)
        elif a is None or a.error:
            out[name] = compare(name, None, a)
            out[name].reasons.insert(0, "the reference")
        else:
            out[name] = AnswerCheck(name, REFERENCE, "logprobs" if _has_logprobs(a) else "text",
                                    compared=len(generated(a)))
    return out
