"""One rank on an emulated host: reports the interfaces it sees and the address its mesh uses."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workers"))
from common import report  # noqa: E402

import numpy as np  # noqa: E402

import collective as hvd  # noqa: E402
from collective import runtime  # noqa: E402
from collective.bootstrap.interfaces import interface_addresses  # noqa: E402

if __name__ == "__main__":
    hvd.init()
    total = hvd.allreduce(np.array([hvd.rank() + 1], dtype=np.int64), op=hvd.Sum)
    report(rank=hvd.rank(), interfaces=interface_addresses(), mesh_host=runtime.current().host,
           total=int(total[0]))
    hvd.shutdown()
