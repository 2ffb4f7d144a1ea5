#!/bin/bash
# PyTorch's expandable segments under engine vmm (issue 38): `umswap run --engine vmm` turns a
# user's PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True off, with one warning (a tensor across
# several of their handles is reached partly over the link, which changed cuDNN's dropout
# attention: docs/lab/2026-12-02-vmm-handles-checked-and-windows.md), and a deterministic GPT-2
# loop then gives the losses and weights' checksum of its native run with them off, at half its
# native peak. Checks, from the stats: the program mapped nothing itself (no handle made, no GPU
# memory of its own), the GPU chunks within the pool, host chunks used, ranges moved, no
# allocation refused or escaping. Then the library alone: with the setting put back after
# umswap's merge (`env`), PyTorch maps its own handles, which engine vmm leaves to the driver
# (one warning naming expandable segments, the program's own GPU memory counted, none served).
# usage: vmm_expandable_check.sh UMSWAP GPT2_PY   (exit 77: no PyTorch with CUDA here)
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $(basename "$0") UMSWAP GPT2_PY" >&2
  exit 2
fi
umswap=$1
script=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset PYTORCH_ALLOC_CONF  # PyTorch 2.9+ reads it first
args=(--layers 4 --width 512 --heads 8 --batch 4 --seq 512 --steps 6 --deterministic)
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False python3 "$script" "${args[@]}" \
  >"$work/native" 2>"$work/native.err"
rc=$?
[ $rc -eq 77 ] && { cat "$work/native"; exit 77; }
grep -q '^skip:' "$work/native" && { cat "$work/native"; exit 77; }
[ $rc -eq 0 ] || { echo "FAIL: native run exited $rc"; cat "$work/native.err"; exit 1; }
peak=$(sed -n 's/^summary //p' "$work/native" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_reserved_bytes"])')
budget_mib=$((peak / 2 / 1048576))
echo "native peak reserved $((peak / 1048576)) MiB; budget ${budget_mib}M"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
  "$umswap" run --engine vmm --budget "${budget_mib}M" --stats "$work/stats.json" -- \
  python3 "$script" "${args[@]}" >"$work/vmm" 2>"$work/vmm.err" ||
  { echo "FAIL: umswap run exited $?"; cat "$work/vmm.err"; exit 1; }
# Losses and the checksum (times and peaks differ).
filter() { sed -E 's/ ms [0-9.]+//; s/^summary .*"checksum": "([0-9a-f]+)".*/checksum \1/' "$1" | grep -E '^(iter|checksum)'; }
diff <(filter "$work/native") <(filter "$work/vmm") || { echo "FAIL: losses or checksum differ"; exit 1; }
echo "losses and checksum identical: $(filter "$work/native" | tail -1)"
[ "$(grep -c 'umswap sets expandable_segments:False' "$work/vmm.err")" -eq 1 ] ||
  { echo "FAIL: not one warning that expandable segments are turned off"; cat "$work/vmm.err"; exit 1; }
python3 - "$work/stats.json" "$budget_mib" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
v, a = s["vmm"], s["allocator"]
budget = int(sys.argv[2]) * 1048576
by_api = v["allocations_by_api"]
print(f"allocations {by_api}, GPU peak {v['gpu_bytes_peak']} of pool {v['budget_bytes']}, host "
      f"peak {v['host_bytes_peak']}, program's own GPU bytes peak {v['program_gpu_bytes_peak']}, "
      f"moved to GPU {v['bytes_to_gpu']} to host {v['bytes_to_host']}")
ok = True
def check(cond, what):
    global ok
    print(("ok:   " if cond else "FAIL: ") + what)
    ok = ok and cond
check(v["program_mapped"] == 0, "no handle of the program's own (segments turned off)")
check(v["program_gpu_bytes_peak"] == 0, "no GPU memory of the program's own")
check(v["gpu_bytes_peak"] <= v["budget_bytes"] <= budget, "GPU chunks within the pool")
check(v["host_bytes_peak"] > 0, "host chunks used")
check(v["bytes_to_gpu"] > 0, "ranges moved")
check(v["out_of_memory"] == 0, "no allocation refused")
check(a["escaped_allocations"] == 0, "no allocation escaped umswap")
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] || exit 1
"$umswap" run --engine vmm --budget "${budget_mib}M" --stats "$work/own.json" -- \
  env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$script" "${args[@]}" \
  >"$work/own" 2>"$work/own.err" ||
  { echo "FAIL: umswap run (segments put back) exited $?"; cat "$work/own.err"; exit 1; }
[ "$(grep -c "engine vmm does not serve (PyTorch's expandable segments" "$work/own.err")" -eq 1 ] ||
  { echo "FAIL: not one warning that PyTorch's handles are left to the driver"; cat "$work/own.err"; exit 1; }
python3 - "$work/own.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))["vmm"]
ok = v["allocations_by_api"].get("cuMemMap", 0) == 0 and v["program_gpu_bytes_peak"] > 0
print(("ok:   " if ok else "FAIL: ") + "PyTorch's own handles left to the driver and counted "
      f"(served {v['allocations_by_api'].get('cuMemMap', 0)}, own GPU bytes peak "
      f"{v['program_gpu_bytes_peak']})")
sys.exit(0 if ok else 1)
PY
