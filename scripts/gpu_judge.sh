#!/usr/bin/env bash
# On a CUDA machine: the CUDA exploits, the timing-fidelity benchmark, the replay of the
# captured (MiniLM) workloads on CUDA, then the baseline solutions judged on the smallest
# and the dev workloads. STEPS picks steps (exploits,fidelity,ncu,run_to_run,replay,first,
# dev, languages, kernels, eager_graph, rest; ncu, run_to_run, eager_graph and rest are
# issue 11's agreement with Nsight Compute, run-to-run spread, eager against graph where
# launch cost is nil, and the load a case needs after a rest; languages builds and judges
# a CUDA solution, issue 12; kernels judges our own kernels and the library paths (every
# solution but the baseline) beside their baselines
# on the dev workloads, issue 14; variants sweeps our kernels' tuning constants
# (benchmarks/variants.txt, each checked against the reference, then timed);
# KERNELS=REGEX picks their definitions, e.g. KERNELS='sparse_mla|qsa');
# RUN_ARGS adds options to those runs (e.g. "-d NAME"); RESUME=--resume continues
# results/gpu-dev.jsonl. Copies what it produced into $OUT.
# Setup (wheels and bwrap from .whl/): scripts/gpu_setup.sh.
set -uo pipefail
OUT=${OUT:-results/gpu}
STEPS=${STEPS:-exploits,fidelity,replay,dev}
mkdir -p "$OUT" results
source scripts/gpu_setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv,noheader
if [[ $STEPS == *exploits* ]]; then
  timeout 300 python3 -m pytest tests/exploits -m gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/exploits.log"
fi
if [[ $STEPS == *languages* ]]; then  # needs the ninja wheel in .whl/ and nvcc
  timeout 400 python3 -m pytest tests/judge/test_languages.py -m gpu -q -p no:cacheprovider 2>&1 \
    | tee "$OUT/languages.log"
fi
if [[ $STEPS == *fidelity* ]]; then
  timeout 300 python3 benchmarks/timing_fidelity.py | tee "$OUT/fidelity.json"
fi
if [[ $STEPS == *ncu* ]]; then
  timeout 400 python3 benchmarks/ncu_agreement.py --rows "$OUT/ncu_agreement.jsonl" \
    > "$OUT/ncu_agreement.json" 2> "$OUT/ncu_agreement.log"
fi
if [[ $STEPS == *eager_graph* ]]; then  # eager against graph on each GEMM and attention definition
  timeout "${EAGER_GRAPH_SECONDS:-330}" python3 benchmarks/eager_graph.py \
    --report "$OUT/eager_graph.jsonl" > "$OUT/eager_graph.json" 2> "$OUT/eager_graph.log"
  python3 benchmarks/eager_graph.py --summarize "$OUT/eager_graph.jsonl" > "$OUT/eager_graph.json"
fi
if [[ $STEPS == *rest* ]]; then  # the load a case's samples need after a rest
  timeout 200 python3 benchmarks/rest_recovery.py > "$OUT/rest_recovery.json" 2> "$OUT/rest_recovery.log"
fi
if [[ $STEPS == *run_to_run* ]]; then  # R2R_PART=spread|compare: one part of it
  timeout "${R2R_SECONDS:-500}" python3 benchmarks/run_to_run.py --part "${R2R_PART:-all}" \
    --rows "$OUT/run_to_run.jsonl" > "$OUT/run_to_run.json" 2> "$OUT/run_to_run.log"
