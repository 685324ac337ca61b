"""Real deep-learning inputs for the estimator tests: image files written with Pillow, read by Spark's
``binaryFile`` and ``image`` sources, text with a vocabulary built from it, and nested arrays."""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

SIDE = 8          # pixels a side: small enough for a 2-core test machine, big enough to be real images
# Two classes a model can tell apart: mostly red, or mostly blue.
_COLOURS = {0: (200, 40, 40), 1: (40, 40, 200)}

TEXTS = {
    0: ["the match ended with a late goal", "our team won the cup final", "the striker scored twice again",
        "fans cheered the winning goal", "the keeper saved a penalty kick"],
    1: ["the market fell on rate fears", "shares rose after strong profits", "the bank raised its rates",
        "investors sold stocks and bonds", "profits fell as costs rose sharply"],
}


def write_images(directory: str, per_class: int, corrupt: int = 0, seed: int = 0) -> list[str]:
    """``per_class`` images of each class, alternately JPEG and PNG, named ``<class>-<i>.<ext>``; then
    ``corrupt`` files named ``.jpg`` that hold no image. Returns the paths written."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    paths = []
    for label, colour in _COLOURS.items():
        for i in range(per_class):
            pixels = np.clip(np.array(colour) + rng.normal(0, 25, (SIDE, SIDE, 3)), 0, 255).astype(np.uint8)
            ext, fmt = ("jpg", "JPEG") if i % 2 == 0 else ("png", "PNG")
            path = os.path.join(directory, f"{label}-{i:03d}.{ext}")
            Image.fromarray(pixels).save(path, format=fmt)
            paths.append(path)
    for i in range(corrupt):
        path = os.path.join(directory, f"0-corrupt-{i}.jpg")
        with open(path, "wb") as f:
            f.write(b"this file is not an image at all")
        paths.append(path)
    return paths


def binary_images(spark: Any, directory: str) -> Any:
    """Spark's binaryFile DataFrame of the images, with the label their name gives."""
    from pyspark.sql import functions as F

    df = spark.read.format("binaryFile").load(directory)
    label = F.regexp_extract(F.element_at(F.split("path", "/"), -1), r"^(\d)-", 1).cast("double")
    return df.withColumn("label", label)


def decode_image(row: dict[str, Any]) -> dict[str, Any]:
    """Horovod's documented way: the bytes decoded in transformation_fn, as (channels, height, width). The label
    passes through where the row has one: transform's rows hold the feature columns only."""
    decoded = decode_image_hwc(row)
    decoded["content"] = decoded["content"].transpose(2, 0, 1)
    return decoded


def decode_image_hwc(row: dict[str, Any]) -> dict[str, Any]:
    """The bytes decoded as (height, width, channels) floats in [0, 1], as a Keras image model takes them."""
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(row["content"])).convert("RGB"), dtype=np.float32) / 255.0
    return {"content": pixels, **({"label": row["label"]} if "label" in row else {})}


def text_frame(spark: Any, repeats: int) -> Any:
    rows = [(text, float(label)) for _ in range(repeats) for label, texts in TEXTS.items() for text in texts]
    return spark.createDataFrame(rows, "text string, label double")


def vocabulary() -> dict[str, int]:
    """Word ids built from the texts themselves (0 pads, 1 is an unknown word)."""
    words = sorted({word for texts in TEXTS.values() for text in texts for word in text.split()})
    return {word: i + 2 for i, word in enumerate(words)}


def grids(spark: Any, rows: int, seed: int = 0, ragged_row: int | None = None) -> Any:
    """An ``array<array<float>>`` column of 4x4 grids whose label is whether the top half is brighter;
    ``ragged_row``: that row's last line has one value less."""
    rng = np.random.default_rng(seed)
    data = []
    for i in range(rows):
        label = i % 2
        grid = rng.normal(0, 1, (4, 4)) + np.where(np.arange(4)[:, None] < 2, 2 * label - 1, 1 - 2 * label)
        lines = [list(map(float, line)) for line in grid]
        if i == ragged_row:
            lines[-1] = lines[-1][:-1]
        data.append((lines, float(label)))
    return spark.createDataFrame(data, "grid array<array<double>>, label double").repartition(2)
