"""spark_hvd.run_elastic on a real standalone cluster of three one-core workers: a worker's JVM killed
mid-run (with its executor) -> the job re-forms on the other two from the last commit; the worker restarted
-> it rejoins at the next commit; the final weights are the float64 reference of the sizes each step ran at."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

import spark_hvd
from capture import WatchedStream, wait_for_exit
from elastic_functions import assert_reference_weights, torch_elastic_train
from spark_hvd.launch.launch_checks import describe_cluster

pytestmark = [pytest.mark.usefixtures("elastic_functions_by_value"), pytest.mark.spark, pytest.mark.timeout(420)]

_WAIT_S = 150.0


def ranks_under(ancestor: int, pids: list[int]) -> list[int]:
    """The rank processes among ``pids`` that descend from process ``ancestor`` (a worker's JVM)."""
    return [pid for pid in pids if ancestor in {p.pid for p in psutil.Process(pid).parents()}]


def wait_for_slots(spark, slots: int, timeout_s: float) -> None:
    """Until the driver counts ``slots`` task slots (a restarted worker's executor has registered)."""
    deadline = time.monotonic() + timeout_s
    while describe_cluster(spark).slots != slots:
        assert time.monotonic() < deadline, f"the cluster never had {slots} slots: {describe_cluster(spark)}"
        time.sleep(0.25)  # polls the slot count (a condition), not a guessed delay


def test_a_killed_worker_reforms_on_two_and_its_restart_rejoins_at_a_commit(three_worker_cluster, tmp_path):
    cluster, spark = three_worker_cluster.cluster, three_worker_cluster.spark
    gates = {name: str(tmp_path / name) for name in ("killed", "rejoined", "grown")}
    out, err = WatchedStream(), WatchedStream()
    outcome: dict = {}

    def job() -> None:
        try:
            outcome["results"] = spark_hvd.run_elastic(
                torch_elastic_train, args=(9, 1, str(tmp_path)),
                kwargs={"holds": ((3, gates["killed"]), (5, gates["rejoined"]), (7, gates["grown"]))},
                num_proc=3, min_num_proc=2, max_num_proc=3, elastic_timeout=120, start_timeout=120,
                stdout=out, stderr=err, spark=spark)
        except BaseException as error:  # noqa: BLE001 - re-raised by the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=job, name="run_elastic", daemon=True)
    thread.start()
    try:
        held = out.wait_for_matches(r"HOLD step=3 size=3 pid=(\d+)", 3, _WAIT_S)
        victims = ranks_under(cluster.worker_pid(2), [int(m.group(1)) for m in held])
        assert len(victims) == 1, victims
        cluster.kill_worker(2)
        # The survivors go on only once the victim is gone, so the last commit is the one before the hold.
        assert wait_for_exit(victims[0], 30)
        open(gates["killed"], "w").close()
        err.wait_for_matches(r"elastic stage 1 ended: ", 1, _WAIT_S)
        out.wait_for_matches(r"HOLD step=5 size=2", 1, _WAIT_S)
        cluster.restart_worker(2)
        wait_for_slots(spark, 3, _WAIT_S)
        open(gates["rejoined"], "w").close()
        err.wait_for_matches(r"elastic stage 3: 3 rank\(s\)", 1, _WAIT_S, give_up_on="Traceback")
        open(gates["grown"], "w").close()
    finally:
        for gate in gates.values():
            open(gate, "a").close()   # never leave a held job behind
        thread.join(_WAIT_S)
    assert not thread.is_alive()
    if "error" in outcome:
        raise outcome["error"]
    history = err.getvalue()
    assert "elastic stage 2: 2 rank(s), starting from the commit #3 of stage 1" in history, history
    assert "elastic stage 2 ended: 3 slot(s) free, the stage used 2" in history, history
    results = outcome["results"]
    assert [r["rank"] for r in results] == [0, 1, 2]
    sizes = results[0]["sizes"]
    # Steps 0-2 ran on 3 ranks, 3-5 on the 2 left; the stage grew back at a commit after step 5 or 6.
    assert sizes[:6] == [3, 3, 3, 2, 2, 2] and sizes[7:] == [3, 3] and len(sizes) == 9, sizes
    for result in results:
        assert result["sizes"] == sizes
        assert_reference_weights(result)
