#!/bin/bash
# Engine vmm (issue 38): the bundled sample gives bit-identical results natively and under
# `umswap run --engine vmm`, once with the default pool (everything on GPU chunks, nothing moved)
# and once with a budget of about half its footprint, so that the rest lands on host chunks and
# the steps' windows move ranges between the two (hooks/vmm_observer.h). Checks, from the stats
# files: engine vmm, no advisor, the GPU chunks' peak within the budget, host chunks used under
# the budget, ranges moved at half and none at full, every window opened and drained and no move
# failed, no allocation refused, none escaping umswap; and the notice said once at start.
# usage: vmm_run_check.sh UMSWAP [MLP_TRAIN]   (MLP_TRAIN: mlp_train beside UMSWAP by default)
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $(basename "$0") UMSWAP [MLP_TRAIN]" >&2
  exit 2
fi
umswap=$1
sample=${2:-$(dirname "$umswap")/mlp_train}
[ -x "$sample" ] || { echo "FAIL: no sample at $sample" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The sample's sizes, as sample_identical.sh runs it: some twenty allocations, each its own 2 MiB
# chunks or more under vmm (tens of MiB in all).
args=(--steps 30)
status=0

"$sample" "${args[@]}" >"$work/native.out"
grep -q '^result OK' "$work/native.out" || { echo "FAIL: the native run did not report OK"; exit 1; }

# One run under engine vmm: its output must be the native one's, bit for bit.
run_vmm() {  # name, then umswap run's flags
  local name=$1
  shift
  "$umswap" run --engine vmm "$@" --stats "$work/$name.json" -- "$sample" "${args[@]}" \
    >"$work/$name.out" 2>"$work/$name.err" || { echo "FAIL: $name: exit $?"; cat "$work/$name.err"; status=1; }
  if ! diff "$work/native.out" "$work/$name.out"; then
    echo "FAIL: $name: output differs from the native run"
    status=1
  fi
  local notices
  notices=$(grep -c 'engine vmm: allocations placed on the GPU up to the budget' "$work/$name.err" || true)
  [ "$notices" = 1 ] || { echo "FAIL: $name: the start notice was said $notices times"; cat "$work/$name.err"; status=1; }
}

# The whole footprint on GPU chunks (the default pool), to measure it.
run_vmm full
footprint=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vmm"]["gpu_bytes_peak"])' "$work/full.json")
budget_mib=$((footprint / 2 / 1048576))
echo "footprint $((footprint / 1048576)) MiB in 2 MiB chunks; budget ${budget_mib}M"
[ "$budget_mib" -ge 4 ] || { echo "FAIL: footprint too small to halve ($footprint bytes)"; exit 1; }

run_vmm half --budget "${budget_mib}M"

python3 - "$work/full.json" "$work/half.json" "$budget_mib" <<'PY' || status=1
import json, sys
full, half = (json.load(open(p)) for p in sys.argv[1:3])
budget = int(sys.argv[3]) * 1048576
ok = True
def check(cond, what):
    global ok
    print(("ok:   " if cond else "FAIL: ") + what)
    ok = ok and cond
for name, s in (("full", full), ("half", half)):
    v, a = s["vmm"], s["allocator"]
    print(f"{name}: gpu peak {v['gpu_bytes_peak']} of pool {v['budget_bytes']}, host peak "
          f"{v['host_bytes_peak']}, requested peak {v['requested_bytes_peak']}, "
          f"{v['allocations']} allocations {v['allocations_by_api']}, frees {v['frees']} "
          f"({v['frees_deferred']} after their event, {v['frees_synchronized']} synchronized)")
    check(s.get("engine") == "vmm", f"{name}: engine vmm")
    check("advisor" not in s, f"{name}: no advisor ran")
    check(v["gpu_bytes_peak"] <= v["budget_bytes"], f"{name}: GPU peak within the pool")
    check(v["out_of_memory"] == 0, f"{name}: no allocation refused")
    check(a["escaped_allocations"] == 0, f"{name}: no allocation escaped umswap")
    check(v["windows_abandoned"] == 0 and v["drains_failed"] == 0 and v["move_failures"] == 0,
          f"{name}: every window opened and drained, no move failed")
    # The runtime's cudaMallocAsync reaches the driver's hook as cuMemAllocAsync (no runtime hook
    # names it on the way): either name is a stream-ordered allocation served by the arena.
    by_api = v["allocations_by_api"]
    check(by_api.get("cudaMallocAsync", 0) + by_api.get("cuMemAllocAsync", 0) > 0,
          f"{name}: stream-ordered ones too")
    check(v["frees_deferred"] > 0, f"{name}: stream-ordered frees released after their event")
check(full["vmm"]["host_bytes_peak"] == 0, "full: all on GPU chunks")
check(full["vmm"]["remaps"] == 0 and full["vmm"]["windows"] == 0, "full: nothing moved")
check(half["vmm"]["ranges_restored"] > 0 and half["vmm"]["remaps"] > 0,
      f"half: ranges moved ({half['vmm']['windows']} windows, {half['vmm']['ranges_restored']} "
      f"restored, {half['vmm']['ranges_prefetched']} ahead, {half['vmm']['ranges_evicted']} "
      f"evicted, period {half['vmm']['period']})")
check(half["vmm"]["budget_bytes"] <= budget, "half: the pool is the budget")
check(half["vmm"]["gpu_bytes_peak"] <= budget, "half: GPU peak <= budget")
check(half["vmm"]["host_bytes_peak"] > 0, "half: host chunks used")
sys.exit(0 if ok else 1)
PY
echo "$(grep -c '^step' "$work/native.out") steps identical natively and under engine vmm, $(grep checksum "$work/native.out")"
exit $status
