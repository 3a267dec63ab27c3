"""The columns a dataset's `format` keys name, and a dataset's columns read from its header.

A format key names a column, or a field inside a column of records with a dotted path: veRL's data
keeps the reference answer at `reward_model.ground_truth`. The dataset's own column of that exact
name, if it has one, comes first. Columns are listed with their fields (`reward_model`,
`reward_model.ground_truth`, `reward_model.style`), so a dotted key is checked like any other.

Both loaders (tasksets and SFT data) and `rfthpc config validate` use `required_columns` and
`column_problem`, so a key naming no column is reported the same way before anything is queued
as when a role loads the data. `dataset_columns` reads only what says which columns there are
(a parquet or Arrow schema, a CSV header, the first rows of a JSON-lines file, a saved dataset's
`dataset_info.json`), so checking a large dataset takes milliseconds, not a conversion.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rfthpc.config.buffer import FormatConfig

FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}
"""Data file types a dataset may be made of → the `datasets` builder that reads them."""
JSONL_ROWS = 100
"""Rows of a JSON-lines file whose keys count as its columns."""


def required_columns(*, prompt_type: str, prompt_key: str | None, response_key: str | None, messages_key: str | None,
                     system_prompt_key: str | None = None, workflow_key: str | None = None,
                     reward_fn_key: str | None = None, chosen_key: str | None = None,
                     rejected_key: str | None = None) -> list[tuple[str, str]]:
    """(format option, column) for every column the format keys name (unset optional keys name none)."""
    chat = prompt_type == "messages"
    named = [("messages_key" if chat else "prompt_key", messages_key if chat else prompt_key),
             ("response_key", response_key), ("system_prompt_key", system_prompt_key),
             ("workflow_key", workflow_key), ("reward_fn_key", reward_fn_key),
             ("chosen_key", chosen_key), ("rejected_key", rejected_key)]
    return [(option, key) for option, key in named if key]


def format_columns(fmt: FormatConfig, sft: bool = False, text: bool = True, pairs: bool = False) -> list[tuple[str, str]]:
    """`required_columns` of a taskset's `format` (the explorer's reading; without `text`, for a
    workflow that reads neither, not the prompt's and reference answer's), or with `sft` of an SFT
    dataset's (the trainer's: the chat, or the prompt and the reply; no per-row workflow or reward);
    with `pairs` too, of a DPO dataset's (the chat or the prompt, the chosen and the rejected reply)."""
    if sft:
        chat = fmt.prompt_type == "messages"
        reply = None if chat or pairs else fmt.response_key
        return required_columns(prompt_type=fmt.prompt_type, prompt_key=fmt.prompt_key, response_key=reply,
                                messages_key=fmt.messages_key, chosen_key=fmt.chosen_key if pairs else None,
                                rejected_key=fmt.rejected_key if pairs else None)
    return required_columns(prompt_type=fmt.prompt_type, prompt_key=fmt.prompt_key if text else None,
                            response_key=fmt.response_key if text else None,
                            messages_key=fmt.messages_key if text else None,
                            system_prompt_key=fmt.system_prompt_key or None,
                            workflow_key=fmt.workflow_key or None, reward_fn_key=fmt.reward_fn_key or None)


