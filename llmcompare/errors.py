"""The errors that cross layers: each message names the file, field or step and what is valid."""

from __future__ import annotations


class SetupError(RuntimeError):
    """An environment could not be made; the message says which step and what to do."""


class ResultsWriteError(RuntimeError):
    """Results could not be written; the message names the file."""


class ResultsReadError(ValueError):
    """A result file is missing, corrupt or of an unknown schema; the message names the file."""


class ScenarioError(ValueError):
    """A scenario file or override is invalid; the message names the field and what is valid."""


class RunDirInUse(ValueError):
    """Another llmcompare holds the run directory's lock; the message names the directory and its pid."""
