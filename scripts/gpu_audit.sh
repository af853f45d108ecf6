#!/usr/bin/env bash
# Issue 13: the full audit (every workload of the dataset, each definition's baseline,
# validation and graph timing) on one GPU, in parts that fit one device call. Each part
# resumes REPORT and stops after PART_SECONDS; copy $OUT/audit.jsonl back to REPORT here
# before the next call (REPORT lives under results/, which travels with `carry`).
# REFERENCES=1 fills the reference cache for the whole dataset, says how long it took (the
# cold-cache cost: 555 s on the H200 at 3d33bbb) and stops: run it in a call of its own (in
# one call with an audit part, the fill left the part no time). The cache stays on the
# machine while it is held (warm: make the next call within 30 s). FILL=1 fills the cache
# for the part's definitions, then audits them in the same call.
# SKIP="name ..." audits every definition but those (the rest of an audit whose first part
# came back from a lost machine).
# DEFINITIONS="name ..." limits the part to those definitions (the fill and the audit): a
# part that covers a few definitions in full fits one call with its own fill, and its
# report stands alone, so the audit can be done in parts across sessions at one commit
# (give each part its own REPORT and OUT).
#   device run: export INFERENCE_KERNELS_CONFIG=$PWD/results/ikconfig; bash scripts/gpu_audit.sh
#
# One run across calls (one preheat, no resume; in parts each call paid its own): run it
# under scripts/gpu_detach.sh, with PART_SECONDS=86400 and REPORT=$OUT/audit.jsonl.
set -uo pipefail
DEVICE=${DEVICE:-cuda}  # (cpu: to try the script itself on a machine without a GPU)
PART_SECONDS=${PART_SECONDS:-520}
REPORT=${REPORT:-results/audit/audit.jsonl}
# The cache in memory where there is room for it (the H200 machine's /dev/shm is 128 GB of
# tmpfs; written to its disk, 38 GB of references took 290 s of the 555 s fill at 3d33bbb)
if [[ -z ${CACHE:-} ]]; then
  free=$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1 || echo 0)
  if (( ${free:-0} >= 64 )); then CACHE=/dev/shm/ikcache; else CACHE=/tmp/ikcache; fi
fi
OUT=${OUT:-results/audit}
if [[ -n ${SKIP:-} && -z ${DEFINITIONS:-} ]]; then  # every task's definition but these
  DEFINITIONS=$(SKIP="$SKIP" python3 -c "
import json, os, pathlib
tasks = {json.loads(p.read_text())['definition'] for p in pathlib.Path('dataset/tasks').glob('*.json')}
print(' '.join(sorted(tasks - set(os.environ['SKIP'].split()))))")
  echo "definitions: $DEFINITIONS"
fi
source scripts/gpu_setup.sh >/dev/null
mkdir -p "$(dirname "$REPORT")" "$OUT"
began=$(date +%s)
only=()
for name in ${DEFINITIONS:-}; do only+=(-d "$name"); done
if [[ ${REFERENCES:-0} == 1 || ${FILL:-0} == 1 ]]; then
  timeout "$PART_SECONDS" python3 -m inference_kernels.cli reference --suite all --device "$DEVICE" \
    "${only[@]}" --cache "$CACHE" > "$OUT/references.log" 2>&1
  filled=$?
  echo "references rc=$filled seconds=$(( $(date +%s) - began ))"
  [[ ${REFERENCES:-0} == 1 ]] && exit "$filled"
fi
# the audit judges each definition's baseline (task files), not our other kernels
mapfile -t baselines < <(DEFINITIONS="${DEFINITIONS:-}" python3 -c "
import json, os, pathlib
wanted = set(os.environ['DEFINITIONS'].split())
for path in sorted(pathlib.Path('dataset/tasks').glob('*.json')):
    task = json.loads(path.read_text())
    if not wanted or task['definition'] in wanted:
        print('-s'); print(task['baseline'])")
left=$(( PART_SECONDS - ($(date +%s) - began) ))
(( left >= 1 )) || left=1  # (timeout 0 would be no limit at all)
if [[ -s $REPORT ]]; then again=--resume; else again=--overwrite; fi
timeout "$left" python3 -m inference_kernels.cli run --device "$DEVICE" --suite all --methods graph \
  "${only[@]}" "${baselines[@]}" --cache "$CACHE" --report "$REPORT" $again > "$OUT/audit.log" 2>&1
audited=$?
echo "audit part rc=$audited seconds=$(( $(date +%s) - began ))"
(( audited == 124 )) && audited=0  # a part ends at its time limit by design; resume it
[[ $REPORT -ef $OUT/audit.jsonl ]] || cp "$REPORT" "$OUT/audit.jsonl"
python3 scripts/case_breakdown.py "$REPORT"
exit "$audited"
