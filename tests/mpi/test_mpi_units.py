"""The MPI backend's logic without MPI: launch detection, call agreement, negotiation, half rounding."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from collective._native import CollectiveKind as kinds
from collective.config import Config, config_from_env, launched_by_mpi
from collective.errors import InvalidArgumentError, MismatchError
from collective.mpi.buffers import from_float32, tensor_array, to_float32
from collective.mpi.calls import Call, check_agreement, validate_call
from collective.mpi.negotiation import Table


@pytest.mark.parametrize("variable", ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"])
def test_mpi_launch_is_detected_from_open_mpi_mpich_and_pmix(variable: str) -> None:
    assert launched_by_mpi({variable: "2"})
    assert config_from_env(environ={variable: "2"}).launched_by_mpi
    assert not launched_by_mpi({"COLLECTIVE_RANK": "0", variable: ""})


def test_backend_comes_from_env_and_is_validated() -> None:
    assert config_from_env(environ={"COLLECTIVE_BACKEND": "mpi"}).backend == "mpi"
    assert Config().backend == "ring"
    with pytest.raises(ValueError, match="COLLECTIVE_BACKEND='nccl' must be one of ring, mpi"):
        config_from_env(environ={"COLLECTIVE_BACKEND": "nccl"})
    with pytest.raises(ValueError, match="Config.nccl_library"):
        Config(nccl_library="")


def test_agreement_names_the_tensor_and_every_rank() -> None:
    a = Call(kinds.ALLREDUCE, "grad.w", 6, (4,), op=0)
    b = Call(kinds.ALLREDUCE, "grad.w", 7, (4,), op=0)
    check_agreement([a, a, a], [0, 1, 2], 0, a)
    with pytest.raises(MismatchError, match=r"dtype of allreduce 'grad.w' \(call #5\): rank 0, 2: float32; rank 1: f"):
        check_agreement([a, b, a], [0, 1, 2], 5, a)
    gather = Call(kinds.ALLGATHER, "g", 6, (3, 2))
    check_agreement([gather, Call(kinds.ALLGATHER, "g", 6, (0, 2))], [0, 1], 0, gather)  # rows may differ
    with pytest.raises(MismatchError, match="trailing shape"):
        check_agreement([gather, Call(kinds.ALLGATHER, "g", 6, (3, 3))], [0, 1], 0, gather)


def test_local_validation() -> None:
    with pytest.raises(InvalidArgumentError, match="root_rank 2 is outside"):
        validate_call(Call(kinds.BROADCAST, "b", 6, (1,), root=2), 2)
    with pytest.raises(InvalidArgumentError, match="splits must be 2"):
        validate_call(Call(kinds.ALLTOALL, "a", 6, (3,), splits=(1, 1)), 2)
    with pytest.raises(InvalidArgumentError, match="at least one dimension"):
        validate_call(Call(kinds.ALLGATHER, "g", 6, ()), 2)


def test_requests_run_once_every_rank_has_them_in_first_announced_order() -> None:
    table = Table(3)
    table.announce(0, [Call(kinds.ALLREDUCE, "a"), Call(kinds.ALLREDUCE, "b")])
    table.announce(1, [Call(kinds.ALLREDUCE, "b")])
    assert table.take_ready() == []
    assert table.missing("a") == [1, 2]
    table.announce(2, [Call(kinds.ALLREDUCE, "b"), Call(kinds.ALLREDUCE, "a")])
    table.announce(1, [Call(kinds.ALLREDUCE, "a")])
    assert [name for name, _ in table.take_ready()] == ["a", "b"]
    assert table.pending == {}


def test_joined_ranks_count_as_present_and_the_last_to_join_is_reported() -> None:
    table = Table(2)
    table.announce(1, [Call(kinds.JOIN, "join")])
    table.announce(0, [Call(kinds.ALLREDUCE, "step")])
    ready = table.take_ready()
    assert [(name, sorted(calls)) for name, calls in ready] == [("step", [0])]
    assert table.take_join() is None
    table.announce(0, [Call(kinds.JOIN, "join")])
    assert table.take_join() == 0
    assert table.joined == []


def test_half_precision_round_trips_round_to_nearest_even() -> None:
    values = np.array([1.0, 1.00390625, 3.14159, -2.5e-3, 65504.0, np.inf, np.nan], np.float32)
    bf16_bits = np.empty(values.size, np.uint16)
    from_float32(values, 5, bf16_bits)
    want = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert np.array_equal(bf16_bits[:-1], want[:-1]) and bf16_bits[-1] == 0x7FC0
    back = to_float32(bf16_bits, 5)
    assert np.array_equal(back[:-1], want[:-1].view(ml_dtypes.bfloat16).astype(np.float32))
    f16 = np.empty(values.size, np.float16)
    from_float32(values, 4, f16)
    assert np.array_equal(f16[:-1], values[:-1].astype(np.float16))


def test_tensor_memory_by_address_is_shared_not_copied() -> None:
    source = np.arange(6, dtype=np.float32).reshape(2, 3)
    view, code, shape = tensor_array(source.ctypes.data, 6, [2, 3])
    assert (code, shape) == (6, (2, 3))
    view[0] = 42
    assert source[0, 0] == 42
    assert tensor_array(0, 6, [0, 3])[0].size == 0


def test_rows_records_carry_what_may_differ_and_the_digest_covers_the_rest() -> None:
    from collective.mpi.calls import agreement_words, calls_from_records, rows_record

    gather = [Call(kinds.ALLGATHER, "g", 6, (rows, 3)) for rows in (2, 0, 5)]
    assert len({agreement_words(c).tobytes() for c in gather}) == 1  # row counts may differ: same digest
    assert calls_from_records(gather[0], np.stack([rows_record(c, 3) for c in gather])) == gather
    a2a = [Call(kinds.ALLTOALL, "a", 7, (3,), splits=(1, 2)), Call(kinds.ALLTOALL, "a", 7, (1,), splits=(0, 1))]
    rebuilt = calls_from_records(a2a[1], np.stack([rows_record(c, 2) for c in a2a]))
    assert rebuilt == a2a
    base = Call(kinds.ALLREDUCE, "w", 6, (4,))
    for other in (Call(kinds.ALLREDUCE, "w", 7, (4,)), Call(kinds.ALLREDUCE, "w", 6, (5,)),
                  Call(kinds.ALLREDUCE, "w", 6, (4,), op=3), Call(kinds.ALLREDUCE, "w", 6, (4,), postscale=2.0),
                  Call(kinds.ALLGATHER, "w", 6, (4,)), Call(kinds.ALLGATHER, "w", 6, (4, 1))):
        assert agreement_words(other).tobytes() != agreement_words(base).tobytes(), other


def test_the_min_of_the_agreement_words_equals_every_ranks_own_only_when_all_digests_match() -> None:
    """What the single agreement Allreduce (MPI.MIN) decides, computed here with numpy's minimum."""
    from collective.mpi.calls import agreement_words

    same = [agreement_words(Call(kinds.ALLREDUCE, "w", 6, (4,))) for _ in range(3)]
    assert all(np.minimum.reduce(same).tobytes() == w.tobytes() for w in same)
    for odd in (Call(kinds.ALLREDUCE, "w", 7, (4,)), Call(kinds.BROADCAST, "w", 6, (4,), root=0)):
        mixed = [same[0], agreement_words(odd), same[0]]
        verdict = np.minimum.reduce(mixed).tobytes()
        assert not any(verdict == w.tobytes() for w in mixed)  # every rank sees the mismatch
        assert (agreement_words(odd)[:2] >= 0).all()  # 62-bit digests: their negation cannot overflow


