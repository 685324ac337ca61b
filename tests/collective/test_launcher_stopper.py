"""collective.run.launch() ended from another thread by a Stopper, as spark_hvd's local mode does."""

from __future__ import annotations

import io
import os
import select
import threading
from pathlib import Path

import pytest

from collective import run

JOB = str(Path(__file__).resolve().parent / "scripts" / "job.py")

pytestmark = pytest.mark.timeout(120)


class _Lines(io.StringIO):
    """What the launcher prints, with a wait for a number of matching lines."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()

    def write(self, text: str) -> int:
        with self._changed:
            written = super().write(text)
            self._changed.notify_all()
        return written

    def wait_for(self, text: str, count: int, timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.getvalue().count(text) >= count, timeout_s)


def _exited(pid: int, timeout_s: float) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def test_stop_from_another_thread_ends_the_launch_and_its_ranks(tmp_path: Path) -> None:
    stopper = run.Stopper()
    out, err = _Lines(), io.StringIO()
    codes: list[int] = []
    launcher = threading.Thread(target=lambda: codes.append(run.launch(
        [JOB, "hang", str(tmp_path)], 2, stdout=out, stderr=err, stopper=stopper)))
    launcher.start()
    try:
        assert out.wait_for("ready", 2, 60), out.getvalue()
        pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    finally:
        stopper.stop()
        launcher.join(60)
    assert codes == [run.STOPPED_EXIT_CODE]
    assert "stop requested; stopping all ranks" in err.getvalue()
    assert len(pids) == 2 and all(_exited(pid, 10) for pid in pids)


def test_a_stop_before_the_launch_ends_it_right_after_spawning(tmp_path: Path) -> None:
    stopper = run.Stopper()
    stopper.stop()
    assert run.launch([JOB, "hang", str(tmp_path)], 2, stdout=io.StringIO(), stderr=io.StringIO(),
                      stopper=stopper) == run.STOPPED_EXIT_CODE
