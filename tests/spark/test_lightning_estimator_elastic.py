"""The Lightning TorchEstimator(elastic=True) on local[2] with real torch and Lightning: its params, the checks
before launch, a fit whose rank is killed mid-epoch resuming from the last commit, and its rank function under
the local elastic launcher going on at one rank (in-process re-form, Lightning's position moved, the learning
rate rescaled)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pytorch_lightning")

import elastic_victim  # noqa: E402
import lightning_models  # noqa: E402
from by_value import pickled_by_value  # noqa: E402
from estimator_data import BAD_ELASTIC_BOUNDS, assert_fit_fails_before_launch, blobs  # noqa: E402
from estimator_elastic_job import run_rank_fn_elastic  # noqa: E402
from lightning_models import Classifier, ElasticVictim  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module", autouse=True)
def ship_test_objects_by_value():
    with pickled_by_value(lightning_models, elastic_victim):
        yield


def make_estimator(store, **overrides):
    from spark_hvd.lightning import TorchEstimator

    settings = dict(num_proc=2, model=Classifier(), feature_cols=["features"], label_cols=["label"], batch_size=32,
                    epochs=2, store=store, verbose=0, elastic=True)
    settings.update(overrides)
    return TorchEstimator(**settings)


class _DataModule(lightning_models.pl.LightningDataModule):
    pass


@pytest.mark.parametrize("overrides, message", [
    *BAD_ELASTIC_BOUNDS,
    ({"elastic": False, "min_num_proc": 1}, r"min_num_proc given without elastic=True"),
    ({"data_module": _DataModule}, r"data_module cannot be given with elastic=True"),
])
def test_bad_elastic_params_fail_before_launch(local_spark, store, overrides, message) -> None:
    assert_fit_fails_before_launch(local_spark, store, make_estimator, overrides, None, message)


def test_elastic_is_checked_by_the_bounds_alone(store) -> None:
    from spark_hvd.common.backend import SparkBackend
    from spark_hvd.errors import InputError
    from spark_hvd.lightning import TorchEstimator

    make_estimator(store, min_num_proc=1)._check_elastic(SparkBackend(num_proc=2))

    class WithoutElastic(TorchEstimator):
        elastic_supported = False

    # An estimator without elastic training names the ones with it.
    with pytest.raises(InputError, match=r"has no elastic training yet; .*spark_hvd.lightning.TorchEstimator"):
        WithoutElastic(elastic=True)._check_elastic(SparkBackend(num_proc=2))


def test_elastic_params_save_and_load(tmp_path) -> None:
    from spark_hvd.lightning import TorchEstimator

    path = str(tmp_path / "estimator")
    make_estimator(None, min_num_proc=1, max_num_proc=3, elastic_commit_steps=7).save(path)
    loaded = TorchEstimator.load(path)
    assert (loaded.getElastic(), loaded.getMinNumProc(), loaded.getMaxNumProc(), loaded.getElasticCommitSteps()) \
        == (True, 1, 3, 7)
    assert TorchEstimator().getElastic() is False


def _fit(spark, store, tmp_path, kill_at_call: int, name: str, elastic: bool = True):
    model = ElasticVictim(kill_at_call, marker=str(tmp_path / f"{name}.killed"))
    elastic_params = {"min_num_proc": 1, "elastic_commit_steps": 3} if elastic else {"elastic": False}
    estimator = make_estimator(store, model=model, random_seed=5, run_id=name, validation=0.25, **elastic_params)
    return estimator.fit(blobs(spark, 512))


def test_fit_with_a_rank_killed_mid_epoch_resumes_from_the_commit(local_spark, store, tmp_path) -> None:
    # 512 rows, a quarter for validation: 6 steps an epoch on 2 ranks; a commit at step 3 and at each epoch's
    # end, after validation. Rank 1 dies in its 5th step, after both ranks applied the 4th (uncommitted);
    # local[2] frees its slot, so the relaunched stage has 2 ranks again and reads exactly the batches its
    # epoch had left.
    late = _fit(local_spark, store, tmp_path, kill_at_call=5, name="late")
    assert (tmp_path / "late.killed").exists()
    assert late.getReformations() == [{"epoch": 0, "step": 3, "size": 2, "previous_size": 2}]
    # Compared with a static fit that lost nothing (rather than with one killed right after the same commit,
    # as the torch and Keras tests do): the commit holds the momentum, the step-wise LR schedule and
    # Lightning's position, so the rolled-back step 4 and the resume leave no trace at all.
    whole = _fit(local_spark, store, tmp_path, kill_at_call=10**6, name="whole", elastic=False)
    assert not (tmp_path / "whole.killed").exists() and whole.getReformations() == []
    for (name, tensor), other in zip(late.getModel().state_dict().items(), whole.getModel().state_dict().values()):
        assert tensor.dtype == torch.float64, name
        torch.testing.assert_close(tensor, other)
    # One record per epoch: the records before the commit came back with it, none was repeated. The resumed
    # epoch's on_epoch mean covers its steps since the resume (Lightning keeps no running sums in a
    # checkpoint); the next epoch is whole again.
    assert [entry["epoch"] for entry in late.getEpochMetrics()] == [0, 1]
    assert late.getEpochMetrics()[1] == pytest.approx(whole.getEpochMetrics()[1])
    assert [entry["val_loss"] for entry in late.getEpochMetrics()] == \
        pytest.approx([entry["val_loss"] for entry in whole.getEpochMetrics()])
    assert late.getHistory() == pytest.approx(whole.getHistory())


def test_rank_fn_goes_on_at_one_rank_under_the_local_elastic_launcher(local_spark, store, tmp_path) -> None:
    """The rank function as fit builds it, on hostA and hostB of a local elastic job that loses hostB's rank
    in its 5th step: rank 0 re-forms in-process at one rank, where an epoch has 16 steps, not 8."""
    from spark_hvd.common.util import DEFAULT_SPLIT_SEED
    from spark_hvd.data import check_schema, materialize_checked

    df = blobs(local_spark, 512)
    estimator = make_estimator(store, model=ElasticVictim(kill_at_call=5), min_num_proc=1, elastic_commit_steps=3,
                               random_seed=5)
    data = materialize_checked(df, store, check_schema(df, ["features"], ["label"], None, None), DEFAULT_SPLIT_SEED,
                               2)
    # by_value=[]: this module's fixture ships the test modules by value already, for the whole module.
    result = run_rank_fn_elastic(tmp_path, estimator._rank_fn(estimator._plan(data, 2)), "shrunk", by_value=[])
    # Committed at step 3 of 8, resumed at step 6 of 16 (the same fraction of the epoch).
    assert result["reformations"] == [{"epoch": 0, "step": 6, "size": 1, "previous_size": 2}]
    records = result["epoch_metrics"]
    assert [entry["epoch"] for entry in records] == [0, 1]
    # Lightning's position was moved to the resumed step: the epoch ended at its 16th batch, read from the
    # shard after the 6 skipped, as did the next, whole, epoch.
    assert [entry["batch_idx"] for entry in records] == [15.0, 15.0]
    # The rate follows the size (0.05 on one rank, not 0.1 as on two), the step-wise schedule kept: the 29th
    # optimizer step of the job (3 committed + 10 + 16) trains at 0.05 * 0.5 ** (28 // 5).
    assert records[1]["lr"] == pytest.approx(0.05 * 0.5 ** 5)


def test_moved_to_step_keeps_the_shape_of_a_save_at_a_batch_end() -> None:
    from spark_hvd.lightning.elastic_commits import moved_to_step

    def counts(done: int) -> dict:
        return {"ready": done, "started": done, "processed": done, "completed": done - 1}

    checkpoint = {"epoch": 0, "loops": {"fit_loop": {"epoch_loop.batch_progress": {
        "current": counts(3), "total": counts(11), "is_last_batch": False}}}}
    moved = moved_to_step(checkpoint, 6)["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert (moved["current"], moved["total"]) == (counts(6), counts(14))
    # Rounded down to the epoch's start: Lightning reads it as a save at the end of batch "0".
    moved = moved_to_step(checkpoint, 0)["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert (moved["current"], moved["total"]) == (counts(0), counts(8))
