"""The launcher behind ``spark_hvd.run``: each module's first line names the process it runs in.

- Driver: ``runner`` (the public ``run``), ``run_arguments``, ``launch_checks``, ``barrier_job``, ``local_job``,
  ``output_collector``, ``connect_session`` (what a Spark Connect session allows).
- Task (a Spark task's Python worker, or a local-mode task): ``barrier_task``, ``local_task``, ``rank_task``,
  ``rank_child``, ``output_channel``, ``stage_outbox`` (its stand-in under Spark Connect), ``gpus``.
- Rank child (the process that runs ``fn``): ``child_main``, ``rank_context``, ``rank_events``.
- Shared: ``framing`` (the frames every hop speaks) and ``task_spec`` (what the driver ships to each task).
"""
