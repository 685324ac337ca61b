"""The background engine on real ranks: ordering, fusion, join, stall inspector, timeline, failures."""

import json
from pathlib import Path

import pytest

from jobs import run_job


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_proc", [2, 3])
def test_engine_behaviour(num_proc: int, tmp_path: Path) -> None:
    timeline = tmp_path / "timeline.json"
    job = run_job("engine_cases.py", num_proc, str(timeline), timeout_s=100)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 6
        assert record["failures"] == [], record["failures"]
    for rank in range(num_proc):
        missing = ", ".join(str(r) for r in range(num_proc) if r != rank)
        warning = f"stall: allreduce 'withheld.{rank}' was submitted by rank(s) {rank} but not by rank(s) {missing}"
        assert warning in job.output, job.output[-3000:]

    events = json.loads(timeline.read_text())  # valid JSON, as Perfetto and chrome://tracing read it
    phases = {(e["name"], e.get("tid")) for e in events if e.get("ph") == "X"}
    names = {e["name"] for e in events if e.get("ph") == "X"}
    assert {"NEGOTIATE_ALLREDUCE", "QUEUE", "ALLREDUCE", "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"} <= names
    rows = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert "fuse.0" in rows.values() and "a" in rows.values()
    assert all(tid in rows for _, tid in phases)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_proc", [2, 3])
def test_submit_wakes_the_engine(num_proc: int) -> None:
    # The worker's cycle time (2 min) exceeds this job's timeout: a collective that waited for the
    # engine's timer instead of being started by its submit would fail the job.
    job = run_job("engine_wake.py", num_proc, timeout_s=60)
    assert job.returncode == 0, job.output[-4000:]
    for rank in range(num_proc):
        (record,) = job.records(rank)
        assert len(record["ran"]) == 4
        assert record["failures"] == [], record["failures"]


@pytest.mark.timeout(60)
def test_launcher_timeline_flag(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "job.py"
    script.write_text(
        "import numpy as np, collective as hvd\n"
        "from collective.runtime import start_engine\n"
        "hvd.init(); start_engine()\n"
        "for i in range(3): hvd.allreduce(np.ones(10), name=f't{i}')\n"
        "hvd.shutdown()\n")
    timeline = tmp_path / "trace.json"
    proc = subprocess.run([sys.executable, "-m", "collective.run", "-np", "2", "--timeline", str(timeline),
                           str(script)], capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = json.loads(timeline.read_text())
    rows = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"t0", "t1", "t2"} <= rows
    assert any(e["name"] == "ALLREDUCE" and e["ph"] == "X" for e in events)