def _records(ranks_per_rank: list[list[int]], comm: bool | list[bool] = True) -> list[dict]:
    kinds_given = comm if isinstance(comm, list) else [comm] * len(ranks_per_rank)
    return [{"ranks": ranks, "comm": c} for ranks, c in zip(ranks_per_rank, kinds_given)]


def test_communicator_sets_agree_into_one_set_per_communicator() -> None:
    from collective.process_sets import _agreed_sets

    # COMM_WORLD.Split by parity on four ranks, rank 3 passing COMM_NULL (no members) after a Split(UNDEFINED).
    records = _records([[0, 2], [1], [0, 2], []])
    assert _agreed_sets(records, 0, (0, 2), 5) == [(0, 2), (1,)]
    assert _agreed_sets(records, 3, (), 5) == [(0, 2), (1,)]


def test_members_passing_different_communicators_are_named() -> None:
    from collective.process_sets import _agreed_sets

    with pytest.raises(MismatchError, match=r"rank 0 passed has ranks \[0, 1\], but rank 1 passed one of ranks \[1\]"):
        _agreed_sets(_records([[0, 1], [1], [2]]), 2, (2,), 1)


def test_a_communicator_on_some_ranks_and_ranks_on_others_is_a_mismatch() -> None:
    from collective.process_sets import _agreed_sets

    with pytest.raises(MismatchError, match="rank 0 gave ranks, rank 1 gave a communicator"):
        _agreed_sets(_records([[0, 1], [0, 1]], comm=[False, True]), 0, (0, 1), 1)
    with pytest.raises(MismatchError, match=r"rank 1 added ranks \[0, 1\] as process set 4, but rank 0 added \[0\]"):
        _agreed_sets(_records([[0], [0, 1]], comm=False), 1, (0, 1), 4)


