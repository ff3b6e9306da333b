"""The capture hook: this directory goes first on a profiled server's PYTHONPATH (capture.hook_env)."""
