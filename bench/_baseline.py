"""A benchmark's before/after: another build of the package, run on an interpreter of its own.

An editable install's import hook shadows anything on PYTHONPATH, so the other build lives in a venv that
sees this one's packages through a .pth file (see bench/allreduce.py's docstring for the four commands).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SUFFIX = "@base"
# -P: run from a checkout, ``python -m`` would put the working directory, and its collective, first.
SAFE_PATH = ("-P",)
_CHECKOUT_PACKAGE = (Path(__file__).resolve().parent.parent / "collective").resolve()


def checked_baseline(python: Path) -> str:
    """Where ``python`` imports collective from; raises ValueError, naming why, unless it is another build."""
    try:
        found = subprocess.run([str(python), *SAFE_PATH, "-c", "import collective; print(collective.__file__)"],
                               capture_output=True, text=True)
    except OSError as e:
        raise ValueError(f"--baseline {python} cannot be run: {e.strerror}") from e
    if found.returncode != 0:
        raise ValueError(f"--baseline {python} cannot import collective: {found.stderr.strip()[-300:]}")
    location = found.stdout.strip()
    if Path(location).resolve().parent == _CHECKOUT_PACKAGE:
        raise ValueError(f"--baseline {python} imports this checkout's collective, not another build")
    return location
