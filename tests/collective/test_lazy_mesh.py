"""Pairs connect lazily: after init a rank holds only its ring neighbours, and a call connects only the
pairs it moves data between."""

import pytest

from jobs import run_job

SIZE = 6


@pytest.mark.timeout(150)
def test_init_connects_only_ring_neighbours_and_calls_only_their_pairs(transport: str) -> None:
    job = run_job("lazy_mesh.py", SIZE, transport, timeout_s=120)
    assert job.returncode == 0, job.output[-4000:]
    records = {rank: job.records(rank)[0] for rank in range(SIZE)}
    assert all(r["ok"] for r in records.values()), records
    # Nobody dials the highest rank (the higher rank of a pair dials): what it holds is exactly what it
    # connected itself, its two ring neighbours, before and after the ring allreduces.
    assert records[SIZE - 1]["after_init"] == 2, records
    assert records[SIZE - 1]["after_engine"] == 2, records
    # Ranks 1..SIZE-2 talk to their neighbours and to rank 0, the engine's coordinator; rank 0 to everyone.
    for rank in range(1, SIZE - 1):
        assert 2 <= records[rank]["after_engine"] <= 3, (rank, records)
    assert records[0]["after_engine"] == SIZE - 1, records
