"""``horovod.runner.common.util.env.get_env_rank_and_size``, which Horovod's tests call before ``init``."""

from __future__ import annotations

from collective.config import launcher_rank_and_size


def get_env_rank_and_size() -> tuple[int, int] | None:
    """The (rank, size) the launcher exported (collective.run and horovodrun's HOROVOD_*, then Open MPI's,
    then MPICH's), or None outside a launcher; RuntimeError when a launcher set only one of a pair."""
    return launcher_rank_and_size()
