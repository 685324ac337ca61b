"""Driver: the launcher's driver side, in the caller's process: ``spark_hvd.run`` (runner), ``spark_hvd.run_elastic``
(elastic_runner), their one checked set of options (run_options), the cluster checks (launch_checks), the barrier
stage (barrier_job) or the local launcher (local_job), the ranks' output (output_collector), the warm-up stage
(zygote_warm_up) and what a Spark Connect session allows (connect_session, active_session)."""
