"""The input-pipeline benchmark's data: photo-like JPEGs written as files, and Spark's binaryFile DataFrame of them.

A photo's JPEG size comes from smooth shading, edges and sensor noise; flat synthetic images would encode
to a few hundred bytes and make every reader look fast. Each image here is a few colour gradients and
waves, some discs with hard edges, and Gaussian noise: at quality 85 that is 10-20 KB per 224x224 image,
as photos of that size are. The label is the image's class folder (c0 ... c9), as in ImageFolder layouts.
"""

from __future__ import annotations

import io
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

SIDE = 224
CLASSES = 10
QUALITY = 85


def photo_like(rng: np.random.Generator, side: int = SIDE) -> np.ndarray:
    """One (side, side, 3) uint8 image: gradients and waves per channel, discs, noise."""
    y, x = np.mgrid[0:side, 0:side].astype(np.float32) / side
    image = np.empty((side, side, 3), np.float32)
    for channel in range(3):
        a, b, f = rng.uniform(-1, 1, 3)
        phase, slant = rng.uniform(0, 6), rng.uniform(0, 3)
        image[..., channel] = 128 + 60 * (a * x + b * y) + 40 * np.sin(2 * np.pi * (3 * f * x + slant * y) + phase)
    for _ in range(4):
        cx, cy = rng.uniform(0, 1, 2)
        radius = rng.uniform(0.05, 0.25)
        image[(x - cx) ** 2 + (y - cy) ** 2 < radius * radius] += rng.uniform(-70, 70, 3)
    image += rng.normal(0, 9, image.shape).astype(np.float32)
    return np.clip(image, 0, 255).astype(np.uint8)


def _write_range(directory: str, start: int, stop: int) -> None:
    """Images start..stop-1, each from its own seed, so that the set is the same however it is split."""
    from PIL import Image

    for index in range(start, stop):
        buffer = io.BytesIO()
        Image.fromarray(photo_like(np.random.default_rng(index))).save(buffer, "JPEG", quality=QUALITY)
        path = os.path.join(directory, f"c{index % CLASSES}", f"img-{index:06d}.jpg")
        with open(path, "wb") as out:
            out.write(buffer.getvalue())


def write_images(directory: str, count: int, processes: int = 2) -> int:
    """``count`` JPEGs under ``directory``/c<label>/img-<index>.jpg, reusing the ones already there; returns the
    JPEG bytes on disk. A folder holding other JPEGs is refused (binaryFile would read them too)."""
    import re

    found = jpeg_files(directory)
    ours = re.compile(r"c\d+/img-(\d{6})\.jpg$")
    foreign = [p for p in found if not ours.search(p.replace(os.sep, "/"))]
    if foreign:
        raise SystemExit(f"{directory} holds JPEGs this benchmark did not write ({foreign[0]}...): give --data-dir "
                         "an empty or benchmark-only folder")
    for path in found:
        if _index(path) >= count:
            os.remove(path)
    if len([p for p in found if _index(p) < count]) != count:
        for label in range(CLASSES):
            os.makedirs(os.path.join(directory, f"c{label}"), exist_ok=True)
        bounds = np.linspace(0, count, processes * 4 + 1).astype(int)
        with ProcessPoolExecutor(processes) as pool:
            list(pool.map(_write_range, [directory] * (len(bounds) - 1), bounds[:-1], bounds[1:]))
    return sum(os.path.getsize(p) for p in jpeg_files(directory))


def jpeg_files(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(root, name) for root, _, names in os.walk(directory)
                  for name in names if name.endswith(".jpg"))


def _index(path: str) -> int:
    return int(os.path.basename(path)[4:10])


def binary_images(spark: Any, directory: str, partitions: int = 2) -> Any:
    """Spark's binaryFile rows of the JPEGs (path, modificationTime, length, content) with a ``label``
    long from the class folder, cached and counted so that every contender starts from the same rows."""
    from pyspark.sql import functions as F

    df = (spark.read.format("binaryFile").option("pathGlobFilter", "*.jpg").option("recursiveFileLookup", "true")
          .load(directory)
          .withColumn("label", F.regexp_extract("path", r"/c(\d+)/", 1).cast("long"))
          .repartition(partitions).cache())
    df.count()
    return df
