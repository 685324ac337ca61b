"""End-to-end tests of `python -m collective.run` with real rank processes on this host."""

from __future__ import annotations

import io
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from collective import run

REPO_ROOT = Path(__file__).resolve().parents[2]
JOB = str(Path(__file__).resolve().parent / "scripts" / "job.py")


def _is_alive(pid: int) -> bool:
    """Zombies count as dead: they no longer run, they just wait to be reaped by init."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _read_pids(pid_dir: Path) -> dict[int, int]:
    return {int(p.stem.removeprefix("rank")): int(p.read_text()) for p in pid_dir.glob("*.pid")}


def _wait_dead(pids: list[int], timeout_s: float) -> list[int]:
    """Waits on pidfds (no polling) until every pid has exited; returns those still alive."""
    fds = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    try:
        while fds:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready, _, _ = select.select(list(fds), [], [], remaining)
            for fd in ready:
                os.close(fd)
                del fds[fd]
    finally:
        for fd in fds:
            os.close(fd)
    return [pid for pid in pids if _is_alive(pid)]


@pytest.fixture
def pid_dir(tmp_path: Path) -> Iterator[Path]:
    """Directory where ranks write their pids; any rank still alive afterwards is killed."""
    directory = tmp_path / "pids"
    directory.mkdir()
    yield directory
    for pid in _read_pids(directory).values():
        if _is_alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def launcher_procs() -> Iterator[list[subprocess.Popen]]:
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _start_launcher(procs: list[subprocess.Popen], *args: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "collective.run", *args],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )
    procs.append(proc)
    return proc


def _run_launcher(procs: list[subprocess.Popen], *args: str,
                  timeout_s: float = 30.0) -> tuple[int, str, str, float]:
    start = time.monotonic()
    proc = _start_launcher(procs, *args)
    out, err = proc.communicate(timeout=timeout_s)
    return proc.returncode, out.decode(), err.decode(), time.monotonic() - start


def _read_lines_until(proc: subprocess.Popen, count: int, marker: str,
                      timeout_s: float) -> list[str]:
    """Reads launcher stdout until ``count`` lines contain ``marker`` (select-bounded)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    buffer = b""
    lines: list[str] = []
    while sum(marker in line for line in lines) < count:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, remaining))
        if not ready:
            raise AssertionError(f"timed out waiting for {count}x {marker!r}; got {lines}")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"launcher stdout closed early; got {lines}")
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        lines += [line.decode() for line in complete]
    return lines


@pytest.mark.timeout(60)
def test_every_rank_output_line_arrives_prefixed(launcher_procs: list) -> None:
    code, out, err, _ = _run_launcher(launcher_procs, "-np", "3", JOB, "print")
    assert code == 0, err
    lines = out.splitlines()
    for rank in range(3):
        assert f"[{rank}]<stdout>:hello from rank {rank} of 3" in lines
    assert len(lines) == 3


@pytest.mark.timeout(60)
def test_a_leading_python_runs_the_command_as_horovodrun_does(launcher_procs: list) -> None:
    # horovodrun -np 2 python -m pytest ...: the interpreter token is replaced by the launcher's own.
    code, out, err, _ = _run_launcher(launcher_procs, "-np", "2", "python", "-c",
                                      "import os, sys; print('exe', sys.executable, os.environ['HOROVOD_RANK'])")
    assert code == 0, err
    assert sorted(out.splitlines()) == [f"[{r}]<stdout>:exe {sys.executable} {r}" for r in range(2)], out


@pytest.mark.timeout(60)
def test_failing_rank_tears_down_the_others(launcher_procs: list, pid_dir: Path) -> None:
    code, out, err, elapsed = _run_launcher(
        launcher_procs, "-np", "3", JOB, "fail", str(pid_dir))
    assert code == 3
    assert "rank 1 failed first" in err and "exited with code 3" in err
    assert elapsed < 20, "the hanging ranks should have been terminated promptly"
    pids = _read_pids(pid_dir)
    assert sorted(pids) == [0, 1, 2]
    assert _wait_dead(list(pids.values()), timeout_s=5) == []


@pytest.mark.timeout(60)
def test_rank_killed_by_signal_is_reported(launcher_procs: list, pid_dir: Path) -> None:
    code, out, err, _ = _run_launcher(launcher_procs, "-np", "2", JOB, "sigkill", str(pid_dir))
    assert code == 1
    assert "rank 0 failed first: killed by signal SIGKILL (9)" in err
    assert _wait_dead(list(_read_pids(pid_dir).values()), timeout_s=5) == []


@pytest.mark.timeout(60)
def test_ranks_ignoring_sigterm_get_sigkill(launcher_procs: list, pid_dir: Path) -> None:
    code, out, err, elapsed = _run_launcher(
        launcher_procs, "-np", "3", "--term-grace", "0.5", JOB, "stubborn", str(pid_dir))
    assert code == 5
    assert "rank 1 failed first" in err
    assert "sending SIGKILL" in err
    assert elapsed < 20
    assert _wait_dead(list(_read_pids(pid_dir).values()), timeout_s=5) == []


