"""llmcompare: which LLM serving engine is faster on my model and GPU, by how much, and why."""

__version__ = "0.1.0"
