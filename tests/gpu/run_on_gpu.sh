#!/usr/bin/env bash
# The GPU check of issue 7, in one script, on a machine with an NVIDIA GPU:
#   tests/gpu/run_on_gpu.sh OUTDIR
# 1. builds the extension with plain CMake (needs cmake, a C++17 compiler and nanobind; no pip build,
#    no scikit-build-core, no CUDA headers: libnccl is dlopen'ed at run time);
# 2. runs tests/gpu (NCCL at world size 1, host staging with 2 ranks on one GPU, DistributedOptimizer);
# 3. benchmarks our NCCL allreduce against torch.distributed/NCCL at world size 1.
# Writes OUTDIR/log.txt, OUTDIR/junit.xml and OUTDIR/bench.json; about 3-5 minutes, well under 8.
#
# Python packages it needs beyond torch (with CUDA) and nvidia-nccl-cu13: numpy, nanobind, pytest,
# pytest-timeout, cloudpickle. Where one is missing and there is no internet, carry wheels in .whl/
# at the repo root (see /work/.library/device/README.md); they are installed into /tmp/site first.
set -uo pipefail

OUT=${1:?usage: tests/gpu/run_on_gpu.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/log.txt") 2>&1
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
started=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - started ))s] $*"; }

step "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi not available"
"$PY" - <<'PY'
import importlib.util, torch
print("python", __import__("sys").version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count())
for name in ("numpy", "nanobind", "pytest", "pytest_timeout", "cloudpickle", "mpi4py"):
    print(f"  {name}: {'ok' if importlib.util.find_spec(name) else 'MISSING'}")
PY

if compgen -G ".whl/*.whl" > /dev/null; then
  step "installing carried wheels from .whl/"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

step "build (plain cmake)"
NB_DIR=$("$PY" -m nanobind --cmake_dir) || { echo "nanobind is missing: carry its wheel in .whl/"; exit 2; }
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v "$PY")" \
  -Dnanobind_DIR="$NB_DIR" -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$ROOT/build/gpu/out" > "$OUT/cmake.txt" 2>&1 \
  || { cat "$OUT/cmake.txt"; exit 2; }
cmake --build build/gpu -j "$(nproc)" > "$OUT/build.txt" 2>&1 || { tail -50 "$OUT/build.txt"; exit 2; }
so=$(find build/gpu -name '_native*.so' | head -1)
[ -n "$so" ] || { echo "no _native*.so was built"; exit 2; }
cp "$so" collective/
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import collective, collective._native as n; print('built', n.__file__, 'ABI', n.ABI_VERSION)" || exit 2
"$PY" - <<'PY'
from collective.nccl import load_library
lib = load_library()
print("libnccl", lib.version, "from", lib.path, "| libcudart:", lib.cudart_path or "not found")
PY

status=0
step "tests/gpu and the CPU-side NCCL tests"
timeout 420 "$PY" -m pytest -q -p no:cacheprovider --timeout 300 tests/gpu tests/nccl --junitxml "$OUT/junit.xml" \
  || status=$?

step "benchmark: our NCCL allreduce vs torch.distributed NCCL (world size 1)"
timeout 150 "$PY" tests/gpu/bench_nccl_allreduce.py --out "$OUT/bench.json" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }

step "done in $(( $(date +%s) - started ))s, status $status"
exit $status