@pytest.mark.timeout(60)
def test_timeout_kills_hung_job_with_124(launcher_procs: list, pid_dir: Path) -> None:
    code, out, err, elapsed = _run_launcher(
        launcher_procs, "-np", "2", "--timeout", "3", JOB, "hang", str(pid_dir))
    assert code == run.TIMEOUT_EXIT_CODE
    assert "exceeded --timeout" in err
    assert 3 <= elapsed < 20
    assert _wait_dead(list(_read_pids(pid_dir).values()), timeout_s=5) == []


@pytest.mark.timeout(60)
def test_partial_last_line_is_forwarded(launcher_procs: list) -> None:
    code, out, err, _ = _run_launcher(launcher_procs, "-np", "2", JOB, "partial")
    assert code == 0, err
    for rank in range(2):
        assert f"[{rank}]<stdout>:first line {rank}" in out.splitlines()
        assert f"[{rank}]<stdout>:partial out {rank}" in out.splitlines()
        assert f"[{rank}]<stderr>:partial err {rank}" in err.splitlines()


@pytest.mark.timeout(60)
def test_ranks_die_with_the_launcher(launcher_procs: list, pid_dir: Path) -> None:
    proc = _start_launcher(launcher_procs, "-np", "2", JOB, "hang", str(pid_dir))
    _read_lines_until(proc, 2, "ready", timeout_s=30)
    pids = list(_read_pids(pid_dir).values())
    assert len(pids) == 2 and all(_is_alive(pid) for pid in pids)
    proc.kill()  # SIGKILL: the launcher gets no chance to clean up; PDEATHSIG must do it.
    proc.wait(timeout=10)
    assert _wait_dead(pids, timeout_s=10) == []


@pytest.mark.timeout(60)
def test_launch_api_in_process_with_binary_streams() -> None:
    out, err = io.BytesIO(), io.BytesIO()
    code = run.launch([JOB, "print"], 2, timeout_s=30, stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    assert sorted(out.getvalue().decode().splitlines()) == [
        "[0]<stdout>:hello from rank 0 of 2", "[1]<stdout>:hello from rank 1 of 2"]


@pytest.mark.timeout(60)
def test_launch_passes_env_and_per_rank_host_keys(tmp_path: Path) -> None:
    script = tmp_path / "show_env.py"
    script.write_text(
        "from collective.config import config_from_env\n"
        "c = config_from_env()\n"
        "print(c.rank, c.host_key.rsplit('/', 1)[-1], c.timeout_s, c.secret is not None)\n")
    out = io.BytesIO()
    env = {**os.environ, "COLLECTIVE_TIMEOUT": "7.5"}
    code = run.launch([str(script)], 2, timeout_s=30, env=env, host_key_per_rank=True,
                      stdout=out, stderr=io.BytesIO())
    assert code == 0
    assert sorted(out.getvalue().decode().splitlines()) == [
        "[0]<stdout>:0 rank0 7.5 True", "[1]<stdout>:1 rank1 7.5 True"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hosts_per_rank", [False, True])
def test_ranks_get_horovodrun_variables(tmp_path: Path, hosts_per_rank: bool) -> None:
    """Scripts written for horovodrun read their place in the job from HOROVOD_* variables."""
    script = tmp_path / "show_horovod_env.py"
    names = ["RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "HOSTNAME"]
    script.write_text(f"import os\nprint(*[os.environ['HOROVOD_' + n] for n in {names!r}])\n")
    out = io.BytesIO()
    code = run.launch([str(script)], 3, timeout_s=30, host_key_per_rank=hosts_per_rank, stdout=out,
                      stderr=io.BytesIO())
    assert code == 0
    host = socket.gethostname()
    # One host: local ranks 0..2 and one cross group each. A host per rank: the other way round.
    want = [f"[{r}]<stdout>:{r} 3 0 1 {r} 3 {host}" if hosts_per_rank else f"[{r}]<stdout>:{r} 3 {r} 3 0 1 {host}"
            for r in range(3)]
    assert sorted(out.getvalue().decode().splitlines()) == want


@pytest.mark.timeout(30)
def test_bad_arguments_return_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["-np", "0", JOB]) == 2
    assert "must be >= 1" in capsys.readouterr().err
    assert run.main([JOB]) == 2  # -np is required


@pytest.mark.timeout(60)
def test_sigterm_to_launcher_stops_ranks(launcher_procs: list, pid_dir: Path) -> None:
    proc = _start_launcher(launcher_procs, "-np", "2", JOB, "hang", str(pid_dir))
    _read_lines_until(proc, 2, "ready", timeout_s=30)
    pids = list(_read_pids(pid_dir).values())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "received SIGTERM" in err.decode()
    assert _wait_dead(pids, timeout_s=5) == []
