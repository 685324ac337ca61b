"""The order in which `pytest -n 2 --dist loadfile` (make suite) hands test files to its two workers: the
slowest files first, then xdist's own order (files with more tests first).

xdist puts files with one test last, and several of the slowest are such files (a notebook, a standalone
cluster, a terminal, emulated hosts: a minute or more each); a worker also queues up to three files
ahead. Left at the end, they kept one worker busy for minutes while the other had nothing left to take.
Starting with them leaves the short files to even out the two workers' finish. A file missing from the
list (renamed, or new) only loses its head start.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadFileScheduling

# The slowest files of CI's --durations, slowest first (a file's tests together, under -n 2).
SLOWEST_FILES = (
    "tests/scale/test_many_ranks.py",
    "tests/collective/test_small_calls.py",
    "tests/scale/test_many_rank_failures.py",
    "tests/compat/test_ports.py",
    "tests/spark/test_keras_horovod_parity.py",
    "tests/tensorflow/test_tf_ops.py",
    "tests/spark/test_tuning_standalone.py",
    "tests/spark/test_mid_epoch_resume.py",
    "tests/spark/test_concurrent_fits.py",
    "tests/spark/test_tuning_runs_apart.py",
    "tests/spark/test_exactly_once.py",
    "tests/spark/test_classifier_outputs.py",
    "tests/spark/test_run_elastic_retries.py",
    "tests/spark/test_keras_estimator_standalone.py",
    "tests/multihost/test_spark_hosts.py",
    "tests/spark/test_notebook.py",
    "tests/tensorflow/test_tf_training.py",
    "tests/spark/test_progress_display.py",
    "tests/mpi/test_mpi_process_sets.py",
    "tests/spark/test_torch_estimator_standalone.py",
    "tests/spark/test_run_standalone_registration.py",
)


class SlowestFilesFirst(LoadFileScheduling):
    """xdist's loadfile scheduling, with its queue of files reordered once, before the first file goes out."""

    _reordered = False

    def _assign_work_unit(self, node: Any) -> None:
        if not self._reordered:
            self._reordered = True
            rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
            # sorted is stable: the files not listed keep xdist's order, after the listed ones.
            queue = sorted(self.workqueue.items(), key=lambda unit: rank.get(unit[0], len(rank)))
            self.workqueue.clear()
            self.workqueue.update(queue)
        super()._assign_work_unit(node)
