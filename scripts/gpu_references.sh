#!/usr/bin/env bash
# On a CUDA machine: check the dataset, run every definition's reference on its dev
# workloads on the GPU, and check that stand-ins are byte-identical on CPU and CUDA.
# Writes $OUT/dev.jsonl (one record per case), $OUT/summary.json and $OUT/log.
# Needs pydantic: wheels in .whl/ (see README, "Working on the GPU") are installed first.
set -euo pipefail
OUT=${OUT:-results/gpu}
mkdir -p "$OUT"
if ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
cli() { python3 -m inference_kernels.cli "$@"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
  cli check
  rm -f "$OUT/dev.jsonl"
  cli reference --suite dev --device cuda --report "$OUT/dev.jsonl" "$@" || true
  python3 scripts/gpu_summary.py "$OUT/dev.jsonl" > "$OUT/summary.json"
  cat "$OUT/summary.json"
} 2>&1 | tee "$OUT/log"
