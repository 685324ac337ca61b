"""What one rank asked for in a collective call, and the check that every rank asked for the same.

The MPI backend swaps these descriptors between ranks before moving data, so a disagreement (dtype,
shape, op, root...) becomes the same MismatchError on every rank instead of a hang or garbage.
"""

from __future__ import annotations

import functools
import hashlib
from typing import NamedTuple, Sequence

import numpy as np

from collective._native import CollectiveKind, DType, ReduceOp
from collective.errors import InvalidArgumentError, MismatchError

DTYPE_NAMES = tuple(DType.__members__)
OP_NAMES = tuple(op.name.capitalize() for op in ReduceOp)  # as native error messages name them
# Which fields must agree, per kind (the native coordinator's rules).
_SAME_SHAPE = {CollectiveKind.ALLREDUCE, CollectiveKind.BROADCAST, CollectiveKind.REDUCESCATTER}
_SAME_TRAILING_SHAPE = {CollectiveKind.ALLGATHER, CollectiveKind.ALLTOALL}
_SAME_OP_AND_SCALES = {CollectiveKind.ALLREDUCE, CollectiveKind.REDUCESCATTER}
_NEEDS_DIMENSION = {CollectiveKind.ALLGATHER, CollectiveKind.ALLTOALL, CollectiveKind.REDUCESCATTER}


class Call(NamedTuple):
    """A named tuple rather than a frozen dataclass: the engine builds and compares several per
    collective, and tuples are several times cheaper to make, hash and compare."""

    kind: int
    name: str
    dtype: int = -1
    shape: tuple[int, ...] = ()
    op: int = 0
    root: int = -1
    prescale: float = 1.0
    postscale: float = 1.0
    splits: tuple[int, ...] = ()

    @property
    def kind_name(self) -> str:
        return kind_name(self.kind)

    def count(self) -> int:
        total = 1
        for d in self.shape:
            total *= d
        return total

    def row_elements(self) -> int:
        """Elements per row of the first dimension."""
        total = 1
        for d in self.shape[1:]:
            total *= d
        return total


def kind_name(kind: int) -> str:
    try:
        return CollectiveKind(kind).name.lower()
    except ValueError:
        return f"kind {kind}"


def validate_call(call: Call, size: int) -> None:
    """The checks one rank can make alone, before anything is sent (the native engine's own)."""
    if any(d < 0 for d in call.shape):
        raise InvalidArgumentError(f"{call.kind_name} '{call.name}': negative dimension in shape {list(call.shape)}")
    if call.kind == CollectiveKind.BROADCAST and not 0 <= call.root < size:
        raise InvalidArgumentError(f"broadcast '{call.name}': root_rank {call.root} is outside [0, {size})")
    if call.kind in _NEEDS_DIMENSION and not call.shape:
        raise InvalidArgumentError(f"{call.kind_name} '{call.name}' needs a tensor with at least one dimension")
    if call.kind == CollectiveKind.ALLTOALL:
        if len(call.splits) != size or any(s < 0 for s in call.splits) or sum(call.splits) != call.shape[0]:
            raise InvalidArgumentError(
                f"alltoall '{call.name}': splits must be {size} non-negative row counts summing to the first "
                f"dimension {call.shape[0]}")


def _describe(call: Call, field: str) -> str:
    if field == "kind":
        return call.kind_name
    if field == "name":
        return f"'{call.name}'"
    if field == "dtype":
        return DTYPE_NAMES[call.dtype] if 0 <= call.dtype < len(DTYPE_NAMES) else str(call.dtype)
    if field in ("shape", "trailing shape"):
        return str(list(call.shape))
    if field == "op":
        return OP_NAMES[call.op]
    if field == "root":
        return str(call.root)
    return f"prescale {call.prescale:f}, postscale {call.postscale:f}"


def _differs(call: Call, base: Call, field: str) -> bool:
    if field == "kind":
        return call.kind != base.kind
    if field == "name":
        return call.name != base.name
    if field == "dtype":
        return base.kind not in (CollectiveKind.BARRIER, CollectiveKind.JOIN) and call.dtype != base.dtype
    if field == "shape":
        return base.kind in _SAME_SHAPE and call.shape != base.shape
    if field == "trailing shape":
        return base.kind in _SAME_TRAILING_SHAPE and (
            len(call.shape) != len(base.shape) or call.shape[1:] != base.shape[1:])
    if field == "op":
        return base.kind in _SAME_OP_AND_SCALES and call.op != base.op
    if field == "root":
        return base.kind == CollectiveKind.BROADCAST and call.root != base.root
    return base.kind in _SAME_OP_AND_SCALES and (call.prescale, call.postscale) != (base.prescale, base.postscale)


def check_agreement(calls: Sequence[Call], ranks: Sequence[int], call_number: int, mine: Call) -> None:
    """Raises MismatchError naming the tensor and what each rank passed, if ``calls`` disagree."""
    base = calls[0]
    for field in ("kind", "name", "dtype", "shape", "trailing shape", "op", "root", "scales"):
        if not any(_differs(c, base, field) for c in calls):
            continue
        groups: dict[str, list[int]] = {}
        for rank, call in zip(ranks, calls):
            groups.setdefault(_describe(call, field), []).append(rank)
        detail = "; ".join(f"rank {', '.join(map(str, who))}: {value}" for value, who in sorted(groups.items()))
        raise MismatchError(f"ranks disagree on the {field} of {mine.kind_name} '{mine.name}' "
                            f"(call #{call_number}): {detail}")


@functools.lru_cache(maxsize=4096)
def agreement_words(call: Call) -> np.ndarray:
    """int64[4]: a 124-bit digest of everything ranks must agree on, then its negation.

    The elementwise MIN of these over ranks equals a rank's own words exactly when every rank's digest
    is the same (min(d) == d == max(d) == -min(-d)), so ONE tiny Allreduce checks a call, and every
    rank reaches the same verdict. The digest is kept to 62 bits per word so its negation cannot
    overflow. Cached, as training repeats the same calls; callers must not write to it."""
    if call.kind in _SAME_TRAILING_SHAPE:
        agreed = (call.kind, call.name, call.dtype, len(call.shape), call.shape[1:])
    else:
        agreed = (call.kind, call.name, call.dtype, call.shape, call.op, call.root, call.prescale, call.postscale)
    digest = np.frombuffer(hashlib.blake2b(repr(agreed).encode(), digest_size=16).digest(), np.int64)
    digest = digest & np.int64((1 << 62) - 1)
    words = np.concatenate([digest, -digest])
    words.flags.writeable = False
    return words


def rows_record(call: Call, size: int) -> np.ndarray:
    """int64[1 + size]: what may differ per rank once the digests agree (the first dimension, and
    alltoall's splits), for the Allgather that allgather and alltoall need anyway."""
    record = np.zeros(1 + size, np.int64)
    record[0] = call.shape[0] if call.shape else 0
    if call.kind == CollectiveKind.ALLTOALL:
        record[1:] = call.splits
    return record


def calls_from_records(mine: Call, records: np.ndarray) -> list[Call]:
    """Every rank's call, rebuilt from ``mine`` and the gathered rows records (whose digests all matched)."""
    if mine.kind not in _SAME_TRAILING_SHAPE:
        return [mine] * len(records)
    return [mine._replace(shape=(int(r[0]), *mine.shape[1:]),
                          splits=tuple(int(x) for x in r[1:]) if mine.kind == CollectiveKind.ALLTOALL else ())
            for r in records]
