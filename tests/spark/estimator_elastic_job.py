"""Runs an estimator's rank function (``_rank_fn(plan)``, as fit builds it) as the workers of a local elastic
job (``python -m collective.run --min-np 1 --max-np 2``) on hostA and hostB, one slot each, so that a test can
lose a rank in-process and watch the job shrink to one; the test modules it needs go by value."""

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


def run_rank_fn_elastic(tmp_path: Path, fn: Any, name: str, by_value: Iterable[ModuleType]) -> dict:
    """``fn`` on hostA and hostB under the local elastic launcher, which must lose hostB's rank; rank 0's
    result (of the last formation)."""
    work = tmp_path / name
    work.mkdir()
    with pickled_by_value(*by_value):
        (work / "fn.pkl").write_bytes(cloudpickle.dumps(fn))
    discovery, _ = write_discovery(work, ["hostA:1", "hostB:1"])
    with ElasticJob("estimator_rank_fn.py", discovery, str(work / "fn.pkl"), str(work / "result.pkl"),
                    min_np=1, max_np=2, elastic_timeout_s=60, timeout_s=150) as job:
        job.wait_for(r"round 1: 2 worker")
        code, output = job.finish()
    assert code == 0, output
    assert "hostB:0" in output and "lost" in output, output
    return cloudpickle.loads((work / "result.pkl").read_bytes())
