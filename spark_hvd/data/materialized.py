"""Materialized: where a DataFrame's Parquet copy lies, and what it holds (picklable, shipped to the ranks).

Each write goes to a private version directory inside each split's path
(``intermediate_data/<key>/train/<version>``); the metadata file ``intermediate_data/<key>/_materialized.json``,
replaced whole, publishes one version by naming it. A version is never changed once published.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

from spark_hvd.data.columns import ColumnSpec
from spark_hvd.store import Store

SPLITS = ("train", "val")
METADATA_NAME = "_materialized.json"
FORMAT_VERSION = 2


@dataclass(frozen=True)
class DataFile:
    """One Parquet file of a split: its name inside the split's directory and its row-group sizes."""

    name: str
    row_groups: tuple[int, ...]

    @property
    def rows(self) -> int:
        return sum(self.row_groups)


@dataclass(frozen=True)
class Materialized:
    """A completed materialisation under store.get_train_data_path(key) / get_val_data_path(key), in the
    ``version`` directory there ("": in those paths themselves)."""

    key: str
    train_path: str
    val_path: str | None
    train_rows: int
    val_rows: int
    columns: dict[str, ColumnSpec]
    store: Store
    train_files: tuple[DataFile, ...] = ()
    val_files: tuple[DataFile, ...] = ()
    version: str = ""
    reused: bool = field(default=False, compare=False)
    # The counts the input checks ran on (column_stats), when they came with the write; None otherwise.
    input_stats: dict[str, Any] | None = field(default=None, compare=False)

    def path(self, split: str) -> str:
        path = self.train_path if _checked(split) == "train" else self.val_path
        if path is None:
            raise ValueError("this materialisation has no validation split")
        return path

    def rows(self, split: str) -> int:
        return self.train_rows if _checked(split) == "train" else self.val_rows

    def files(self, split: str) -> tuple[DataFile, ...]:
        return self.train_files if _checked(split) == "train" else self.val_files

    def row_groups(self, split: str) -> list[int]:
        """Row-group sizes of the split, in file-name order (the order Petastorm numbers them in)."""
        return [rows for data_file in self.files(split) for rows in data_file.row_groups]

    def file_paths(self, split: str) -> list[str]:
        return [posixpath.join(self.path(split), data_file.name) for data_file in self.files(split)]

    def metadata_path(self) -> str:
        return posixpath.join(self.store.get_intermediate_path(self.key), METADATA_NAME)

    def to_json(self) -> bytes:
        splits = {split: {"rows": self.rows(split),
                          "files": [{"name": f.name, "row_groups": list(f.row_groups)} for f in self.files(split)]}
                  for split in SPLITS}
        return json.dumps({"version": FORMAT_VERSION, "key": self.key, "data_version": self.version,
                           "columns": [spec.to_json() for spec in self.columns.values()],
                           "splits": splits, "input_stats": self.input_stats}, indent=1).encode()

    @classmethod
    def from_json(cls, store: Store, data: bytes) -> "Materialized":
        value = json.loads(data)
        if value.get("version") != FORMAT_VERSION:
            raise ValueError(f"materialisation metadata version {value.get('version')} is not {FORMAT_VERSION}")
        key = value["key"]
        splits = value["splits"]
        files = {split: tuple(DataFile(f["name"], tuple(f["row_groups"])) for f in splits[split]["files"])
                 for split in SPLITS}
        val_rows = int(splits["val"]["rows"])
        columns = {spec["name"]: ColumnSpec.from_json(spec) for spec in value["columns"]}
        version = value["data_version"]
        return cls(key=key, train_path=version_path(store.get_train_data_path(key), version),
                   val_path=version_path(store.get_val_data_path(key), version) if val_rows else None,
                   train_rows=int(splits["train"]["rows"]), val_rows=val_rows, columns=columns, store=store,
                   train_files=files["train"], val_files=files["val"], version=version,
                   input_stats=value.get("input_stats"))


def version_path(split_path: str, version: str) -> str:
    """Where ``version`` of a split lies, inside the split's path from the Store."""
    return posixpath.join(split_path, version) if version else split_path


def _checked(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    return split
