"""`kernel-bench`: the int4 GEMMs timed in isolation on the model's shapes. bench.py runs in llmcompare's
interpreter; in_engine/ runs inside each engine's environment."""
