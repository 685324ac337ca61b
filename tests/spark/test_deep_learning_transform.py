"""model.transform(df) on the raw columns a fit took (issue 31): images read by Spark's binaryFile source (JPEG
and PNG written with Pillow) are decoded by the fit's transformation_fn at transform too, for torch, Keras and
Lightning; the model saves and loads with it and predicts the same; inference_transformation_fn replaces or drops
it; a model of numeric features keeps Horovod's transform (no transformation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import deep_learning_data as dl
from by_value import pickled_by_value

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def _by_value():
    """The ranks and the transform tasks unpickle this module's models and functions without importing them."""
    import sys

    with pickled_by_value(dl, sys.modules[__name__]):
        yield


@pytest.fixture
def images(local_spark, tmp_path):
    """24 labelled 8x8 images, alternately JPEG and PNG, as binaryFile reads them; and the same without labels."""
    dl.write_images(str(tmp_path / "images"), per_class=12)
    df = dl.binary_images(local_spark, str(tmp_path / "images"))
    return df, df.drop("label")


def _scores(df, column: str = "label__output") -> dict[str, np.ndarray]:
    """path -> the prediction, as an array (a DenseVector or a list)."""
    return {row["path"]: np.asarray(row[column].toArray() if hasattr(row[column], "toArray") else row[column])
            for row in df.select("path", column).collect()}


def _assert_round_trip(model, loader, unlabelled, tmp_path) -> dict[str, np.ndarray]:
    """transform on unlabelled images; save, load, transform again: identical predictions."""
    before = _scores(model.transform(unlabelled))
    assert len(before) == 24
    model.save(str(tmp_path / "model"))
    loaded = loader.load(str(tmp_path / "model"))
    assert loaded.getTransformationFn() is not None
    after = _scores(loaded.transform(unlabelled))
    assert before.keys() == after.keys()
    for path in before:
        np.testing.assert_array_equal(before[path], after[path])
    return before


def _accuracy(scores: dict[str, np.ndarray]) -> float:
    import os

    right = [int(np.argmax(v)) == int(os.path.basename(p)[0]) for p, v in scores.items()]
    return sum(right) / len(right)


def _image_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * dl.SIDE ** 2, 2))


def _cross_entropy(output: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(output, label.long())


def test_torch_fit_transform_save_load_on_image_files(images, store, tmp_path) -> None:
    from spark_hvd import TorchEstimator, TorchModel
    from spark_hvd.errors import InputError

    df, unlabelled = images
    net = _image_net()
    model = TorchEstimator(num_proc=2, model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.02),
                           loss=_cross_entropy, feature_cols=["content"], label_cols=["label"], batch_size=8,
                           epochs=4, store=store, verbose=0, random_seed=1,
                           transformation_fn=dl.decode_image).fit(df)
    scores = _assert_round_trip(model, TorchModel, unlabelled, tmp_path)
    assert _accuracy(scores) >= 0.75, scores
    # The labelled DataFrame predicts the same (its label is not given to the transformation).
    assert _scores(model.transform(df)).keys() == scores.keys()

    # Dropped for inference: the encoded column is named before any task runs.
    with pytest.raises(InputError, match=r"feature column 'content' \(binary\) holds encoded values"):
        model.copy().setInferenceTransformationFn(False).transform(unlabelled)

    # Replaced: a function that needs the label fails naming the row's path and the rule.
    def needs_label(row):
        return {"content": dl.decode_image(row)["content"], "label": row["label"]}

    with pytest.raises(Exception, match=r"(?s)KeyError.*transform\(\), on row \d+ of a chunk .*path .*\.(jpg|png).*"
                                        r"no label"):
        model.copy().setInferenceTransformationFn(needs_label).transform(unlabelled).collect()


class _Doubling:
    """A transformation that changes numeric features, to tell whether transform applied it."""

    def __call__(self, row):
        return {**row, "features": row["features"] * 0.0}


def test_numeric_features_keep_horovods_transform_unless_asked(local_spark) -> None:
    """A model whose feature columns are all numeric does not apply the fit's transformation_fn by default (as
    Horovod's transform), applies it with inference_transformation_fn=True, and keeps the choice across copy()."""
    from spark_hvd import TorchModel
    from spark_hvd.estimator.batch_transform import InputSpec, OutputSpec

    torch.manual_seed(0)
    net = nn.Linear(2, 1)
    model = TorchModel(model=net, feature_columns=["features"], label_columns=["y"])
    # As a fit on an array<double> column leaves it.
    model._input_specs = [InputSpec("features", "float64", (2,), "array")]
    model._output_specs = [OutputSpec("y__output", (1,), "scalar", "float64")]
    model._set_fit_transformation(_Doubling())
    df = local_spark.createDataFrame([([1.0, 2.0],), ([3.0, -1.0],)], "features array<double>")
    plain = [row["y__output"] for row in model.transform(df).collect()]
    with torch.no_grad():
        expected = net(torch.tensor([[1.0, 2.0], [3.0, -1.0]])).reshape(-1).tolist()
    np.testing.assert_allclose(plain, expected, rtol=1e-6)
    zeroed = [row["y__output"] for row in model.copy().setInferenceTransformationFn(True).transform(df).collect()]
    np.testing.assert_allclose(zeroed, [float(net.bias.detach())] * 2, rtol=1e-6)


def test_keras_fit_transform_save_load_on_image_files(images, store, tmp_path) -> None:
    keras = pytest.importorskip("keras")
    from spark_hvd import KerasEstimator, KerasModel

    df, unlabelled = images
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input((dl.SIDE, dl.SIDE, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
                            keras.layers.Flatten(), keras.layers.Dense(2)])
    model = KerasEstimator(num_proc=2, model=net, optimizer=keras.optimizers.Adam(0.02),
                           loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                           feature_cols=["content"], label_cols=["label"], batch_size=8, epochs=4, store=store,
                           verbose=0, random_seed=1, transformation_fn=dl.decode_image_hwc).fit(df)
    scores = _assert_round_trip(model, KerasModel, unlabelled, tmp_path)
    assert _accuracy(scores) >= 0.75, scores


def _lightning_image_module():
    import pytorch_lightning as pl

    class ImageModule(pl.LightningModule):
        """training_step gets a dict of tensors: batch['content'] (B, 3, 8, 8) floats, batch['label']."""

        def __init__(self) -> None:
            super().__init__()
            self.net = _image_net()

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            assert isinstance(batch["content"], torch.Tensor), type(batch["content"])
            return nn.functional.cross_entropy(self(batch["content"]), batch["label"].long())

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.02)

    return ImageModule()


def test_lightning_fit_transform_save_load_on_image_files(images, store, tmp_path) -> None:
    pytest.importorskip("pytorch_lightning")
    from spark_hvd.lightning import TorchEstimator, TorchModel

    df, unlabelled = images
    model = TorchEstimator(num_proc=2, model=_lightning_image_module(), feature_cols=["content"],
                           label_cols=["label"], batch_size=8, epochs=4, store=store, verbose=0, random_seed=1,
                           transformation_fn=dl.decode_image).fit(df)
    scores = _assert_round_trip(model, TorchModel, unlabelled, tmp_path)
    assert _accuracy(scores) >= 0.75, scores
