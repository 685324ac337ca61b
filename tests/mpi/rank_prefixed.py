"""Runs a tests/workers script under mpiexec with every stdout line prefixed by "[rank]<stdout>:", the way
`python -m collective.run` prefixes it, so tests/jobs.parse_results reads both alike.

    mpiexec -n 2 python tests/mpi/rank_prefixed.py tests/workers/op_cases.py shm direct
"""

from __future__ import annotations

import io
import runpy
import sys
from pathlib import Path


class _Prefixed(io.TextIOBase):
    def __init__(self, target: io.TextIOBase, prefix: str) -> None:
        self._target = target
        self._prefix = prefix
        self._at_line_start = True

    def write(self, text: str) -> int:
        out = []
        for piece in text.splitlines(keepends=True):
            if self._at_line_start:
                out.append(self._prefix)
            out.append(piece)
            self._at_line_start = piece.endswith("\n")
        self._target.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self._target.flush()


def main() -> None:
    from mpi4py import MPI  # the rank as mpiexec assigned it

    worker = Path(sys.argv[1]).resolve()
    sys.stdout = _Prefixed(sys.stdout, f"[{MPI.COMM_WORLD.Get_rank()}]<stdout>:")
    sys.argv = [str(worker), *sys.argv[2:]]
    sys.path.insert(0, str(worker.parent))
    runpy.run_path(str(worker), run_name="__main__")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
