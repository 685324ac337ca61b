"""TorchEstimator(elastic=True).fit on a real standalone cluster of three one-core workers: a worker's JVM
killed mid-epoch (with its executor and rank) -> the fit finishes on the other two from the last commit, and
the model's reformations say where."""

from __future__ import annotations

import os
import threading
import time

import cloudpickle
import psutil
import pytest
import torch

import elastic_victim
from capture import wait_for_exit
from estimator_data import blobs
from estimator_models import class_loss

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

_WAIT_S = 240.0   # a loaded machine takes minutes to start a fit's first stage


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


def test_a_killed_worker_mid_epoch_finishes_on_two(three_worker_cluster, tmp_path) -> None:
    from spark_hvd import Store, TorchEstimator

    cluster, spark = three_worker_cluster.cluster, three_worker_cluster.spark
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
