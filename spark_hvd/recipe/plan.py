"""Rank child and driver: what a fit's ranks are told, besides the framework's own objects.

The driver builds a ``FitPlan`` (estimator/base.py) and pickles it into the rank function; the rank child
reads it. Nothing here imports pyspark, so that a rank never loads Spark's ML modules to unpickle its plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class EpochSteps:
    """How many steps an epoch has at a given number of ranks: the user's fixed counts, or the rows divided
    among the ranks (as the static plan computes them)."""

    train_rows: int
    val_rows: int
    batch_size: int
    val_batch_size: int
    backward_passes_per_step: int
    whole_training_batches: bool
    train_steps_per_epoch: int | None = None
    validation_steps_per_epoch: int | None = None

    def at(self, size: int) -> tuple[int, int]:
        """(training steps, validation steps) of one epoch on ``size`` ranks."""
        from spark_hvd.data import steps_per_epoch

        bpps = self.backward_passes_per_step
        train = steps_per_epoch(self.train_rows, size, self.batch_size, self.train_steps_per_epoch,
                                whole_batches_only=self.whole_training_batches)
        # Whole accumulation windows only, so that every epoch ends on an optimizer step.
        train = -(-train // bpps) * bpps
        val = (steps_per_epoch(self.val_rows, size, self.val_batch_size, self.validation_steps_per_epoch)
               if self.val_rows else 0)
        return train, val

    def resumed_step(self, done: int, rows_left: int, size: int) -> int:
        """The step of an epoch of ``size`` ranks at which training resumes after ``done`` steps at another
        size left ``rows_left`` rows of the pass untrained: the steps left are as many as those rows fill,
        the last one padded (in whole accumulation windows), so that the epoch trains each of its rows once
        whatever the sizes; at most the epoch's steps at ``size``. An epoch of ``train_steps_per_epoch``
        steps is a count of steps: ``done`` stays."""
        from spark_hvd.data import steps_per_epoch

        train = self.at(size)[0]
        if self.train_steps_per_epoch is not None:
            return min(done, train)
        bpps = self.backward_passes_per_step
        left = steps_per_epoch(rows_left, size, self.batch_size)
        return max(0, train - -(-left // bpps) * bpps)


@dataclass(frozen=True)
class ElasticPlan:
    """``commit_steps``: steps between commits within an epoch (a multiple of backward_passes_per_step, so
    that no commit falls inside an accumulation window); there is one at each epoch's end too."""

    commit_steps: int
    min_num_proc: int
    max_num_proc: int
    steps: EpochSteps


@dataclass(frozen=True)
class FitPlan:
    """Everything the ranks need besides the framework's own objects; picklable."""
    data: Any                     # spark_hvd.data.Materialized
    run_id: str
    feature_cols: list[str]
    label_cols: list[str]
    sample_weight_col: str | None
    batch_size: int
    val_batch_size: int
    epochs: int
    train_steps: int
    val_steps: int
    shuffle: bool
    shuffle_buffer_size: int | None   # None: the reader's default
    seed: int
    reader: str
    inmemory_cache_all: bool
    backward_passes_per_step: int
    learning_rate_scaling: str
    num_proc: int
    label_shapes: list[tuple[int, ...]] | None = None
    transformation_edit_fields: list[Any] | None = None
    transformation_removed_fields: list[str] | None = None
    stop_on_nonfinite_loss: bool = True
    elastic: ElasticPlan | None = None   # None: a static fit
    # Decode workers per rank for each split's transformation_fn (Horovod's names); None: chosen from the
    # rank's cores (data/decode_pool.py default_reader_workers), 0 where there is no transformation_fn.
    train_reader_num_workers: int | None = None
    val_reader_num_workers: int | None = None
    # The fit's identity (estimator/fit_identity.py): its checkpoints record it, and rank 0 resumes only a
    # checkpoint that records the same (recipe/checkpoint_fit.py). None: not checked.
    fit_key: str | None = None
    # Steps between checkpoints inside an epoch (a multiple of backward_passes_per_step); None: at epochs' ends only.
    checkpoint_every_steps: int | None = None
    epoch_steps: EpochSteps | None = None   # how the epoch's steps follow the rows and the size

    def steps_at(self, size: int) -> tuple[int, int]:
        """(training, validation) steps an epoch at ``size`` ranks: an elastic fit's change with its size."""
        return self.elastic.steps.at(size) if self.elastic is not None else (self.train_steps, self.val_steps)

    def reader_for(self, split: str, rank: int, size: int) -> Any:
        """This rank's reader of ``split``, as the plan says (shuffling only the training split)."""
        from spark_hvd.data import make_reader

        batch = self.batch_size if split == "train" else self.val_batch_size
        return make_reader(self.data, split, rank, size, batch, shuffle=self.shuffle and split == "train",
                           seed=self.seed, reader=self.reader, shuffle_buffer_rows=self.shuffle_buffer_size,
                           inmemory_cache_all=self.inmemory_cache_all)

    def readers(self, rank: int, size: int) -> dict[str, Any]:
        """The readers of the splits this fit steps through: "train", and "val" when it validates."""
        return {split: self.reader_for(split, rank, size)
                for split, steps in (("train", self.train_steps), ("val", self.val_steps)) if steps}

    def feeds(self, rank: int, size: int, transformation_fn: Any = None,
              workers: Mapping[str, int | None] | None = None, ranks_on_host: int | None = None,
              resume: Any = None) -> dict[str, Any]:
        """This rank's ``RankFeed`` of each split it steps through, the steps per epoch those of ``size``
        ranks, each batch after ``transformation_fn`` (with the plan's edit and removed fields), run by the
        split's decode workers: ``workers[split]`` where given, else the plan's ``*_reader_num_workers``
        (None: ``reader_workers``'s default, from ``ranks_on_host``, by default collective's local size).
        ``resume``: the training epoch's data position a resume starts from (``Position.data``)."""
        from spark_hvd.data.feed.rank_feed import RankFeed, Transformation

        transformation = (Transformation(transformation_fn, self.transformation_edit_fields,
                                         self.transformation_removed_fields) if transformation_fn else None)
        steps = dict(zip(("train", "val"), self.steps_at(size)))
        feeds = {}
        for split, reader in self.readers(rank, size).items():
            count = (workers or {}).get(split)
            if count is None:
                count = self.reader_workers(split, transformation is not None, ranks_on_host)
            feeds[split] = RankFeed(reader, steps[split], transformation, workers=count,
                                    resume=resume if split == "train" else None)
        return feeds

    def reader_workers(self, split: str, has_transformation: bool, ranks_on_host: int | None = None) -> int:
        """The decode workers of ``split``'s feed: the plan's count where set, else a default from the
        rank's share of its host's cores (0 without a transformation, at most 4)."""
        from spark_hvd.data.feed.decode_pool import default_reader_workers

        count = self.train_reader_num_workers if split == "train" else self.val_reader_num_workers
        if count is not None:
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"{split}_reader_num_workers must be an integer of 0 or more, got {count!r}")
            return count if has_transformation else 0
        ranks_on_host = _ranks_on_host() if ranks_on_host is None else ranks_on_host
        return default_reader_workers(has_transformation, ranks_on_host)


def _ranks_on_host() -> int:
    """collective's local size where it is running (a rank), else 1."""
    import sys

    collective = sys.modules.get("collective")
    try:
        return max(1, int(collective.local_size())) if collective and collective.is_initialized() else 1
    except Exception:  # noqa: BLE001 - a default only
        return 1
