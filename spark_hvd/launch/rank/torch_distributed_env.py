"""Rank child: the environment torchrun gives its workers, which torch.distributed's ``env://`` reads.

Each node of torchrun's model is one agent whose workers share the node's devices. Under Spark,
as in pyspark's TorchDistributor, every task is a node of one process: it sees only its own GPUs
(or none), so LOCAL_RANK is 0 and GROUP_RANK is the rank. Run locally, every rank shares the
driver's devices, as under ``torchrun --standalone``: one node, LOCAL_RANK = rank.
"""

from __future__ import annotations

from spark_hvd.launch.rank.rank_context import RankContext

MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
# torchrun's workers find the store already hosted by their agent (here: rank 0's launcher code)
# and connect to it as clients, rank 0 included; env:// then never binds the port itself.
USE_AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"


def torch_distributed_env(context: RankContext, master_addr: str, master_port: int, run_id: str, *,
                          node_per_task: bool) -> dict[str, str]:
    """torchrun's worker variables for this rank; ``node_per_task`` as under Spark (see above)."""
    if not 0 < master_port < 65536:
        raise ValueError(f"master_port={master_port} is outside 1..65535")
    if node_per_task:
        local_rank, local_size, node, nodes = 0, 1, context.rank, context.size
    else:
        local_rank, local_size = context.local_rank, context.local_size
        node, nodes = context.cross_rank, context.cross_size
    return {
        MASTER_ADDR: master_addr,
        MASTER_PORT: str(master_port),
        "RANK": str(context.rank),
        "WORLD_SIZE": str(context.size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_size),
        "GROUP_RANK": str(node),
        "GROUP_WORLD_SIZE": str(nodes),
        "ROLE_RANK": str(context.rank),
        "ROLE_WORLD_SIZE": str(context.size),
        "ROLE_NAME": "default",
        # torch.distributed.is_torchelastic_launched() reads this; Lightning then takes its
        # ranks from the variables above, as it does under torchrun.
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        USE_AGENT_STORE: "True",
    }
