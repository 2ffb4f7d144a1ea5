#!/bin/bash
# `umswap compare` of a torchrun command: `torchrun --nproc-per-node N sharded_train.py` (DDP or
# FSDP2 over NCCL, deterministic), in modes native, managed and online at the default 50% budget,
# with FSDP2's own CPUOffloadPolicy as the offload baseline (fsdp only).
# Checks the --json report: for every mode one row per rank 0..N-1, each finished, timed from
# that rank's own `iter` lines, with the weights' checksum equal to native's same rank (the
# script is deterministic); the online rows with the budget, a counted peak and the rank's stats
# file; replay is not asked for. Prints the table.
# usage: compare_torchrun_check.sh UMSWAP [ddp|fsdp] [RANKS]
#   RANKS defaults to 2; 1 runs a world of one, so that the logic is tested on one GPU.
#   Exit 77: no PyTorch with RANKS GPUs, no torchrun, no FSDP2.
# UMSWAP_MANAGED_LIMIT must be set by the caller (per process: each rank is capped on its own).
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $(basename "$0") UMSWAP [ddp|fsdp] [RANKS]" >&2
  exit 2
fi
umswap=$1
shard=${2:-ddp}
ranks=${3:-2}
case "$shard" in ddp | fsdp) ;; *) echo "compare_torchrun_check.sh: ddp or fsdp, not $shard" >&2; exit 2 ;; esac
case "$ranks" in [1-8]) ;; *) echo "compare_torchrun_check.sh: RANKS 1 to 8, not $ranks" >&2; exit 2 ;; esac
[ -n "${UMSWAP_MANAGED_LIMIT:-}" ] || { echo "compare_torchrun_check.sh: set UMSWAP_MANAGED_LIMIT" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.device_count() >= int(sys.argv[1]) else 77)' \
  "$ranks" 2>/dev/null || { echo "skip: needs PyTorch with $ranks GPUs"; exit 77; }
python3 -c 'import torch.distributed.run' 2>/dev/null || { echo "skip: no torch.distributed.run"; exit 77; }
export NCCL_NVLS_ENABLE=0
baselines=()
[ "$shard" = fsdp ] && baselines=(--baselines offload)
mkdir -p "$work/out"
"$umswap" compare --modes native,managed,online "${baselines[@]}" --json "$work/c.json" -- \
  python3 -m torch.distributed.run --standalone --nproc-per-node "$ranks" "$here/sharded_train.py" \
  --steps 12 --batch 64 --image 64 --shard "$shard" --out "$work/out" \
  >"$work/compare.out" 2>"$work/compare.err"
rc=$?
cat "$work/compare.out"
if grep -q '^skip: ' "$work/compare.out" "$work/compare.err" 2>/dev/null; then exit 77; fi
if [ $rc -ne 0 ]; then
  echo "FAIL: umswap compare exited $rc"
  tail -n 30 "$work/compare.err"
  exit 1
fi
python3 - "$work/c.json" "$ranks" "$shard" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
ranks, shard = int(sys.argv[2]), sys.argv[3]
ok = True
def bad(why):
    global ok
    ok = False
    print(f"BAD: {why}")
for mode in ("native", "managed", "online"):
    rows = [m for m in j["modes"] if m["mode"] == mode]
    if sorted(m["rank"] for m in rows if m["rank"] is not None) != list(range(ranks)) or len(rows) != ranks:
        bad(f"{mode}: rows for ranks {[m['rank'] for m in rows]}, expected 0..{ranks - 1}")
        continue
    for m in rows:
        where = f"{mode} r{m['rank']}"
        if m["status"] != "ok":
            bad(f"{where}: {m['status']} {m['reason']}")
            continue
        if m["timing_source"] != "program" or not m["steady_median_ms"] or len(m["raw"]["iter_ms"]) != 12:
            bad(f"{where}: timed from {m['timing_source']}, {len(m['raw']['iter_ms'])} iter lines")
        if mode != "native" and (m["result_basis"] != "checksum" or m["result_match"] != "same"):
            bad(f"{where}: result {m['result_match']} by {m['result_basis']}")
        if mode == "online":
            s = m["raw"]["stats"]
            if not m["budget_bytes"] or m["peak_resident_bytes"] is None or s is None:
                bad(f"{where}: budget {m['budget_bytes']} peak {m['peak_resident_bytes']} "
                    f"stats {m['raw']['stats_error']}")
        print(f"{where}: {m['steady_median_ms']:.1f} ms, x native {m['ratio_to_native']:.2f}, "
              f"result {m['result_match']}, peak resident {m['peak_resident_bytes']}, "
              f"budget {m['budget_bytes']} held {m['budget_held']}")
if shard == "fsdp":
    rows = j["baselines"]
    if sorted(b["rank"] for b in rows) != list(range(ranks)) or any(b["status"] != "ok" for b in rows):
        bad(f"offload baseline rows: {[(b['rank'], b['status'], b['reason']) for b in rows]}")
    for v in j["baseline_comparisons"]:
        print(f"rank {v['rank']}: {v['text']}")
if any(m["mode"] == "replay" for m in j["modes"]):
    bad("replay ran, though not asked for")
print("ok" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
