"""The launcher behind ``spark_hvd.run``, in one folder per process it runs in (each module's first docstring word
says it too):

- ``driver/``: the caller's process (``spark_hvd.run``, ``spark_hvd.run_elastic``, the checks, the barrier stage);
- ``task/``: a Spark task's Python worker, or a local-mode task (one rank's side, its child process, its output);
- ``rank/``: the rank child, the process that runs ``fn``;
- ``zygote/``: a spare rank child that forks the next jobs' rank processes.

Here, what more than one of them speaks: ``framing`` (the frames every hop speaks), ``task_spec`` (what the
driver ships to each task), ``driver_rendezvous`` (where the ranks meet) and ``stored_commits`` (run_elastic's
commits too large for the driver's memory).
"""
