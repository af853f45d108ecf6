#!/usr/bin/env bash
# One long job on the device machine across its calls (each call ends at 600 s, the machine
# stays held while calls follow within its 30 s of idle, up to 30 minutes). The machine ends
# a call's processes when the call returns, except one that started a process session of
# its own: `start` runs the job so (setsid), on a copy of src/, dataset/, scripts/, tests/,
# benchmarks/, pyproject.toml and .whl/ under STATE (later calls' copies of the working tree cannot touch
# it), with OUT=$STATE/out for its files, ORIGIN the call's working tree (to copy a report
# in, to resume it), and INFERENCE_KERNELS_CONFIG under STATE (the judge's key must outlive
# the call's tree; an existing key folder is copied there).
# `wait SECONDS` waits up to that long, prints the job's last lines, and copies what is under
# $STATE/out, folders too, and its log to $OUT (every time: a lost machine loses only what came after).
#   call 1:   bash scripts/gpu_detach.sh start 'FILL=1 PART_SECONDS=86400 REPORT=$OUT/audit.jsonl bash scripts/gpu_audit.sh'
#   call 2..: OUT=$OUT bash scripts/gpu_detach.sh wait 580
# Exit status of wait: 0 ended with status 0, 1 ended otherwise, 2 no job or it died
# without a status (killed), 3 still running. start refuses while a job runs under STATE.
set -uo pipefail
STATE=${STATE:-/dev/shm/ikjob}
# the job's process group (setsid made its pid the group's): alive while any of it runs
alive() { [[ -e $STATE/pid ]] && kill -0 -- "-$(cat "$STATE/pid")" 2>/dev/null; }
case ${1:-} in
start)
  shift
  if alive; then echo "a job runs under $STATE (pid $(cat "$STATE/pid")): not starting another"; exit 2; fi
  rm -rf "$STATE" && mkdir -p "$STATE/tree" "$STATE/out" || exit 2
  cp -a src dataset scripts "$STATE/tree/" || exit 2
  for extra in tests benchmarks pyproject.toml; do  # (GPU tests, benchmarks after an audit)
    if [[ -e $extra ]]; then cp -a "$extra" "$STATE/tree/" || exit 2; fi
  done
  if [[ -d .whl ]]; then cp -a .whl "$STATE/tree/" || exit 2; fi
  # The judge's key: the one named, else the carried results/ikconfig. Without either the
  # job makes a key of its own, which goes with the machine: its rows then verify nowhere
  # (the forty-second session's 492 rows, started without the export).
  config=${INFERENCE_KERNELS_CONFIG:-}
  if [[ -z $config && -d results/ikconfig ]]; then config=$PWD/results/ikconfig; fi
  if [[ -d $config ]]; then
    cp -a "$config" "$STATE/config" || exit 2
  else
    echo "warning: no INFERENCE_KERNELS_CONFIG nor results/ikconfig: the job's rows will verify only on this machine"
  fi
  export INFERENCE_KERNELS_CONFIG=$STATE/config
  date +%s > "$STATE/started"
  export OUT=$STATE/out ORIGIN=$PWD STATE
  # shellcheck disable=SC2016  # $1 and $? are the job's
  (cd "$STATE/tree" || exit
   setsid bash -c 'echo $$ > "$STATE/pid"; bash -c "$1"; echo $? > "$STATE/rc.tmp" && mv "$STATE/rc.tmp" "$STATE/rc"' \
     job "$*" < /dev/null > "$STATE/job.log" 2>&1 &)
  sleep 1
  alive || [[ -e $STATE/rc ]] || { echo "the job did not start"; cat "$STATE/job.log"; exit 2; }
  echo "started under $STATE (pid $(cat "$STATE/pid")): $*"
  ;;
wait)
  [[ -e $STATE/started ]] || { echo "no job under $STATE"; exit 2; }
  waited=0
  while [[ ! -e $STATE/rc ]] && alive && (( waited < ${2:-580} )); do
    sleep 5
    waited=$(( waited + 5 ))
  done
  echo "$(( $(date +%s) - $(cat "$STATE/started") )) s since the job started; its last lines:"
  tail -n 4 "$STATE/job.log"
  mkdir -p "${OUT:-results/job}"
  cp -a "$STATE/out/." "${OUT:-results/job}/"  # (folders too: a part's OUT=$OUT/NAME)
  cp "$STATE/job.log" "${OUT:-results/job}/"
  if [[ -e $STATE/rc ]]; then
    status=$(cat "$STATE/rc")
    echo "ended: status $status"
    [[ $status == 0 ]] && exit 0 || exit 1
  elif alive; then
    echo "still running"
    exit 3
  fi
  echo "the job died without an exit status (killed?)"
  exit 2
  ;;
*)
  echo "usage: gpu_detach.sh start 'COMMAND' | wait SECONDS"
  exit 2
  ;;
esac