fi
if [[ $STEPS == *variants* ]]; then  # our kernels' tuning constants, benchmarks/variants.txt
  while read -r solution sets; do
    [[ -z $solution || $solution == \#* || ! $solution =~ ${KERNELS:-.} ]] && continue
    lines=$OUT/variants-$solution.jsonl  # (a solution may have several sweeps)
    ends=$((SECONDS + ${VARIANT_SECONDS:-240}))
    resume=()
    while :; do  # a variant that loses the CUDA context (exit 3): go on without it
      # shellcheck disable=SC2086  # the --set options, split
      timeout $((ends - SECONDS)) python3 benchmarks/solution_variants.py "$solution" $sets \
        ${resume[@]+"${resume[@]}"} >> "$lines" 2>> "$OUT/variants.log" < /dev/null
      status=$?
      echo "variants $solution exit $status"
      [[ $status == 3 && $((ends - SECONDS)) -gt 15 ]] || break
      resume=(--resume "$lines")
    done
  done < benchmarks/variants.txt
fi
if [[ $STEPS == *kernels* ]]; then
  # KERNELS=REGEX picks definitions, SOLUTIONS=REGEX their solutions (default: all of them,
  # the baseline too); RUN_ARGS adds run options (e.g. "--methods graph"); NAME names the
  # part's two files, $OUT/NAME.jsonl (the rows) and $OUT/NAME.log (the run, its compare).
  # The rows are signed with the judge's key: carry it (results/ikconfig) and make the
  # summary and `preferred` here or where the key is.
  name=${NAME:-kernels}
  mapfile -t picked < <(python3 scripts/kernel_picks.py)  # -d and -s options (KERNELS, SOLUTIONS)
  if (( ${#picked[@]} == 0 )); then  # (no -d at all would judge every definition)
    echo "kernels $name: no definition picked (KERNELS=${KERNELS:-} SOLUTIONS=${SOLUTIONS:-})" \
      | tee "$OUT/$name.log"
    exit 1
  fi
  flashinfer=$(python3 -c "
import pathlib, sys
picked = set(sys.argv[1:])
found = {p.stem for p in pathlib.Path('dataset/solutions').rglob('flashinfer_*.json')}
if '-s' not in picked:  # every solution of the definitions picked
    found = {f.removeprefix('flashinfer_') for f in found}
print(int(bool(picked & found)))" "${picked[@]}")
  if [[ $flashinfer == 1 ]]; then  # FlashInfer's kernels, built before the run (minutes)
    timeout 900 python3 scripts/flashinfer_cache.py > "$OUT/flashinfer-cache.log" 2>&1
    echo "flashinfer cache exit $?"
  fi
  # shellcheck disable=SC2086  # RUN_ARGS, split
  timeout "${RUN_SECONDS:-420}" python3 -m inference_kernels.cli run --device cuda --suite dev \
    "${picked[@]}" ${RUN_ARGS:-} --report "$OUT/$name.jsonl" --cache "${CACHE:-.cache/ik}" \
    --overwrite > "$OUT/$name.log" 2>&1
  kernels_status=$?
  echo "kernels run $name exit $kernels_status" | tee -a "$OUT/$name.log"
  python3 -m inference_kernels.cli compare "$OUT/$name.jsonl" >> "$OUT/$name.log" 2>&1
fi
if [[ $STEPS == *replay* ]]; then
  timeout 300 python3 -m inference_kernels.cli replay --device cuda \
    --report "$OUT/replay-cuda.jsonl" 2>&1 | tee "$OUT/replay.log"
fi
for suite in first dev; do
  [[ $STEPS == *$suite* ]] || continue
  started=$(date +%s)
  timeout "${RUN_SECONDS:-420}" python3 -m inference_kernels.cli run --device cuda --suite $suite ${RUN_ARGS:-} \
    --report results/gpu-$suite.jsonl --cache .cache/ik ${RESUME:---overwrite} > "$OUT/$suite-run.log" 2>&1
  status=$?
  pkill -f multiprocessing.spawn 2>/dev/null  # nothing of a timed-out run may hold the GPU
  pkill -f inference_kernels.judge.worker 2>/dev/null
  echo "run exit $status after $(( $(date +%s) - started )) s" | tee -a "$OUT/$suite-run.log"
  cp results/gpu-$suite.jsonl "$OUT/"
  python3 -m inference_kernels.cli summary results/gpu-$suite.jsonl -o "$OUT" >/dev/null
  tail -5 "$OUT/$suite-run.log"
done
exit "${kernels_status:-0}"  # the kernels step's run, for scripts/gpu_kernels_job.sh
