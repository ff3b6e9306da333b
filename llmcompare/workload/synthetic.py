"""Generated workloads beyond `random`: lengths drawn like ShareGPT's (`synthetic-sharegpt`) and prompts that
share a prefix (`shared-prefix`). Prompts are built of single-token " word" entries, as `random`'s are, so every
length is exact in the scenario's tokenizer (workload.Prompts.exact builds and checks them).

ShareGPT's lengths (`synthetic-sharegpt`): the means are the published ones of the vLLM paper (Kwon et al.,
"Efficient Memory Management for Large Language Model Serving with PagedAttention", SOSP 2023,
arXiv:2309.06180, Fig. 11: ShareGPT prompts 161.31 tokens and outputs 337.99 tokens on average, 8.4x and 5.8x
Alpaca's 19.31 and 58.45). Each length is lognormal with that mean; the spread (sigma, log space) is OUR choice,
not fitted (the paper gives histograms, not parameters): 1.0 for prompts, 0.8 for outputs, both overridable.
Draws are clipped as vLLM's ShareGPT sampling filters pairs: each side >= 4 tokens, prompt <= 1024, prompt +
output <= 2048 (and <= workload.max_total_len where the engine's context is smaller), so the clipped means are
a little lower than the published ones (synthetic_stats reports them).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from llmcompare.errors import ScenarioError

SHAREGPT_MEAN_INPUT_TOKENS = 161.31  # vLLM paper, Fig. 11 (see the module docstring)


SHAREGPT_MEAN_OUTPUT_TOKENS = 337.99


MIN_LEN, MAX_INPUT, MAX_TOTAL = 4, 1024, 2048  # vLLM's ShareGPT filter (benchmarks' sample_sharegpt_requests)


@dataclass
class LengthPair:
    input_len: int  # tokens
    output_len: int  # tokens


def _lognormal(rng: random.Random, mean: float, sigma: float) -> float:
    """A lognormal draw with the given mean (mu = ln(mean) - sigma^2 / 2)."""
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)


def sharegpt_lengths(rng: random.Random, sigma_in: float, sigma_out: float, max_total: int) -> LengthPair:
    total = min(MAX_TOTAL, max_total)
    i = min(max(MIN_LEN, round(_lognormal(rng, SHAREGPT_MEAN_INPUT_TOKENS, sigma_in))), MAX_INPUT, total - MIN_LEN)
    o = min(max(MIN_LEN, round(_lognormal(rng, SHAREGPT_MEAN_OUTPUT_TOKENS, sigma_out))), total - i)
    return LengthPair(i, o)


def synthetic_stats(seed: int, n: int, sigma_in: float, sigma_out: float, max_total: int) -> dict[str, float]:
    """Mean input and output tokens of n draws (what the clipping leaves of the published means)."""
    pairs = [sharegpt_lengths(random.Random(f"{seed}/stats/{k}"), sigma_in, sigma_out, max_total) for k in range(n)]
    return {"mean_input_tokens": sum(p.input_len for p in pairs) / n,
            "mean_output_tokens": sum(p.output_len for p in pairs) / n}


def check(wl) -> None:
    """Fields of synthetic-sharegpt (scenario.validate calls it; shared-prefix's: workload/checks.py)."""
    if wl.dataset == "synthetic-sharegpt":
        for name in ("sigma_input", "sigma_output"):
            if not 0 <= getattr(wl, name) <= 3:
                raise ScenarioError(f"workload.{name}: must be in 0..3 (lognormal sigma), got {getattr(wl, name)}")
        if wl.max_total_len < 2 * MIN_LEN:
            raise ScenarioError(f"workload.max_total_len: must be >= {2 * MIN_LEN}, got {wl.max_total_len}")
