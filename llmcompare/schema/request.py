"""The two records of one request: what is asked (RequestSpec, made by workload/) and what happened
(RequestRecord, one line of <engine>.requests.jsonl, written by serve/client.py). Times in seconds from the
point's start, durations in ms."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    index: int  # position in the point's request list
    prompt_len: int  # tokens, by the scenario's tokenizer
    output_len: int  # tokens asked for
    scheduled_s: float = 0.0  # when the request was due, seconds from the point's start
    dispatch_s: float = 0.0  # when it was sent, seconds from the point's start
    queue_ms: float = 0.0  # dispatch - scheduled: waiting in the client for a concurrency slot or a late loop
    ttft_ms: float | None = None  # dispatch -> first chunk carrying a choice
    e2el_ms: float | None = None  # dispatch -> last chunk carrying a choice
    chunk_ms: list[float] = field(default_factory=list)  # arrival of each chunk carrying a choice, from dispatch
    empty_last_chunk: bool = False  # the last choice chunk had no text and a finish_reason (lmdeploy's end chunk)
    reads: int = 0  # socket reads that brought choice chunks: 1 means the whole stream came at once
    prompt_tokens: int | None = None  # from the server's usage
    output_tokens: int | None = None  # from usage, or re-tokenized (see output_tokens_source)
    output_tokens_source: str = "none"  # usage | retokenized | none
    status: int | None = None  # HTTP status
    error: str | None = None
    success: bool = False
    cut_off: bool = False  # in flight when the engine died: neither its result nor its failure
    text: str = field(default="", repr=False)  # generated text; not saved, used to re-tokenize if needed

    @property
    def token_chunk_ms(self) -> list[float]:
        """Arrivals of the chunks that carry tokens (all but an empty end chunk)."""
        return self.chunk_ms[:-1] if self.empty_last_chunk and len(self.chunk_ms) > 1 else self.chunk_ms

    def itl_ms(self) -> list[float]:
        """Gaps between chunks that carry tokens (a chunk may carry several: see tokens_per_chunk)."""
        c = self.token_chunk_ms
        return [b - a for a, b in zip(c, c[1:], strict=False)]

    def itl_all_chunks_ms(self) -> list[float]:
        """vLLM bench serve's ITL: gaps between all chunks carrying a choice, an empty end chunk included."""
        return [b - a for a, b in zip(self.chunk_ms, self.chunk_ms[1:], strict=False)]

    @property
    def tokens_per_chunk(self) -> float | None:
        n = len(self.token_chunk_ms)
        return self.output_tokens / n if self.output_tokens and n else None

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "text"}


@dataclass
class RequestSpec:
    prompt: str
    prompt_len: int  # tokens, by the scenario's tokenizer
    output_len: int  # tokens asked for (max_tokens); with ignore_eos the engine produces exactly this many
