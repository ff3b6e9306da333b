"""What each request asks: prompts of exact token lengths, generated or read from a dataset, the same list for
every engine."""
