"""Elastic training on one real standalone cluster of three one-core workers (one cluster for both tests:
a cluster and its session cost about as much as a test):
- ``spark_hvd.run_elastic``: a worker's JVM killed mid-run (with its executor) -> the job re-forms on the other
  two from the last commit; the worker restarted -> it rejoins at the next commit; the final weights are the
  float64 reference of the sizes each step ran at.
- ``TorchEstimator(elastic=True).fit``: a worker's JVM killed mid-epoch (with its executor and rank) -> the fit
  finishes on the other two from the last commit, and the model's reformations say where.
The tests run in file order: the first leaves the cluster at three workers, as the second needs."""

from __future__ import annotations

import os
import threading
import time

import cloudpickle
import psutil
import pytest
import torch

import elastic_victim
import spark_hvd
from capture import WatchedStream, wait_for_exit
from elastic_functions import assert_reference_weights, torch_elastic_train
from estimator_data import blobs
from estimator_models import class_loss
from spark_hvd.launch.driver.launch_checks import describe_cluster

pytestmark = [pytest.mark.usefixtures("elastic_functions_by_value"), pytest.mark.spark]

_WAIT_S = 240.0   # a loaded machine takes minutes to start a fit's first stage


def ranks_under(ancestor: int, pids: list[int]) -> list[int]:
    """The rank processes among ``pids`` that descend from process ``ancestor`` (a worker's JVM)."""
    return [pid for pid in pids if ancestor in {p.pid for p in psutil.Process(pid).parents()}]


def wait_for_slots(spark, slots: int, timeout_s: float) -> None:
    """Until the driver counts ``slots`` task slots (a restarted worker's executor has registered)."""
    deadline = time.monotonic() + timeout_s
    while describe_cluster(spark).slots != slots:
        assert time.monotonic() < deadline, f"the cluster never had {slots} slots: {describe_cluster(spark)}"
        time.sleep(0.25)  # polls the slot count (a condition), not a guessed delay


@pytest.mark.timeout(420)
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


def held_ranks(hold_dir: str, count: int, fit: threading.Thread, outcome: dict) -> dict[int, int]:
    """rank -> pid of the ranks holding at the gate, once ``count`` of them are; the fit's error if it ended."""
    deadline = time.monotonic() + _WAIT_S
    while True:
        held = [name.split("-") for name in os.listdir(hold_dir) if name.startswith("held-")]
        if len(held) >= count:
            return {int(rank): int(pid) for _, rank, pid in held}
        if not fit.is_alive():
            raise AssertionError(f"the fit ended before {count} ranks held") from outcome.get("error")
        assert time.monotonic() < deadline, f"only {len(held)} of {count} ranks reached the hold"
        time.sleep(0.1)   # polls the ranks' files (a condition), not a guessed delay


@pytest.mark.timeout(600)
def test_a_killed_worker_mid_epoch_finishes_on_two(three_worker_cluster, tmp_path) -> None:
    from spark_hvd import Store, TorchEstimator

    cluster, spark = three_worker_cluster.cluster, three_worker_cluster.spark
    wait_for_slots(spark, 3, _WAIT_S)   # the test before restarted a worker; its executor may still register
    hold_dir = tmp_path / "holds"
    hold_dir.mkdir()
    # 768 rows: 8 steps an epoch on 3 ranks, 12 on 2; a commit every 3 steps; every rank holds in step 5.
    model = elastic_victim.HeldAtStep(4, 3, hold_at_call=5, while_size=3, hold_dir=str(hold_dir))
    estimator = TorchEstimator(num_proc=3, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                               loss=class_loss, feature_cols=["features"], label_cols=["label"], batch_size=32,
                               epochs=2, store=Store.create(str(tmp_path / "store")), verbose=0, random_seed=5,
                               elastic=True, min_num_proc=2, max_num_proc=3, elastic_commit_steps=3,
                               start_timeout=120)
    df = blobs(spark, 768, partitions=3)
    outcome: dict = {}

    def fit() -> None:
        try:
            outcome["model"] = estimator.fit(df)
        except BaseException as error:  # noqa: BLE001 - re-raised by the test's thread
            outcome["error"] = error

    cloudpickle.register_pickle_by_value(elastic_victim)
    thread = threading.Thread(target=fit, name="elastic-fit", daemon=True)
    thread.start()
    try:
        held = held_ranks(str(hold_dir), 3, thread, outcome)
        worker = cluster.worker_pid(2)
        victims = [pid for pid in held.values() if worker in {p.pid for p in psutil.Process(pid).parents()}]
        assert len(victims) == 1, (held, worker)
        cluster.kill_worker(2)
        assert wait_for_exit(victims[0], 30)
    finally:
        (hold_dir / "go").touch()   # never leave a held job behind
        thread.join(_WAIT_S)
        cloudpickle.unregister_pickle_by_value(elastic_victim)
    assert not thread.is_alive()
    if "error" in outcome:
        raise outcome["error"]
    fitted = outcome["model"]
    # The commit at step 3 of 8 (3 ranks) resumes at step 4 of 12 on the 2 left.
    assert fitted.getReformations() == [{"epoch": 0, "step": 4, "size": 2, "previous_size": 3}]
    assert [h["epoch"] for h in fitted.getHistory()] == [0, 1]
    assert [sorted(h) for h in fitted.getHistory()] == [["epoch", "train"]] * 2
    assert all(torch.isfinite(t).all() for t in fitted.getModel().state_dict().values())
