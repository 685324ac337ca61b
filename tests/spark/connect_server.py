"""A Spark Connect server started on its own, as a cluster's would be: ``spark-submit`` of Spark's
SparkConnectServer class from the pip pyspark (which has no sbin/start-connect-server.sh), in its own
process group, on an ephemeral port read back from its log, stopped by its PID.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from standalone_cluster import SPARK_HOME
from standalone_cluster import _Daemon as Daemon  # the same log-watched child process

_STARTED = re.compile(r"Spark Connect server started at: \S*:(\d+)")


class ConnectServer:
    """Use as a context manager; ``url`` (sc://127.0.0.1:PORT) is valid once it is entered."""

    def __init__(self, workdir: Path, env: Mapping[str, str], master: str = "local[2]",
                 conf: Mapping[str, str] | None = None, start_timeout_s: float = 180.0) -> None:
        self.workdir = workdir
        self.env = {**env, "SPARK_HOME": str(SPARK_HOME)}
        self.master = master
        self.conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": "0",
            **(conf or {}),
        }
        self.start_timeout_s = start_timeout_s
        self.url = ""
        self._daemon: Daemon | None = None

    def __enter__(self) -> "ConnectServer":
        argv = [str(SPARK_HOME / "bin" / "spark-submit"), "--class",
                "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", self.master]
        for key, value in self.conf.items():
            argv += ["--conf", f"{key}={value}"]
        argv.append("spark-internal")
        self._daemon = Daemon("connect-server", argv, self.env, self.workdir / "connect-server.log")
        try:
            port = _STARTED.search(self._daemon.wait_for(_STARTED, self.start_timeout_s)).group(1)
        except BaseException:
            self._daemon.stop()
            raise
        self.url = f"sc://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._daemon is not None:
            self._daemon.stop()
