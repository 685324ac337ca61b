"""CPU time of this process's threads, read from /proc: what the step benchmarks attribute to TensorFlow's
pools, the engine thread (``collective-eng``) and the main thread."""

from __future__ import annotations

import os


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds used so far, by thread name (threads of one name summed; the main thread is "main")."""
    tick = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                text = f.read()
        except FileNotFoundError:
            continue  # ended while listed
        name = "main" if int(task) == os.getpid() else text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        used[name] = used.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return used