def test_stalled_requests_expire_by_the_round_every_rank_agrees_on() -> None:
    table = Table(3)
    table.announce(0, [Call(kinds.ALLREDUCE, "early", 0, (2,))], round_number=4)
    table.announce(1, [Call(kinds.ALLREDUCE, "late", 0, (2,))], round_number=7)
    table.announce(2, [Call(kinds.ALLREDUCE, "early", 0, (2,))], round_number=7)
    assert table.stalled_since(0.0, 1e9) == -1  # the stall shutdown is off
    first_seen = table.pending["early"].first_seen
    assert table.stalled_since(5.0, first_seen + 1.0) == -1  # nothing has waited 5 s yet
    assert table.stalled_since(5.0, first_seen + 6.0) == 7
    # A rank whose clock said round 4 fails only "early" (announced in round 4), still missing rank 1.
    assert [(name, missing) for name, _, missing in table.take_stalled(4)] == [("early", [1])]
    assert list(table.pending) == ["late"] and table.take_stalled(-1) == []


def test_the_mpi_engines_feature_set_is_frozen_and_documented() -> None:
    """The MPI engine is a separate backend with a fixed feature set (README, "How it works"): a change
    to it is a change to this table, to the README, and to this test."""
    from collective.mpi.features import FEATURES

    supported = {name for name, feature in FEATURES.items() if feature.supported}
    assert supported == {"negotiation", "fusion", "response cache", "timeline", "join", "stall inspector",
                         "process sets"}
    assert set(FEATURES) - supported == {"grouped negotiation", "hierarchical allreduce", "blame of a dead peer"}
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name in FEATURES:
        assert name in readme, f"README's How it works does not say what the MPI backend does about {name}"


def test_a_native_only_feature_is_refused_by_name_on_the_mpi_backend() -> None:
    from collective.mpi.engine import MpiEngine
    from collective.mpi.features import check_supported

    check_supported(Config(backend="mpi"))
    check_supported(Config(backend="mpi", hierarchical_allreduce=False))
    with pytest.raises(InvalidArgumentError, match=r"hierarchical_allreduce=True .* native engine only"):
        check_supported(config_from_env(environ={"COLLECTIVE_BACKEND": "mpi", "HOROVOD_HIERARCHICAL_ALLREDUCE": "1"}))
    # The engine refuses it before it touches MPI (hvd.init starts the engine, so init fails with it).
    with pytest.raises(InvalidArgumentError, match="hierarchical_allreduce"):
        MpiEngine(None, Config(backend="mpi", hierarchical_allreduce=True))
