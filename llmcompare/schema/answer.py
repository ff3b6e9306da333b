"""Same work, same answer: one engine's answer to the fixed greedy request it is sent once, after its server is
ready and before its first load point (serve/same_answer.py sends it; analysis/same_answer.py compares the
answers; scenario `checks.same_answer` configures it). Kept on the engine's record in run.json (`answer`); files
written before the check have none (null)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AnswerProbe:
    """The request as sent and the answer as the server gave it (tokens and logprobs as its OpenAI server names
    them: decoded text, most probable first)."""

    prompt: str = ""  # the fixed prompt, as text (every engine gets exactly this string)
    max_tokens: int = 0  # output tokens asked for (ignore_eos: exactly this many)
    top_k: int = 0  # `logprobs` asked for: alternatives per output position
    max_kl: float = 0.0  # nats: the tolerance the scenario gave (checks.same_answer.max_kl)
    tie_margin: float = 0.0  # nats: checks.same_answer.tie_margin
    request_body: dict = field(default_factory=dict)  # the exact body sent (non-streamed /v1/completions)
    sent_at: str | None = None
    elapsed_s: float | None = None  # from sending to the whole answer read
    prompt_tokens: int | None = None  # usage.prompt_tokens: the prompt as the engine tokenized it
    completion_tokens: int | None = None  # usage.completion_tokens
    finish_reason: str | None = None
    text: str = ""  # choices[0].text
    # choices[0].logprobs, when the server returned them: per output position, the generated token, its logprob,
    # and the top-k alternatives {token: logprob} (sorted most probable first; -inf kept, NaN dropped)
    logprobs_returned: bool = False
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was odd but not fatal (e.g. fewer than top_k alternatives)
    error: str | None = None  # the request failed (timeout, HTTP status, a malformed answer): no answer to compare

    @property
    def answered(self) -> bool:
        return self.error is None
