"""What a server's log says it chose (LogFacts, recorded with every run), what doctor predicts it will choose
(KernelChoice), and the error for an engine that ran something other than what was asked."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmcompare.engines import turbomind_log


class EngineFallbackError(RuntimeError):
    """The engine ran something other than what was asked (lmdeploy's silent PyTorch fallback)."""


@dataclass
class LogFacts:
    """What a server's log says it chose; recorded with every run."""

    kernels: dict[str, str] = field(default_factory=dict)  # linear method -> kernel, e.g. AWQMarlin -> Machete
    version: str | None = None
    notes: list[str] = field(default_factory=list)
    max_model_len: int | None = None  # the context length it printed (lmdeploy's session_len)
    gemm_choices: list[dict] = field(default_factory=list)  # TurboMind: per GEMM problem, its kernel (turbomind_log.Tally)


GEMM_VERBOSE_NOTE = "TM_GEMM_VERBOSE"  # starts the note of an engine whose log holds `[Gemm] plan` lines


def gemm_facts(facts: LogFacts, tally: turbomind_log.Tally) -> LogFacts:
    """TurboMind's GEMM choices, and a note when it printed one line per GEMM per forward pass (0.18 with
    TM_GEMM_VERBOSE=1: formatted on the thread that launches the kernels, so the run's throughput is that of an
    instrumented engine; turbomind_log.py)."""
    if records := tally.records():
        facts.gemm_choices = records
    if tally.plan_lines:
        facts.notes.append(f"{GEMM_VERBOSE_NOTE}: {tally.plan_lines} '[Gemm] plan' lines in its log, one per GEMM "
                           "per forward pass: throughput measured with this logging on (instrumented)")
    return facts


@dataclass
class KernelChoice:
    """The int4 GEMM kernel an engine will choose, predicted before it starts (EngineKind.predict_kernel)."""

    kernel: str | None  # e.g. MacheteLinearKernel; None: not predicted
    why: str
    problem: bool = False
