"""Rank child: what runs in the process that runs ``fn``: its entry point (child_main), what fn may ask
(rank_context, rank_events), and the wrappers the driver puts around fn (elastic_rank for run_elastic,
torch_distributed_call and torch_distributed_env for torch.distributed's environment)."""
