"""Fresh virtual environments holding the wheel under test, as a user would install it (not this checkout).

Versions come from requirements-dev.txt as constraints, so a venv gets the packages the suite is tested with,
mostly from pip's cache.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def base_python() -> str:
    """This interpreter's own CPython, outside any venv (a fresh venv must not see the test venv's packages)."""
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")


def constraints_file(directory: Path) -> Path:
    """requirements-dev.txt without extras, which pip refuses in constraints."""
    path = directory / "constraints.txt"
    pins = [re.sub(r"\[[^\]]*\]", "", line) for line in (ROOT / "requirements-dev.txt").read_text().splitlines()]
    path.write_text("\n".join(pins) + "\n")
    return path


def make_venv(path: Path, requirements: list[str], timeout_s: float = 600) -> Path:
    """Creates a venv at ``path`` with ``requirements`` and their dependencies; returns its python."""
    subprocess.run([base_python(), "-m", "venv", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "-c", str(constraints_file(path)), *requirements], check=True, timeout=timeout_s)
    return python


def wheel_option(config: pytest.Config) -> Path:
    """The wheel given with --wheel (tests/conftest.py); skips the test without one."""
    given = config.getoption("--wheel")
    if not given:
        pytest.skip("needs --wheel=PATH (make wheel-test builds this machine's wheel and passes it)")
    return Path(given).resolve()
