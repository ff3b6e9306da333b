"""The host and its engines before a run: `setup` (environments), `doctor` (checks), hub models, GPUs and host
facts."""
