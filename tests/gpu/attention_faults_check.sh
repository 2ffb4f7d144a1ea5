#!/bin/bash
# A kernel whose output a GPU page fault changes (cuDNN's fused attention with dropout,
# attention_faults.py) gives native's output under `umswap run` with the defaults, no budget:
# umswap populates new allocations on the GPU before the program gets them, so the kernel's first
# touch takes no fault. The same program on plain managed memory (`--mode managed`) is run too and
# its result printed, not judged: it shows whether this GPU and cuDNN still have the hazard.
# Then under a budget: each trial first writes 1 GiB (--pressure-mib), the budget is 512 MiB, so
# the kernel's inputs are evicted between trials; the kernel must still give native's output, and
# the run must have evicted something, or the check tested nothing. This case passed on a binary
# without resident launches too (2026-11-29, H200: the learning phase brings a launch's blocks
# back before it runs); what failed there was an applied plan migrating ranges beside the kernel
# (BERT-large, docs/RELIABILITY.md), which this small program does not reach.
# The kernel is not bit for bit reproducible even natively: 5 of 2,016 native trials differed
# (in a few thread blocks' rows, up to 11,326 of 16.8 M elements; H200, cuDNN 9.19, four
# processes at once, 2026-11-29), and umswap's trials at the same rate (5 of 2,416). A fault
# changes every trial (464,610-538,147 elements each). So native's output is the one most of its
# trials give, and a run passes with at most one trial that differs.
# usage: attention_faults_check.sh UMSWAP
# Exit 0 pass, 1 fail, 77 skip (no torch, GPU or cuDNN attention).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $(basename "$0") UMSWAP" >&2
  exit 2
fi
umswap=$1
script="$(dirname "$0")/attention_faults.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$script" > "$work/native.out" 2> "$work/native.err"
rc=$?
if [ $rc -eq 77 ]; then cat "$work/native.err"; exit 77; fi
if [ $rc -ne 0 ]; then echo "FAIL: the native run failed"; tail -n 5 "$work/native.err"; exit 1; fi
# The output most trials give, if all but at most one give it; else nothing.
majority() {
  awk '{print $3}' "$1" | sort | uniq -c | sort -rn |
    awk -v n="$(wc -l < "$1")" 'NR == 1 && $1 >= n - 1 && n > 1 {print $2}'
}
native=$(majority "$work/native.out")
if [ -z "$native" ]; then
  echo "natively more than one trial differs ($(awk '{print $3}' "$work/native.out" | sort -u | wc -l) outputs): cannot judge; skipped"
  exit 77
fi
# Managed memory stays far below any GPU's free memory (rule 2 of the developers' guide).
export UMSWAP_MANAGED_LIMIT=${UMSWAP_MANAGED_LIMIT:-8G}
status=0
for mode in online managed; do
  if ! timeout -s KILL 300 "$umswap" run --mode $mode --stats "$work/$mode.json" -- \
      python3 "$script" > "$work/$mode.out" 2> "$work/$mode.err"; then
    echo "FAIL: --mode $mode: the run failed or hung"; tail -n 10 "$work/$mode.err"
    status=1
    continue
  fi
  differ=$(awk -v n="$native" '$3 != n' "$work/$mode.out" | wc -l)
  trials=$(wc -l < "$work/$mode.out")
  if [ "$mode" = online ]; then
    if [ "$differ" -le 1 ] && [ "$trials" -gt 1 ]; then
      echo "defaults: $((trials - differ)) of $trials trials give native's output ($native)"
    else
      echo "FAIL: defaults: $differ of $trials trials differ from native's output ($native)"
      status=1
    fi
  else
    echo "plain managed memory (not judged): $differ of $trials trials differ from native's output"
  fi
done
python3 "$script" --trials 16 --pressure-mib 1024 > "$work/native-p.out" 2> "$work/native-p.err" || {
  echo "FAIL: the native run with pressure failed"; tail -n 5 "$work/native-p.err"; exit 1; }
native_p=$(majority "$work/native-p.out")
if [ -z "$native_p" ]; then
  echo "natively, with pressure, more than one trial differs: budget case not judged"
elif ! timeout -s KILL 300 "$umswap" run --no-cache --budget 512M --stats "$work/budget.json" -- \
    python3 "$script" --trials 16 --pressure-mib 1024 > "$work/budget.out" 2> "$work/budget.err"; then
  echo "FAIL: --budget 512M: the run failed or hung"; tail -n 10 "$work/budget.err"
  status=1
else
  differ=$(awk -v n="$native_p" '$3 != n' "$work/budget.out" | wc -l)
  trials=$(wc -l < "$work/budget.out")
  read -r evicted resident state < <(python3 -c 'import json, sys
a = json.load(open(sys.argv[1]))["advisor"]
evicted = a.get("evicted_bytes", 0) + a.get("learn_evict", {}).get("evicted_bytes", 0)
print(evicted, a.get("resident_launches", {}).get("launches", 0), a.get("state"))' \
    "$work/budget.json")
  if [ "$differ" -le 1 ] && [ "$trials" -eq 16 ] && [ "${evicted:-0}" -gt 0 ]; then
    echo "--budget 512M: $((trials - differ)) of $trials trials give native's output ($native_p);" \
      "$evicted bytes evicted, $resident resident launches"
  else
    echo "FAIL: --budget 512M: $differ of $trials trials differ from native's output ($native_p);" \
      "${evicted:-?} bytes evicted (none: the check tested nothing), ${resident:-?} resident" \
      "launches, advisor state ${state:-?}"
    status=1
  fi
fi
exit $status
