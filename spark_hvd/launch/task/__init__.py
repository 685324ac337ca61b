"""Task: what runs in a Spark task's Python worker (or a local-mode task process) for one rank: the stage's function
(barrier_task, local_task, warm_up_task), the rank's side of it (rank_task), its child process (rank_child), the
spare and the zygote it keeps for the next job (spare_child, zygote), its GPUs (gpus) and its output to the driver
(output_channel, or stage_outbox under Spark Connect)."""
