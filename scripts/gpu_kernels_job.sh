#!/usr/bin/env bash
# Issue 14's judging on one GPU, part after part, as one detached job (scripts/gpu_detach.sh),
# each part's files in $OUT as soon as it ends (a job cut by the budget keeps the parts done).
# PARTS picks them, in the order given (default "b a na compile"):
#   a, b, na, natten, compile: a kernels part (scripts/gpu_judge.sh STEPS=kernels, CUDA graph
#     only, every dev workload, the sandbox) judging its definitions' solutions beside their
#     task baselines (a definition with its baseline alone too: the plain GEMMs, cuBLAS) into
#     $OUT/kernels-PART.jsonl and .log; together a, b, na and natten judge every solution of
#     the dataset (tests/benchmarks/test_gpu_kernels_job.py holds them to it). natten is
#     NATTEN's flex path alone: on an H100 its first case took 64 s, 37 of them in
#     compiling for the workload's shape, so it runs apart from the others.
#   kt: our Triton kernels of the launch-bound definitions with --kernel-times (each case's
#     CUPTI kernel durations, one more eager sample: about 3 s a case on the H200), where a
#     call's time goes among its kernels; diagnostic rows, for no table
#   v1, v2: sweeps of benchmarks/variants.txt (v1 the newest constants, 90 s a line; v2 the
#     rest, 60 s a line)
#   ab: issue 13's fidelity A/B against the tree in results/old (carry it; see
#     docs/measurements/h200-timing-fidelity.md) into $OUT/ab.json and ab.log
# LIST=1 runs nothing and prints a line a part: its name, then "kernels KERNELS SOLUTIONS"
# or "variants REGEX" (the sweep lines it takes, by solution).
#   bash scripts/gpu_detach.sh start 'PARTS="b a na compile" bash scripts/gpu_kernels_job.sh'
set -uo pipefail
OUT=${OUT:-results/gpu}
PARTS=${PARTS:-b a na compile}
declare -A KERNELS_OF=(
  [a]='grouped_gemm|dense_gemm|mixed_mla|qsa_index|block_causal'
  [b]='dense_attention|sparse_mla|qsa_sparse|gdn|router'
  [na]='neighborhood' [natten]='neighborhood'
  [compile]='gdn_decode|mixed_mla|moe_router|qsa_sparse'
  [kt]='gdn_prefill|mixed_mla|qsa_index|moe_router|block_causal_h32_d128_prefix0|grouped_gemm'
)
declare -A SOLUTIONS_OF=(
  [a]='^(?!compile_)' [b]='^(?!compile_)' [na]='^(?!compile_|natten_)'
  [natten]='^(natten_|torch_)' [compile]='^(compile_|torch_)' [kt]='^triton_'
)
declare -A RUN_ARGS_OF=([kt]='--methods graph --kernel-times')
declare -A SWEEP_OF=(  # benchmarks/variants.txt's lines, by their solution's name
  [v1]='moe_router|mixed_mla|qsa_index|chunked_gdn|qsa_sparse|prefix0'
  [v2]='dense_attention|bias_n1536|bias_n384_k384|bias_n384_k1536|k128|neighborhood_attention_3d_h(8|16)_'
)
declare -A SWEEP_SECONDS=([v1]=90 [v2]=60)
if [[ -n ${LIST:-} ]]; then
  for part in $PARTS; do
    if [[ -n ${KERNELS_OF[$part]:-} ]]; then
      echo "$part kernels ${KERNELS_OF[$part]} ${SOLUTIONS_OF[$part]}"
    elif [[ -n ${SWEEP_OF[$part]:-} ]]; then
      echo "$part variants ${SWEEP_OF[$part]}"
    fi
  done
  exit 0
fi
mkdir -p "$OUT"
source scripts/gpu_setup.sh >/dev/null 2>&1
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader > "$OUT/gpu.txt"
for part in $PARTS; do
  echo "part $part starts $(date +%s)"
  case $part in
  ab)
    [[ -d ${ORIGIN:-.}/results/old ]] || { echo "no results/old to compare with"; continue; }
    rm -rf "${STATE:-results}/ab-old" && mkdir -p "${STATE:-results}" \
      && cp -a "${ORIGIN:-.}/results/old" "${STATE:-results}/ab-old"
    PYTHONPATH=src:${PYTHONPATH:-} timeout 700 python3 benchmarks/fidelity_ab.py \
      --tree "${STATE:-results}/ab-old" --tree . --turns 2 --triton > "$OUT/ab.json" 2> "$OUT/ab.log"
    ;;
  v1 | v2)
    STEPS=variants KERNELS=${SWEEP_OF[$part]} VARIANT_SECONDS=${SWEEP_SECONDS[$part]} \
      bash scripts/gpu_judge.sh >> "$OUT/variants-run.log" 2>&1
    ;;
  *)
    [[ -n ${KERNELS_OF[$part]:-} ]] || { echo "no part $part"; continue; }
    NAME=kernels-$part KERNELS=${KERNELS_OF[$part]} SOLUTIONS=${SOLUTIONS_OF[$part]} \
      RUN_ARGS=${RUN_ARGS_OF[$part]:---methods graph} CACHE=/dev/shm/ikcache RUN_SECONDS=3000 STEPS=kernels \
      bash scripts/gpu_judge.sh >> "$OUT/kernels-run.log" 2>&1
    ;;
  esac
  status=$?
  echo "part $part ends $(date +%s), status $status"
done
