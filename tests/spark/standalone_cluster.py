"""A real Spark standalone cluster on 127.0.0.1 for tests: one master, N one-core workers.

Started with ``spark-class`` from the pip pyspark package (it has no sbin/start-*.sh). Every port
is ephemeral, so concurrent test runs on one machine do not collide; readiness is read from the
daemons' log lines, never guessed with sleeps.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pyspark

from spark_conf import QUICK_JVM_OPTIONS

SPARK_HOME = Path(pyspark.__file__).resolve().parent
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_READY = "I have been elected leader"
_WORKER_READY = "Successfully registered with master"


@dataclass
class WorkerSpec:
    cores: int = 1
    memory: str = "1g"
    gpu_addresses: list[str] | None = None   # a fake GPU discovery script reports these
    env: dict[str, str] = field(default_factory=dict)  # extra environment (inherited by executors)
    host: str = "127.0.0.1"  # the address it binds and advertises
    launch_prefix: list[str] = field(default_factory=list)  # e.g. entering an emulated host (tests/multihost)


class _Daemon:
    """One spark-class process whose log lines are watched for a readiness marker."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._lines: "queue.SimpleQueue[str | None]" = queue.SimpleQueue()
        self._log = open(log_path, "w", encoding="utf-8")
        # Own session: teardown signals reach the JVM and nothing else of ours.
        self.proc = subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        threading.Thread(target=self._pump, name=f"{name}-log", daemon=True).start()

    def wait_for(self, pattern: re.Pattern[str] | str, timeout_s: float) -> str:
        """Returns the first log line matching ``pattern``; raises if the daemon exits first."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.name} did not log {pattern!r} within {timeout_s:g}s; "
                                   f"see {self.log_path}")
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"{self.name} exited ({self.proc.wait()}) before logging "
                                   f"{pattern!r}; see {self.log_path}")
            if (pattern.search(line) if isinstance(pattern, re.Pattern) else pattern in line):
                return line

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(grace_s)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            self._lines.put(line)
        self._lines.put(None)
        self._log.close()


class StandaloneCluster:
    """Use as a context manager; ``master_url`` is valid once it is entered."""

    def __init__(self, workdir: Path, workers: list[WorkerSpec], env: Mapping[str, str],
                 start_timeout_s: float = 120.0, master_host: str = "127.0.0.1",
                 master_launch_prefix: list[str] | None = None) -> None:
        self.workdir = workdir
        self.workers = workers
        self.env = dict(env)
        self.env["SPARK_HOME"] = str(SPARK_HOME)
        # The master and worker daemons (spark-class reads SPARK_DAEMON_JAVA_OPTS), unless a test sets its own.
        self.env.setdefault("SPARK_DAEMON_JAVA_OPTS", QUICK_JVM_OPTIONS)
        self.start_timeout_s = start_timeout_s
        self.master_url = ""
        self.master_host = master_host
        self.master_launch_prefix = master_launch_prefix or []
        self._daemons: list[_Daemon] = []

    def __enter__(self) -> "StandaloneCluster":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        # Workers first, so the master does not log them as lost and try to relaunch anything.
        for daemon in reversed(self._daemons):
            daemon.stop()
        self._daemons.clear()

    def _start(self) -> None:
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        master = self._spawn("master", [
            *self.master_launch_prefix, spark_class, "org.apache.spark.deploy.master.Master",
            "--host", self.master_host, "--port", "0", "--webui-port", "0"], self.env)
        self.master_url = _MASTER_URL.search(master.wait_for(_MASTER_URL, self.start_timeout_s)).group(1)
        master.wait_for(_MASTER_READY, self.start_timeout_s)
        # Workers start in parallel; each must register before the cluster is usable.
        for worker in self.start_workers(self.workers):
            worker.wait_for(_WORKER_READY, self.start_timeout_s)

    def start_workers(self, workers: list[WorkerSpec]) -> list[_Daemon]:
        """Starts workers without waiting for them: a cluster still coming up (the master must be up)."""
        first = len(self._daemons) - 1   # daemons after the master, so worker indexes stay unique
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        return [self._spawn_worker(first + i, spec, spark_class) for i, spec in enumerate(workers)]

    def _spawn_worker(self, index: int, spec: WorkerSpec, spark_class: str, suffix: str = "") -> _Daemon:
        env = {**self.env, **spec.env}
        if spec.gpu_addresses is not None:
            script = self._discovery_script(index, spec.gpu_addresses)
            env["SPARK_WORKER_OPTS"] = (f"-Dspark.worker.resource.gpu.amount={len(spec.gpu_addresses)} "
                                        f"-Dspark.worker.resource.gpu.discoveryScript={script}")
        work_dir = self.workdir / f"worker{index}"
        work_dir.mkdir(parents=True, exist_ok=True)
        return self._spawn(f"worker{index}{suffix}", [
            *spec.launch_prefix, spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url,
            "--host", spec.host, "--port", "0", "--webui-port", "0",
            "--cores", str(spec.cores), "--memory", spec.memory, "--work-dir", str(work_dir)], env)

    def kill_worker(self, index: int) -> int:
        """SIGKILLs worker ``index``'s JVM together with its executors and their Python workers (the worker
        starts them in its own process group, which it leads); returns the worker's PID. The driver then
        loses that executor at once (its connection drops), as when a machine dies."""
        daemon = self._worker_daemon(index)
        os.killpg(daemon.proc.pid, signal.SIGKILL)
        daemon.proc.wait(30)
        return daemon.proc.pid

    def worker_pid(self, index: int) -> int:
        """The PID of worker ``index``'s JVM (its executors and their Python workers descend from it)."""
        return self._worker_daemon(index).proc.pid

    def restart_worker(self, index: int) -> None:
        """Starts worker ``index`` again, as it was specified, and waits until it has registered."""
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        self._spawn_worker(index, self.workers[index], spark_class, suffix="-restarted").wait_for(
            _WORKER_READY, self.start_timeout_s)

    def _worker_daemon(self, index: int) -> _Daemon:
        return [d for d in self._daemons if d.name.startswith(f"worker{index}")][-1]

    def _discovery_script(self, index: int, addresses: list[str]) -> Path:
        script = self.workdir / f"discover_gpus_worker{index}.sh"
        payload = json.dumps({"name": "gpu", "addresses": addresses})
        script.write_text(f"#!/bin/sh\necho '{payload}'\n", encoding="utf-8")
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return script

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str]) -> _Daemon:
        daemon = _Daemon(name, argv, env, self.workdir / f"{name}.log")
        self._daemons.append(daemon)
        return daemon
