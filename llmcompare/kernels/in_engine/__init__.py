"""Code run inside an engine's interpreter (`python -m llmcompare.kernels.in_engine.worker`): the standard
library, numpy, torch, the engine and a few plain llmcompare modules only (pyproject's import contracts)."""
