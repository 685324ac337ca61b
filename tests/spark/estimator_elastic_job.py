"""Runs an estimator's rank function (``_rank_fn(plan)``, as fit builds it) as the workers of a local elastic
job (``python -m collective.run --min-np 1 --max-np N``) on hostA, hostB (and more), one slot each, so that a
test can lose a rank in-process and watch the job shrink; the test modules it needs go by value."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

import cloudpickle

ELASTIC_TESTS = Path(__file__).resolve().parents[1] / "elastic"
sys.path.insert(0, str(ELASTIC_TESTS))
from elastic_job import ElasticJob, write_discovery  # noqa: E402
from by_value import pickled_by_value  # noqa: E402


def run_rank_fn_elastic(tmp_path: Path, fn: Any, name: str, by_value: Iterable[ModuleType], hosts: int = 2,
                        lost: str = "hostB:0") -> dict:
    """``fn`` on ``hosts`` hosts (hostA, hostB, ...) under the local elastic launcher, which must lose the
    rank on ``lost``; rank 0's result (of the last formation)."""
    work = tmp_path / name
    work.mkdir()
    with pickled_by_value(*by_value):
        (work / "fn.pkl").write_bytes(cloudpickle.dumps(fn))
    discovery, _ = write_discovery(work, [f"host{chr(ord('A') + index)}:1" for index in range(hosts)])
    with ElasticJob("estimator_rank_fn.py", discovery, str(work / "fn.pkl"), str(work / "result.pkl"),
                    min_np=1, max_np=hosts, elastic_timeout_s=60, timeout_s=150 + 60 * (hosts - 2)) as job:
        job.wait_for(rf"round 1: {hosts} worker")
        code, output = job.finish()
    assert code == 0, output
    assert lost in output and "lost" in output, output
    return cloudpickle.loads((work / "result.pkl").read_bytes())
