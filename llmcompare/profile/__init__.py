"""A served engine's GPU timeline: kernel classes and per-step analysis of captured traces. in_engine/ holds the
capture hook loaded into the engine's processes."""
