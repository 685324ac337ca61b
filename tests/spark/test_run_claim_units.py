"""Which run a fit trains in (estimator/run_claim.py), what makes two fits the same (fit_identity.py), and the
rank's check before it resumes (recipe/checkpoint_fit.py): on a real local Store, no Spark."""

from __future__ import annotations

import threading
import warnings

import pytest

from spark_hvd.errors import CheckpointMismatchError, RunIdReuseWarning
from spark_hvd.estimator.fit_identity import described, identity_of
from spark_hvd.estimator.run_claim import claim_run
from spark_hvd.recipe.checkpoint_fit import check_checkpoint_fit
from spark_hvd.recipe.plan import FitPlan
from spark_hvd.store import Store

PARAMS = {"batch_size": 32, "feature_cols": ["x"], "label_cols": ["y"], "random_seed": None}


@pytest.fixture()
def store(tmp_path):
    return Store.create(str(tmp_path / "store"))


def identity(epochs=3, data="key-1", **params):
    return identity_of({**PARAMS, **params}, {"model": [["w", [1], "torch.float32"]]}, data, epochs)


def claimed(store, run_id, fit):
    """The run_id the fit trains under, and the RunIdReuseWarnings it gave; the run is released again."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        claim = claim_run(store, run_id, fit)
    claim.release()
    return claim.run_id, [str(w.message) for w in caught if issubclass(w.category, RunIdReuseWarning)]


def checkpoint_in(store, run_id):
    store.write_bytes(f"{store.get_checkpoint_path(run_id)}/checkpoint.pt", b"weights")


def test_the_same_fit_resumes_its_run_and_more_epochs_train_it_on(store) -> None:
    assert claimed(store, "r", identity()) == ("r", [])
    checkpoint_in(store, "r")
    assert claimed(store, "r", identity()) == ("r", [])
    # Horovod's way to train on: the same fit with more epochs continues the run.
    assert claimed(store, "r", identity(epochs=5)) == ("r", [])
    # A fit that works with fewer epochs than the run did would return a model trained for more.
    fewer = identity(epochs=3)
    run_id, notices = claimed(store, "r", fewer)
    assert run_id == f"r.{fewer.digest}"
    assert notices and "fitted for 5 epochs, this fit asks for 3" in notices[0]


def test_another_fit_trains_under_its_own_run_and_resumes_there(store) -> None:
    claimed(store, "r", identity())
    checkpoint_in(store, "r")
    other = identity(data="key-2", batch_size=64)
    run_id, notices = claimed(store, "r", other)
    assert run_id == f"r.{other.digest}"
    assert "its batch_size, data differ" in notices[0] and "from the start" in notices[0]
    checkpoint_in(store, run_id)
    # Fitted again (a tuning script run twice): each fit finds its own run, and says where.
    again, notices = claimed(store, "r", other)
    assert again == run_id and "resuming its last checkpoint there" in notices[0]
    assert claimed(store, "r", identity()) == ("r", [])
    # The first fit's checkpoint was never touched.
    assert store.read_bytes(f"{store.get_checkpoint_path('r')}/checkpoint.pt") == b"weights"


def test_checkpoints_without_a_record_belong_to_no_fit(store) -> None:
    checkpoint_in(store, "old")
    run_id, notices = claimed(store, "old", identity())
    assert run_id != "old" and "no record says which fit wrote them" in notices[0]


def test_a_run_in_training_is_never_shared(store) -> None:
    fit = identity()
    first = claim_run(store, "r", fit)
    try:
        with pytest.warns(RunIdReuseWarning, match="in use by another fit of the same model and data"):
            same = claim_run(store, "r", fit)
        same.release()
        assert same.run_id.startswith("r.") and same.run_id != "r"
        other = identity(batch_size=8)
        with pytest.warns(RunIdReuseWarning, match="belongs to another fit"):
            second = claim_run(store, "r", other)
        second.release()
        assert second.run_id == f"r.{other.digest}"
    finally:
        first.release()
    assert claimed(store, "r", fit) == ("r", [])


def test_concurrent_claims_get_distinct_runs(store) -> None:
    fits = [identity(batch_size=size) for size in (8, 16, 32, 64)]
    start = threading.Barrier(len(fits), timeout=60)
    claims = {}

    def claim(index):
        start.wait()
        claims[index] = claim_run(store, "shared", fits[index])

    threads = [threading.Thread(target=claim, args=(index,)) for index in range(len(fits))]
    with warnings.catch_warnings():          # once, here: catch_warnings in each thread would race
        warnings.simplefilter("ignore", RunIdReuseWarning)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert len({claim.run_id for claim in claims.values()}) == len(fits)
    for claim in claims.values():
        claim.release()


def test_identity_has_no_memory_addresses_and_names_code_by_name() -> None:
    import torch

    loss = torch.nn.MSELoss()
    assert described(loss) == "torch.nn.modules.loss.MSELoss: MSELoss()"
    assert described(torch.nn.functional.mse_loss) == "torch.nn.functional.mse_loss"
    assert described(object()) == "builtins.object"
    assert identity(loss=loss).key == identity(loss=torch.nn.MSELoss()).key
    assert identity(loss=loss).key != identity(loss=torch.nn.L1Loss()).key
    # The epochs are not part of the key, which checkpoints record; they are part of the digest.
    assert identity(epochs=1).key == identity(epochs=9).key and identity(epochs=1).digest != identity(epochs=9).digest


def plan(fit_key):
    return FitPlan(data=None, run_id="r", feature_cols=["x"], label_cols=["y"], sample_weight_col=None,
                   batch_size=1, val_batch_size=1, epochs=1, train_steps=1, val_steps=0, shuffle=False,
                   shuffle_buffer_size=None, seed=0, reader="arrow", inmemory_cache_all=False,
                   backward_passes_per_step=1, learning_rate_scaling="none", num_proc=1, fit_key=fit_key)


def test_a_rank_resumes_only_a_checkpoint_of_its_own_fit() -> None:
    check_checkpoint_fit(plan("abc"), "abc")
    check_checkpoint_fit(plan(None), "anything")
    with pytest.raises(CheckpointMismatchError, match="belongs to another fit \\(xyz\\)"):
        check_checkpoint_fit(plan("abc"), "xyz")
    with pytest.raises(CheckpointMismatchError, match="records no fit"):
        check_checkpoint_fit(plan("abc"), None)
