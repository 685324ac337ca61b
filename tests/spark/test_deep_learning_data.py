"""Deep-learning data straight from a DataFrame (issue 31): images from Spark's binaryFile and image sources,
text, nested and ragged arrays, fitted by the estimators on local[2], and the bad inputs each can hold."""

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
    """The ranks unpickle this module's models and functions, and its data helpers, without importing them."""
    import sys

    with pickled_by_value(dl, sys.modules[__name__]):
        yield


def _fails_before_launch(store, fit, message: str) -> None:
    """``fit`` raises InputError matching ``message``, and no run was started under the Store."""
    from spark_hvd.errors import InputError

    def runs() -> set[str]:
        return set(store.list(store.get_runs_path())) if store.exists(store.get_runs_path()) else set()

    before = runs()
    with pytest.raises(InputError, match=message):
        fit()
    assert runs() == before


def _image_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * dl.SIDE ** 2, 2))


def _cross_entropy(output: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(output, label.long())


def _torch_estimator(store, model: nn.Module, feature: str, **overrides):
    from spark_hvd import TorchEstimator

    settings = dict(num_proc=2, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.02),
                    loss=_cross_entropy, feature_cols=[feature], label_cols=["label"], batch_size=8, epochs=4,
                    store=store, verbose=0, random_seed=1)
    settings.update(overrides)
    return TorchEstimator(**settings)


def test_images_from_binary_files_train_a_conv_net_stored_as_their_bytes(local_spark, store, tmp_path) -> None:
    paths = dl.write_images(str(tmp_path / "images"), per_class=24)
    df = dl.binary_images(local_spark, str(tmp_path / "images"))
    model = _torch_estimator(store, _image_net(), "content", transformation_fn=dl.decode_image).fit(df)
    losses = [epoch["loss"] for epoch in model.getEpochMetrics()]
    assert losses[-1] < losses[0] * 0.5, losses
    # The Store holds the encoded files, not decoded floats (12x larger for these 8x8 RGB images).
    fs = store.filesystem()
    written = sum(fs.size(p) for p in fs.find(store.join("intermediate_data")) if p.endswith(".parquet"))
    encoded = sum(len(open(p, "rb").read()) for p in paths)
    assert written < 1.5 * encoded + 64 * 1024, (written, encoded)


def test_a_corrupt_image_fails_with_the_users_decode_error_naming_its_path(local_spark, store, tmp_path) -> None:
    from spark_hvd import RunError

    dl.write_images(str(tmp_path / "images"), per_class=8, corrupt=1)
    df = dl.binary_images(local_spark, str(tmp_path / "images"))
    with pytest.raises((RunError, Exception)) as failure:
        _torch_estimator(store, _image_net(), "content", transformation_fn=dl.decode_image, epochs=1).fit(df)
    message = str(failure.value)
    assert "UnidentifiedImageError" in message, message
    assert "transformation_fn raised this on the train split" in message and "0-corrupt-0.jpg" in message, message


def test_spark_image_source_rows_arrive_as_height_width_channels_pixels(local_spark, store, tmp_path) -> None:
    dl.write_images(str(tmp_path / "images"), per_class=16)
    from pyspark.sql import functions as F

    df = local_spark.read.format("image").load(str(tmp_path / "images"))
    df = df.withColumn("label", F.regexp_extract(F.element_at(F.split("image.origin", "/"), -1), r"^(\d)-", 1)
                       .cast("double"))
    seen_shapes = []

    def pixels(row):
        seen_shapes.append(row["image"].shape)
        assert row["image"].dtype == np.uint8
        # Spark's image source stores colour images as BGR.
        return {"image": row["image"][:, :, ::-1].astype(np.float32).transpose(2, 0, 1) / 255.0,
                "label": row["label"]}

    model = _torch_estimator(store, _image_net(), "image", transformation_fn=pixels).fit(df)
    losses = [epoch["loss"] for epoch in model.getEpochMetrics()]
    assert losses[-1] < losses[0], losses