def column_value(row: Mapping[str, Any], key: str) -> Any:
    """The value `key` names in `row`: its column of that name, else the field at that dotted path
    inside a column of records (KeyError if there is none)."""
    if key in row:
        return row[key]
    node: Any = row
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def field_paths(features: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every column of `features` (a `datasets.Features`, or the `features` of a saved dataset's
    `dataset_info.json`), each followed by the dotted paths of its fields when it holds records."""
    out = []
    for name, feature in features.items():
        path = f"{prefix}{name}"
        out.append(path)
        # `datasets` holds a column of records as a plain mapping of its fields; its JSON form marks
        # every other feature with a `_type`.
        if isinstance(feature, Mapping) and "_type" not in feature:
            out += field_paths(feature, f"{path}.")
    return out


def _arrow_paths(schema: Any, prefix: str = "") -> list[str]:
    """The columns of an Arrow schema (or a struct type's fields), with the fields of struct columns."""
    import pyarrow as pa

    out = []
    for f in schema:
        out.append(f"{prefix}{f.name}")
        if pa.types.is_struct(f.type):
            out += _arrow_paths(f.type, f"{prefix}{f.name}.")
    return out


def _record_paths(row: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in row.items():
        out.append(f"{prefix}{key}")
        if isinstance(value, Mapping):
            out += _record_paths(value, f"{prefix}{key}.")
    return out


def column_problem(where: str, columns: Sequence[str], required: Sequence[tuple[str, str]]) -> str | None:
    """The message for the first format key that names no column of the dataset; None if all do."""
    for option, key in required:
        if key not in columns:
            return f"{where}: format.{option}={key!r} is not a column; the columns are: {', '.join(columns)}"
    return None


def _file_columns(path: Path) -> list[str] | None:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return _arrow_paths(pq.read_schema(path))
    if suffix == ".arrow":
        import pyarrow as pa

        with open(path, "rb") as f:
            try:
                return _arrow_paths(pa.ipc.open_stream(f).schema)
            except pa.ArrowInvalid:
                f.seek(0)
                return _arrow_paths(pa.ipc.open_file(f).schema)
    if suffix == ".csv":
        with open(path, newline="") as f:
            return next(csv.reader(f), None)
    if suffix == ".jsonl" or (suffix == ".json" and _looks_like_json_lines(path)):
        keys: dict[str, None] = {}
        with open(path) as f:
            for line, _ in zip(f, range(JSONL_ROWS)):
                if line.strip():
                    row = json.loads(line)
                    if isinstance(row, dict):
                        keys.update(dict.fromkeys(_record_paths(row)))
        return list(keys) or None  # no rows: nothing says which columns there will be
    return None  # a JSON document: reading its columns means reading all of it


def _looks_like_json_lines(path: Path) -> bool:
    with open(path) as f:
        first = f.readline().strip()
    try:
        return isinstance(json.loads(first), dict)
    except json.JSONDecodeError:
        return False


def _saved_columns(path: Path, split: str) -> list[str] | None:
    """Columns of a `save_to_disk` directory (one dataset, or a DatasetDict of splits)."""
    info = path / split / "dataset_info.json" if (path / "dataset_dict.json").is_file() else path / "dataset_info.json"
    try:
        features = json.loads(info.read_text()).get("features")
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return field_paths(features) if isinstance(features, dict) else None


def dataset_columns(path: str | Path, subset_name: str | None = None, split: str = "train") -> list[str] | None:
    """The columns of one split of a local dataset (the layouts `rfthpc.tasks.tasksets.read_split`
    reads), from its header; None where that would mean reading the data (a JSON document, a layout
    `datasets` resolves in ways not worth repeating here): the role that loads it checks then."""
    p = Path(path).expanduser()
    try:
        if p.is_file():
            return _file_columns(p)
        if subset_name and (p / subset_name).is_dir():
            p, subset_name = p / subset_name, None
        if (p / "dataset_dict.json").is_file() or (p / "state.json").is_file():
            return _saved_columns(p, split)
        named = [f for f in sorted(p.glob(f"{split}.*")) if f.suffix.lower() in FILE_BUILDERS]
        if subset_name is None and named:
            return _file_columns(named[0])  # `train.jsonl` is the train split
        return _data_file_columns(p, subset_name, split)
    except Exception:  # noqa: BLE001 — a header that cannot be read here is read, and reported, by the loader
        return None


def _data_file_columns(path: Path, subset_name: str | None, split: str) -> list[str] | None:
    """Columns of the first data file `datasets` resolves for the split of a directory of data files."""
    import datasets

    builder: Any = datasets.load_dataset_builder(str(path), subset_name)
    files = (builder.config.data_files or {}).get(split)
    return _file_columns(Path(str(files[0]))) if files else None
