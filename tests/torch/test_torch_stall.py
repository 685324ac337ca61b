"""The stall inspector through collective.torch: rank 1 withholds a tensor until the test, having seen
what it waits for in rank 0's output, releases it through a FIFO (no sleeps, no polling)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs import ManualJob, parse_results


def release(fifo: Path) -> None:
    # Blocks until rank 1 has the FIFO open for reading; closing it ends rank 1's read.
    with open(fifo, "w", encoding="utf-8") as writer:
        writer.write("go")


def first_line_with(job: ManualJob, rank: int, marker: str) -> str:
    seen = []
    for line in job.lines(rank):
        if marker in line:
            return line
        seen.append(line)
    raise AssertionError(f"rank {rank} exited without printing {marker!r}:\n" + "\n".join(seen))


def records(output: str) -> list[dict]:
    return parse_results("\n".join(f"[0]: {line}" for line in output.splitlines())).get(0, [])


def stalled_then_released(tmp_path: Path, mode: str) -> tuple[str, list[tuple[int, str]]]:
    """Runs torch_stall.py in ``mode``: returns rank 0's first stall warning, seen before rank 1 is released,
    and every rank's (exit code, output) after."""
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    with ManualJob("torch_stall.py", 2, mode, str(fifo)) as job:
        warning = first_line_with(job, 0, "stall:")
        release(fifo)
        outputs = [job.finish(rank, timeout_s=30) for rank in range(2)]
    return warning, outputs


@pytest.mark.timeout(60)
def test_stall_warning_names_the_missing_rank(tmp_path: Path) -> None:
    warning, outputs = stalled_then_released(tmp_path, "warn")
    assert "stalled.grad" in warning and "not by rank(s) 1" in warning, warning
    for rank, (code, output) in enumerate(outputs):
        assert code == 0, output
        assert records(output) == [{"mode": "warn", "result": [2.0] * 4}], output


@pytest.mark.timeout(60)
def test_stall_shutdown_fails_the_handle_naming_the_missing_rank(tmp_path: Path) -> None:
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    with ManualJob("torch_stall.py", 2, "deadline", str(fifo)) as job:
        (result,) = records(first_line_with(job, 0, "RESULT "))
        release(fifo)
        outputs = [job.finish(rank, timeout_s=30) for rank in range(2)]
    error = result.get("error", "")
    assert "abandoned.grad" in error and "rank(s) 1" in error, result
    for code, output in outputs:
        assert code == 0, output


@pytest.mark.timeout(60)
def test_a_peer_that_shuts_down_is_named_with_the_call_it_left_pending(tmp_path: Path) -> None:
    warning, outputs = stalled_then_released(tmp_path, "leave")
    assert "left.behind" in warning, warning
    for code, output in outputs:
        assert code == 0, output
    (result,) = records(outputs[0][1])
    assert result["rank"] == 1, result
    assert "rank 1 shut down" in result["error"] and "'left.behind'" in result["error"], result


@pytest.mark.timeout(60)
def test_crossed_submissions_fail_on_every_rank_naming_the_missing_one() -> None:
    with ManualJob("torch_stall.py", 2, "crossed", "-") as job:
        outputs = [job.finish(rank, timeout_s=40) for rank in range(2)]
    for rank, (code, output) in enumerate(outputs):
        assert code == 0, output
        (result,) = records(output)
        other = 1 - rank
        assert f"'order.{rank}'" in result["error"], result
        assert result["rank"] == other, result
        assert f"rank(s) {other}" in result["error"] or f"rank {other} shut down" in result["error"], result