class _Bag(nn.Module):
    """Word ids (padded with 0) -> mean embedding -> two classes."""

    def __init__(self, words: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = nn.EmbeddingBag(words, 8, mode="mean", padding_idx=0)
        self.out = nn.Linear(8, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embedding(ids.long()))


def test_text_is_tokenized_and_padded_in_the_transformation(local_spark, store) -> None:
    vocabulary = dl.vocabulary()
    width = 8

    def token_ids(row):
        ids = [vocabulary.get(word, 1) for word in row["text"].split()][:width]
        return {"text": np.array(ids + [0] * (width - len(ids)), dtype=np.int64), "label": row["label"]}

    df = dl.text_frame(local_spark, repeats=8)
    model = _torch_estimator(store, _Bag(len(vocabulary) + 2), "text", transformation_fn=token_ids,
                             epochs=6).fit(df)
    losses = [epoch["loss"] for epoch in model.getEpochMetrics()]
    assert losses[-1] < losses[0] * 0.5, losses


def test_token_ids_of_varying_lengths_reach_the_transformation_as_they_are(local_spark, store) -> None:
    from pyspark.sql import functions as F

    vocabulary = dl.vocabulary()
    lookup = F.udf(lambda text: [vocabulary.get(w, 1) for w in text.split()], "array<int>")
    df = dl.text_frame(local_spark, repeats=4).withColumn("ids", lookup("text")).select("ids", "label")
    lengths = []

    def pad(row):
        lengths.append(len(row["ids"]))
        ids = list(row["ids"][:8])
        return {"ids": np.array(ids + [0] * (8 - len(ids)), dtype=np.int64), "label": row["label"]}

    model = _torch_estimator(store, _Bag(len(vocabulary) + 2), "ids", transformation_fn=pad, epochs=2).fit(df)
    assert len(model.getEpochMetrics()) == 2

    def unpadded(row):
        return {"ids": np.asarray(row["ids"], dtype=np.int64), "label": row["label"]}

    # Left ragged by the transformation: a named error before launch (the sample check runs it).
    _fails_before_launch(
        store, lambda: _torch_estimator(store, _Bag(len(vocabulary) + 2), "ids", transformation_fn=unpadded).fit(df),
        "transformation_fn returned column 'ids' with shape")


def test_nested_grids_arrive_with_their_shape(local_spark, store) -> None:
    shapes = []

    def keep(row):
        shapes.append(row["grid"].shape)
        return row

    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 2))
    model = _torch_estimator(store, net, "grid", transformation_fn=keep).fit(dl.grids(local_spark, 128))
    losses = [epoch["loss"] for epoch in model.getEpochMetrics()]
    assert losses[-1] < losses[0], losses
    # Without a transformation too: the model takes (batch, 4, 4).
    torch.manual_seed(0)
    plain = _torch_estimator(store, nn.Sequential(nn.Flatten(), nn.Linear(16, 2)), "grid").fit(dl.grids(local_spark, 64))
    assert len(plain.getEpochMetrics()) == 4


def test_a_ragged_nested_array_is_named_with_its_row_and_lengths(local_spark, store) -> None:
    df = dl.grids(local_spark, 64, ragged_row=37)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 2))
    _fails_before_launch(store, lambda: _torch_estimator(store, net, "grid").fit(df),
                                   r"column 'grid' is ragged at nesting level 1: row \d+ of partition \d+ holds an "
                                   r"array of 3 values where the rows before it hold 4")


def test_encoded_columns_without_a_transformation_are_named_before_launch(local_spark, store, tmp_path) -> None:
    dl.write_images(str(tmp_path / "images"), per_class=4)
    df = dl.binary_images(local_spark, str(tmp_path / "images"))
    _fails_before_launch(store, lambda: _torch_estimator(store, _image_net(), "content").fit(df),
                                   r"column\(s\) 'content' \(binary\) hold encoded values")
    _fails_before_launch(
        store, lambda: _torch_estimator(store, _image_net(), "content", reader="petastorm",
                                 transformation_fn=dl.decode_image).fit(df),
        r"reader='petastorm' .* 'content' \(binary\)")
