"""Task (local mode): ``python -m spark_hvd.launch.task.local_task JOB_DIR``, one per rank, started by collective.run.

It stands where a Spark task stands in a Spark job: it starts the rank's child process, gives it
fn and its job, relays its output and reports to the driver, and leaves fn's pickled result in
JOB_DIR for the driver. collective.run judges the ranks by this process's exit status, so a child
that delivered its result and then died while exiting does not fail the job.
"""

from __future__ import annotations

import os
import pickle
import sys

from collective.config import config_from_env
from spark_hvd.launch.task.output_channel import OutputSender
from spark_hvd.launch.task.rank_child import ChildOutcome, RankChild
from spark_hvd.launch.rank.rank_context import RankContext
from spark_hvd.launch.task.rank_task import run_task
from spark_hvd.launch.task_spec import TaskSpec

SPEC_FILE = "task_spec.pickle"
LOCAL_HOST = "localhost"


def result_path(job_dir: str, rank: int) -> str:
    return os.path.join(job_dir, f"result-{rank}")


def main(argv: list[str]) -> int:
    job_dir = argv[1]
    # collective.run exported this rank's identity and its rendezvous; fn's child inherits them.
    config = config_from_env()
    rank, size = config.rank, config.size
    if rank is None or size is None or config.rendezvous is None or config.secret is None:
        print("spark_hvd.launch.task.local_task runs under collective.run, which sets COLLECTIVE_RANK, "
              "COLLECTIVE_SIZE, COLLECTIVE_RENDEZVOUS and COLLECTIVE_SECRET", file=sys.stderr)
        return 2
    with open(os.path.join(job_dir, SPEC_FILE), "rb") as f:
        spec: TaskSpec = pickle.load(f)

    def prepare() -> tuple[str, ...]:
        return ()  # The driver's GPUs, if any, are in spec.env for every rank, as torchrun shares them.

    def meet(child: RankChild, gpu_addresses: tuple[str, ...], sender: OutputSender) -> ChildOutcome:
        context = RankContext(rank=rank, size=size, local_rank=rank, local_size=size, cross_rank=0,
                              cross_size=1, task_address=LOCAL_HOST, task_addresses=(LOCAL_HOST,) * size,
                              gpu_addresses=(), stage_id=-1, task_attempt_id=-1)
        child.send_job(config, context.to_json())
        return child.wait_outcome(spec.exit_grace_s, on_failure_report=sender.send_failure)

    try:
        result = run_task(spec, rank, prepare, meet, task_kind="local task")
    except Exception as e:  # noqa: BLE001 - reported to the driver already; the exit status says the rest
        print(f"spark_hvd local task of rank {rank}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    partial = result_path(job_dir, rank) + ".partial"
    with open(partial, "wb") as f:
        f.write(result)
    # Whole or absent: the driver reads results only after every rank exited 0.
    os.replace(partial, result_path(job_dir, rank))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
