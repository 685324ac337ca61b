"""What one rank asked for in a collective call, and the check that every rank asked for the same.

The MPI backend swaps these descriptors between ranks before moving data, so a disagreement (dtype,
shape, op, root...) becomes the same MismatchError on every rank instead of a hang or garbage. The
rules themselves are the native ops' (native/algorithms/<op>.cc, through the binding): what one rank
checks alone, which fields must agree, and the error that names them.
"""

from __future__ import annotations

import functools
import hashlib
from typing import NamedTuple, Sequence

import numpy as np

from collective import _native
from collective._native import CollectiveKind


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


def validate_call(call: Call, size: int) -> Call:
    """The checks one rank can make alone, before anything is sent: the op's own (raises
    InvalidArgumentError). Returns the call completed: alltoall's even splits, when none were given."""
    splits = tuple(_native.validate_call(call.kind, call.name, call.shape, call.root, call.splits, size))
    return call if splits == call.splits else call._replace(splits=splits)


def check_agreement(calls: Sequence[Call], ranks: Sequence[int], call_number: int, mine: Call) -> None:
    """Raises MismatchError naming the tensor and what each rank passed, if ``calls`` disagree."""
    index = next((i for i, call in enumerate(calls) if call == mine), 0)
    _native.check_agreement(list(calls), list(ranks), index, call_number)


@functools.lru_cache(maxsize=None)
def _rules(kind: int) -> _native.AgreementRules:
    return _native.agreement_rules(CollectiveKind(kind))


@functools.lru_cache(maxsize=4096)
def agreement_words(call: Call) -> np.ndarray:
    """int64[4]: a 124-bit digest of everything ranks must agree on, then its negation.

    The elementwise MIN of these over ranks equals a rank's own words exactly when every rank's digest
    is the same (min(d) == d == max(d) == -min(-d)), so ONE tiny Allreduce checks a call, and every
    rank reaches the same verdict. The digest is kept to 62 bits per word so its negation cannot
    overflow. Cached, as training repeats the same calls; callers must not write to it."""
    rules = _rules(call.kind)
    agreed = (int(call.kind), call.name, int(call.dtype) if rules.dtype else None,
              call.shape if rules.shape else None,
              (len(call.shape), call.shape[1:]) if rules.trailing_shape else None,
              int(call.op) if rules.op else None, call.root if rules.root else None,
              (call.prescale, call.postscale) if rules.scales else None)
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
    if not _rules(mine.kind).trailing_shape:
        return [mine] * len(records)
    return [mine._replace(shape=(int(r[0]), *mine.shape[1:]),
                          splits=tuple(int(x) for x in r[1:]) if mine.kind == CollectiveKind.ALLTOALL else ())
            for r in records]
