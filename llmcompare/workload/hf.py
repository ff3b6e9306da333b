"""`dataset: hf`: prompts from a Hugging Face dataset, read through the `datasets` library (an optional
dependency: `pip install 'llmcompare[datasets]'`).

`workload.path` is a local data file (.json, .jsonl, .csv, .parquet: read with the matching `datasets` builder),
a local directory (one written by `Dataset.save_to_disk`, or a dataset repository's files), or a hub name
(org/name: downloaded when online, taken from the cache when HF_DATASETS_OFFLINE=1). `workload.split` picks
the split (default train). Columns: `prompt_column` is the prompt (default: the first of PROMPT_COLUMNS the data
has); `output_column`, if given, is the reply whose token count is the request's output length, with vLLM's
ShareGPT filter (workload.Prompts._tokenized); without it every request asks for workload.output_len tokens. A
ShareGPT-style column of turns (`conversations`: [{"value": str}, ...]) gives the first turn as the prompt and
the second as the reply, as `dataset: sharegpt` does.
"""

from __future__ import annotations

from pathlib import Path

from llmcompare.errors import ScenarioError

PROMPT_COLUMNS = ("prompt", "instruction", "question", "input", "text", "conversations")


BUILDERS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow"}


INSTALL = "pip install 'llmcompare[datasets]' (or pip install datasets)"


def check(wl) -> None:
    if wl.dataset != "hf":
        if wl.prompt_column or wl.output_column:
            raise ScenarioError(f"workload.prompt_column/output_column: only for dataset hf, got {wl.dataset}")
        return
    if not wl.path:
        raise ScenarioError("workload.path: required for dataset hf (a data file, a dataset directory or a hub "
                            "name such as org/name)")


def _load(where: str, split: str):
    try:
        import datasets
    except ImportError:
        raise ScenarioError(f"workload.dataset hf: the `datasets` package is not installed; {INSTALL}") from None
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    p = Path(where)
    try:
        if p.is_file():
            builder = BUILDERS.get(p.suffix.lower())
            if builder is None:
                raise ScenarioError(f"workload.path: {where!r}: unknown data file type {p.suffix!r}; valid: "
                                    f"{', '.join(BUILDERS)} (or a dataset directory or hub name)")
            return datasets.load_dataset(builder, data_files=str(p), split=split)
        if p.is_dir() and ((p / "dataset_info.json").is_file() or (p / "state.json").is_file()):
            ds = datasets.load_from_disk(str(p))
            return ds[split] if isinstance(ds, datasets.DatasetDict) else ds
        return datasets.load_dataset(where, split=split)
    except ScenarioError:
        raise
    except (KeyError, ValueError, OSError, FileNotFoundError, ConnectionError) as e:
        raise ScenarioError(f"workload.path: cannot read {where!r} (split {split!r}) as a Hugging Face dataset: "
                            f"{type(e).__name__}: {str(e)[:300]}") from None


def _column(ds, name: str | None, field_name: str, default: tuple[str, ...] = ()) -> str | None:
    cols = list(ds.column_names)
    if name is None:
        return next((c for c in default if c in cols), None)
    if name not in cols:
        raise ScenarioError(f"workload.{field_name}: no column {name!r} in the dataset; columns: {', '.join(cols)}")
    return name


def _text(v, where: str, turn: int | None = None) -> str:
    if turn is not None:  # a ShareGPT-style list of turns
        if not (isinstance(v, list) and len(v) > turn and isinstance(v[turn], dict)
                and isinstance(v[turn].get("value"), str)):
            raise ScenarioError(f"{where}: expected a list of turns with a string \"value\", got {str(v)[:80]!r}")
        return v[turn]["value"]
    if not isinstance(v, str):
        raise ScenarioError(f"{where}: expected a string, got {type(v).__name__} {str(v)[:80]!r}")
    return v


def read(cfg) -> tuple[list[tuple[str, str | None, None]], tuple]:
    """Records (prompt, reply or None, None) as workload.read_records gives them, and their cache key."""

    where = cfg.path  # resolved (expand.py)
    ds = _load(where, cfg.split)
    pc = _column(ds, cfg.prompt_column, "prompt_column", PROMPT_COLUMNS)
    if pc is None:
        raise ScenarioError(f"workload.prompt_column: not given and none of {', '.join(PROMPT_COLUMNS)} is a column; "
                            f"columns: {', '.join(ds.column_names)}")
    oc = _column(ds, cfg.output_column, "output_column")
    turns = pc == "conversations" and oc is None  # ShareGPT turns: prompt and reply from one column
    out = []
    for i, row in enumerate(ds):
        prompt = _text(row[pc], f"workload.path: {cfg.path} row {i} column {pc!r}", 0 if turns else None)
        if turns and len(row[pc]) < 2:
            continue  # no reply (as dataset sharegpt skips it)
        reply = (_text(row[pc], f"workload.path: {cfg.path} row {i} column {pc!r}", 1) if turns
                 else _text(row[oc], f"workload.path: {cfg.path} row {i} column {oc!r}") if oc else None)
        if prompt:
            out.append((prompt, reply, None))
    if not out:
        raise ScenarioError(f"workload.path: {cfg.path} (split {cfg.split!r}) holds no non-empty prompt")
    p = Path(where)
    stamp = (p.stat().st_mtime_ns if p.exists() else None)
    return out, ("hf", where, cfg.split, pc, oc, stamp)
