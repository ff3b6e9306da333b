"""Hub models: a `model.path` (or `model.tokenizer`) like `Qwen/Qwen2.5-7B-Instruct-AWQ` that is not a local
directory is resolved through huggingface_hub into a local snapshot directory, which is what the engines get.
Online it is downloaded (with progress bars) into the Hugging Face cache, or taken from there when it is complete;
offline (HF_HUB_OFFLINE=1, or the hub unreachable) the cache alone is used; when neither works the error names
the id and what to do. The cache is huggingface_hub's: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from llmcompare.errors import ScenarioError

# org/name, as the hub spells repository ids (a relative path to be made by model.make must start with ./)
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]*\w")


TOKENIZER_FILES = ["*.json", "*.txt", "*.model", "*.tiktoken", "*.py", "*.jinja"]


_TRUE = ("1", "on", "yes", "true")


def is_hub_id(value: str) -> bool:
    """A hub repository id rather than a local path: org/name, and no such file or directory here."""
    return bool(HUB_ID.fullmatch(value)) and ".." not in value and not os.path.exists(value)


def cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    return Path(os.path.expanduser(os.environ.get("HF_HOME") or "~/.cache/huggingface")) / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def _download(repo_id: str, local_only: bool, allow_patterns: list[str] | None) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(repo_id, cache_dir=str(cache_dir()), local_files_only=local_only,
                             allow_patterns=allow_patterns, endpoint=os.environ.get("HF_ENDPOINT") or None)


def cached(repo_id: str, allow_patterns: list[str] | None = None) -> str | None:
    """The local snapshot directory of `repo_id` if the cache has it; never downloads."""
    try:
        return _download(repo_id, True, allow_patterns)
    except Exception:  # huggingface_hub's errors differ between its versions; any of them means "not here"
        return None


def resolve(repo_id: str, what: str = "model.path", allow_patterns: list[str] | None = None) -> str:
    """The local directory of hub repository `repo_id`: downloaded (with progress) unless offline or cached."""
    local_only = offline()
    print(f"{what}: {repo_id} is not a local directory: resolving it through the Hugging Face hub "
          f"({'offline: the local cache only' if local_only else 'downloading what is missing'}; "
          f"cache {cache_dir()})", file=sys.stderr, flush=True)
    try:
        path = _download(repo_id, local_only, allow_patterns)
    except ImportError:
        raise ScenarioError(f"{what}: {repo_id!r} is a hub id, and huggingface_hub is not installed "
                            "(pip install huggingface_hub)") from None
    except Exception as e:  # every failure is reported the same way, with its reason
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".strip()
        how = ("HF_HUB_OFFLINE is set and the cache does not have it" if local_only
               else "it could not be downloaded, and the cache does not have it")
        raise ScenarioError(
            f"{what}: {repo_id!r} is neither a local directory nor a model the Hugging Face hub could give: {how} "
            f"(cache {cache_dir()}; {reason}). Fix: download it where there is internet (`hf download {repo_id}`, "
            f"then copy the cache or set HF_HOME to it), unset HF_HUB_OFFLINE if this machine is online, check the "
            f"id, or set {what} to a local checkpoint directory") from None
    print(f"{what}: {repo_id} -> {path}", file=sys.stderr)
    return path


def remote_size(repo_id: str) -> int | None:
    """Bytes of the repository's files on the hub (what a first download costs); None when it cannot be told."""
    if offline():
        return None
    try:
        from huggingface_hub import HfApi

        info = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None).model_info(repo_id, files_metadata=True)
        return sum((f.size or 0) for f in info.siblings or [])
    except Exception:  # unreachable, unknown id, gated: the caller says it cannot tell
        return None


def resolve_tokenizer(model) -> None:
    """model.tokenizer given as a hub id becomes its local directory (its tokenizer files only)."""
    tok = model.tokenizer or None
    if tok and is_hub_id(tok):
        model.tokenizer = resolve(tok, "model.tokenizer", TOKENIZER_FILES)
