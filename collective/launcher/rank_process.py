"""Launcher: the command and the environment each rank's (or elastic worker's) process starts with.

This module must stay importable without the C++ extension: it only starts processes.
"""

from __future__ import annotations

import os
import re
import site
import sys
from typing import Mapping

_INTERPRETER_NAME = re.compile(r"python(\d+(\.\d+)?)?")
# The directory ``import collective`` finds the package in (a source checkout, or site-packages):
# collective/launcher/rank_process.py is three levels below it.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rank_command(script_args: list[str]) -> list[str]:
    """The command each rank runs: this interpreter on ``script_args``. A leading ``python`` (horovodrun's
    form, ``-np 2 python -m pytest ...``) is accepted and replaced by this interpreter, so ranks use the
    same environment as the launcher."""
    if _INTERPRETER_NAME.fullmatch(os.path.basename(script_args[0])) or script_args[0] == sys.executable:
        return [sys.executable, *script_args[1:]]
    return [sys.executable, *script_args]


def rank_environment(base: Mapping[str, str], *identities: Mapping[str, str]) -> dict[str, str]:
    """``base`` with each of ``identities`` laid over it (the variables that tell a rank who it is), unbuffered
    output, and a ``PYTHONPATH`` that finds this package."""
    env = dict(base)
    for identity in identities:
        env.update(identity)
    env["PYTHONUNBUFFERED"] = "1"
    pythonpath = pythonpath_with_package(env.get("PYTHONPATH"))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def pythonpath_with_package(current: str | None) -> str:
    """Lets ranks ``import collective`` from a source checkout, as the launcher itself did.

    ``python script.py`` puts the script's directory on sys.path, not the launcher's, so a
    package that is not installed would otherwise be invisible to the ranks.
    """
    installed = set(site.getsitepackages()) | {site.getusersitepackages()}
    parts = [p for p in (current or "").split(os.pathsep) if p]
    if _PACKAGE_ROOT in installed or _PACKAGE_ROOT in parts:
        return os.pathsep.join(parts)
    return os.pathsep.join([_PACKAGE_ROOT, *parts])
