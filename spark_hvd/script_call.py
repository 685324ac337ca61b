"""Rank child: runs a Python script as ``python script.py args...`` would, inside this process.

TorchDistributor takes a script path where pyspark's starts ``torchrun script.py args``; running
it here instead saves a second interpreter (and a second torch import) per rank, and the script
still sees ``__name__ == "__main__"``, ``sys.argv`` and its own directory first on ``sys.path``.
"""

from __future__ import annotations

import os
import runpy
import socket
import sys
from typing import Sequence


class ScriptCall:
    """Calling it runs the script; it returns None, and raises what the script raised.

    ``sys.exit(0)`` (or ``sys.exit()``) is a success, as for a process; any other exit code or
    exception is a failure of the rank. The path is opened on the rank's own host.
    """

    def __init__(self, path: str, args: Sequence[str] = ()) -> None:
        self.path = path
        self.args = tuple(args)

    def __call__(self) -> None:
        if not os.path.isfile(self.path):
            raise FileNotFoundError(
                f"train_object={self.path!r} is not a file on host {socket.gethostname()} "
                f"(cwd {os.getcwd()}); each rank opens the script on its own host, so it must "
                "exist there")
        saved_argv, saved_path = sys.argv, list(sys.path)
        sys.argv = [self.path, *self.args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(self.path)))
        try:
            runpy.run_path(self.path, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                raise
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path
        return None

    def __repr__(self) -> str:
        return f"ScriptCall({self.path!r}, {list(self.args)!r})"
