"""Single-process references for the ports: the same model trained in one process on the same rows, with
Horovod's semantics, and the rows an estimator fit trained on (read back from its Store).

Horovod's rule that makes the comparison exact: ``size`` ranks each taking a batch of ``B`` rows and
averaging their gradients take the same step as one process on the union of those batches (``size * B``
rows, a mean loss), with the learning rate multiplied by ``size``, as Horovod's estimators (and its
examples' ``lr * hvd.size()``) scale it. So the reference runs, for every step, one batch made of each
rank's batch for that step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow.parquet as pq

RANKS = 2


def materialized_rows(store_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    """{"train": {column: rows}, "val": {...}} of the one materialisation under the Store at ``store_dir``,
    in the order the ranks read them: the files as its metadata lists them, rows in file order (the layout
    the README documents: <prefix>/intermediate_data/<key>/{train,val}/<version> and _materialized.json, which
    names the version)."""
    found = sorted(store_dir.glob("intermediate_data/*/_materialized.json"))
    assert len(found) == 1, f"expected one materialisation under {store_dir}, found {found}"
    metadata = json.loads(found[0].read_text())
    splits = {}
    for split, info in metadata["splits"].items():
        if not info["rows"]:
            continue
        tables = [pq.read_table(found[0].parent / split / metadata["data_version"] / f["name"]) for f in info["files"]]
        columns = {name: np.concatenate([np.asarray(t.column(name).to_pylist(), dtype=np.float64) for t in tables])
                   for name in tables[0].column_names}
        assert all(len(v) == info["rows"] for v in columns.values()), f"{split}: row count differs from metadata"
        splits[split] = columns
    return splits


def assert_split_of(rows: dict[str, dict[str, np.ndarray]], features: np.ndarray, labels: np.ndarray,
                    feature: str = "features", label: str = "label") -> None:
    """The train and validation rows together are exactly the rows the script fitted on (as multisets),
    and the training rows keep the DataFrame's order (one partition after the other). Labels may be
    scalars or vectors."""
    def keyed(x: np.ndarray, y: np.ndarray) -> list[tuple[float, ...]]:
        return [(*map(float, a), *map(float, np.ravel(b))) for a, b in zip(x, y)]

    given = keyed(features, labels)
    stored = [key for split in rows.values() for key in keyed(split[feature], split[label])]
    assert sorted(stored) == sorted(given), "the materialised rows are not the DataFrame's rows"
    position = {key: i for i, key in enumerate(given)}        # digits rows are distinct
    order = [position[key] for key in keyed(rows["train"][feature], rows["train"][label])]
    assert order == sorted(order), "the training rows are not in the DataFrame's order"


def dealt_shares(rows: int, batch_size: int, steps: int, size: int = RANKS) -> list[np.ndarray]:
    """spark-hvd's arrow reader, unshuffled: an epoch's ``size * steps * batch_size`` positions dealt in
    contiguous shares, rank r's [r * steps * batch_size, (r + 1) * steps * batch_size); positions past the
    split's end are its next pass's rows (the lockstep padding)."""
    share = steps * batch_size
    return [np.arange(r * share, (r + 1) * share) % rows for r in range(size)]


def union_batches(shards: Sequence[np.ndarray], batch_size: int, steps: int) -> list[np.ndarray]:
    """Row indices of each step's union batch: every rank's next ``batch_size`` rows of its share, unshuffled,
    from the share's start each epoch (a share shorter than the steps starts again)."""
    return [np.concatenate([s[np.arange(k * batch_size, (k + 1) * batch_size) % len(s)] for s in shards])
            for k in range(steps)]


def whole_steps(train_rows: int, batch_size: int, size: int = RANKS) -> int:
    """Steps per epoch of Horovod's TorchEstimator (and Lightning's): whole global batches only."""
    return train_rows // (size * batch_size)


def covering_steps(train_rows: int, batch_size: int, size: int = RANKS) -> int:
    """Steps per epoch of Horovod's KerasEstimator: ceil(rows / (batch_size * size)), every row at least once."""
    return -(-train_rows // (size * batch_size))


def scale_torch_learning_rate(optimizer: Any, factor: float) -> Any:
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * factor
    return optimizer


def train_torch(model: Any, optimizer: Any, batch_loss: Callable[[np.ndarray], Any], batches: Sequence[np.ndarray],
                epochs: int) -> list[list[float]]:
    """Plain torch on the union batches, every epoch: ``batch_loss(rows)`` is the loss of the batch of those
    row indices. Returns each step's loss, per epoch."""
    model.train()
    losses = []
    for _ in range(epochs):
        epoch = []
        for batch in batches:
            optimizer.zero_grad()
            loss = batch_loss(batch)
            loss.backward()
            optimizer.step()
            epoch.append(float(loss.detach()))
        losses.append(epoch)
    return losses


def torch_predictions(model: Any, x: np.ndarray, input_shape: Sequence[int] | None = None) -> np.ndarray:
    import torch

    model.eval()
    with torch.no_grad():
        xb = torch.from_numpy(np.ascontiguousarray(x))
        if input_shape is not None:
            xb = xb.reshape(list(input_shape))
        return model(xb).double().numpy()


def max_weight_difference(expected: dict[str, Any], actual: dict[str, Any]) -> float:
    assert sorted(expected) == sorted(actual), f"parameter names differ: {sorted(expected)} vs {sorted(actual)}"
    return max(float(np.max(np.abs(np.asarray(expected[k], dtype=np.float64) - np.asarray(actual[k]))))
               for k in expected)
