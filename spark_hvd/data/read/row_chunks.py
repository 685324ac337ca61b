"""Chunks of rows as dicts of numpy arrays (one per column, rows first), and the operations readers need."""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa

from spark_hvd.data.columns import ColumnSpec

Chunk = dict[str, np.ndarray]


def chunk_rows(chunk: Chunk) -> int:
    return len(next(iter(chunk.values()))) if chunk else 0


def table_to_chunk(table: pa.Table, specs: list[ColumnSpec]) -> Chunk:
    """Arrow columns -> numpy arrays: shaped (rows, *spec.shape) of spec.dtype, or for an encoded column an
    object array of one value per row (bytes, str, a ragged row's own array, an image's pixels)."""
    chunk = {}
    for spec in specs:
        column = table.column(spec.name).combine_chunks()
        chunk[spec.name] = decode_column(column, spec)
    return chunk


def decode_column(column: pa.Array, spec: ColumnSpec) -> np.ndarray:
    """One Arrow column as table_to_chunk gives it (rank child, and the executors' transform tasks)."""
    return _DECODERS.get(spec.kind, _numeric)(column, spec)


def _numeric(column: pa.Array, spec: ColumnSpec) -> np.ndarray:
    values = column
    for _ in spec.shape:
        values = values.flatten()
    array = values.to_numpy(zero_copy_only=False)
    if spec.shape:
        array = array.reshape((len(column), *spec.shape))
    return array.astype(spec.dtype, copy=False)


def _objects(values: list) -> np.ndarray:
    # np.array would try to stack equal-length rows into a 2-D array; one object per row is wanted.
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _as_python(column: pa.Array, spec: ColumnSpec) -> np.ndarray:
    return _objects(column.to_pylist())


def _ragged(column: pa.Array, spec: ColumnSpec) -> np.ndarray:
    values = column.flatten().to_numpy(zero_copy_only=False).astype(spec.dtype, copy=False)
    offsets = column.offsets.to_numpy()
    offsets = offsets - offsets[0]
    return _objects(np.split(values, offsets[1:-1]))


def _image(column: pa.Array, spec: ColumnSpec) -> np.ndarray:
    """Spark's image struct -> each row's pixels as a (height, width, nChannels) uint8 array, in the
    channel order Spark's image source stores (BGR for colour images)."""
    heights, widths, channels = (column.field(name).to_numpy(zero_copy_only=False)
                                 for name in ("height", "width", "nChannels"))
    data = column.field("data").to_pylist()
    return _objects([np.frombuffer(data[i] or b"", dtype=np.uint8).reshape(heights[i], widths[i], channels[i])
                     if heights[i] > 0 else np.zeros((0, 0, 0), np.uint8) for i in range(len(column))])


_DECODERS = {"binary": _as_python, "string": _as_python, "ragged": _ragged, "image": _image}


def concat(chunks: list[Chunk]) -> Chunk:
    if len(chunks) == 1:
        return chunks[0]
    return {name: np.concatenate([chunk[name] for chunk in chunks]) for name in chunks[0]}


def take(chunk: Chunk, indices: np.ndarray) -> Chunk:
    return {name: array[indices] for name, array in chunk.items()}


def shuffled(chunks: Iterable[Chunk], rng: np.random.Generator, capacity: int) -> Iterator[Chunk]:
    """Mix rows across chunks: hold up to `capacity` rows, release a random half-buffer's worth at a time."""
    held: list[Chunk] = []
    held_rows = 0
    for chunk in chunks:
        held.append(chunk)
        held_rows += chunk_rows(chunk)
        if held_rows >= capacity:
            merged = concat(held)
            order = rng.permutation(held_rows)
            release = held_rows - capacity // 2
            yield take(merged, order[:release])
            held = [take(merged, order[release:])]
            held_rows -= release
    if held_rows:
        merged = concat(held)
        yield take(merged, rng.permutation(held_rows))


class RowQueue:
    """Rows waiting to be batched: appended as chunks, taken in exact counts."""

    def __init__(self) -> None:
        self._chunks: list[Chunk] = []
        self._offset = 0            # rows of _chunks[0] already taken
        self.rows = 0

    def append(self, chunk: Chunk) -> None:
        rows = chunk_rows(chunk)
        if rows:
            self._chunks.append(chunk)
            self.rows += rows

    def take(self, count: int) -> Chunk:
        parts: list[Chunk] = []
        needed = count
        while needed:
            head = self._chunks[0]
            available = chunk_rows(head) - self._offset
            used = min(available, needed)
            parts.append({name: array[self._offset:self._offset + used] for name, array in head.items()})
            needed -= used
            if used == available:
                self._chunks.pop(0)
                self._offset = 0
            else:
                self._offset += used
        self.rows -= count
        if len(parts) == 1:
            # A view into the reader's chunk (maybe its in-memory cache): hand the caller its own copy.
            return {name: array.copy() for name, array in parts[0].items()}
        return concat(parts)
