#!/usr/bin/env bash
# The JAX engine on a GPU, measured once: scripts/benchmark_jax.py over one full epoch (60,000 images) per group of
# 1, 3, 10 and 30 runs at [784, 800, 10] and [784, 800, 800, 10], batch 10, beside the fast engine on that machine's
# CPU, with its agreement checks (300 updates against the float64 reference, group against alone, float32 products
# not silently TF32), writing <out>/benchmark_jax_<gpu>.json. About 3-5 minutes on an H100, most of it compiling
# (one compile per architecture and group size); the timed calls themselves take seconds.
#
# Needs, and installs nothing (the GPU machine has no internet): a Python whose JAX sees the GPU (a CUDA build:
# the jax-cuda12/13 plugin wheels, e.g. the device image's python3 with jax 0.11 and jax-cuda13-plugin), numpy,
# scipy, numba and threadpoolctl. MNIST from $EBP_DATA_DIR (or ./.gpu-data, a copy of the data folder carried
# along) if it holds mnist/, else random images of MNIST's shape (--synthetic: the same arithmetic for the JAX
# engine). It refuses to run, exit status 3, where JAX finds no GPU.
#
#   scripts/gpu_check.sh [OUT_FOLDER]        # default: $OUT if set (the device tool's folder), else outputs/
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:-${OUT:-outputs}}
python=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # take GPU memory as needed: the peak per group is then recorded
"$python" - <<'EOF' || exit 3
import sys

import jax

print("jax", jax.__version__, "devices:", jax.devices())
sys.exit(0 if jax.devices()[0].platform == "gpu" else 1)
EOF
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
data=(--synthetic)
for dir in "${EBP_DATA_DIR:-}" .gpu-data; do
  if [ -n "$dir" ] && [ -d "$dir/mnist" ]; then export EBP_DATA_DIR=$dir; data=(); break; fi
done
mkdir -p "$out_dir"
timeout 540 "$python" scripts/benchmark_jax.py "${data[@]}" --out "$out_dir/benchmark_jax_{device}.json"
