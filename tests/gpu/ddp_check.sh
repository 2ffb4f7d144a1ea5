#!/bin/bash
# Multi-GPU training through PyTorch's own engine: `torchrun --nproc-per-node 2` DDP (NCCL) under
# `umswap run`, each rank with its own budget. Checks, against a native torchrun of the same
# script: every rank's losses and the final weights are bit-identical; exactly one stats file per
# rank (the torchrun launcher uses no CUDA and writes none), each from its own process, with the
# tracer on, managed allocations, nothing escaped, the budget given, and unified-memory records
# counted on that rank's own GPU. Prints each rank's counted peak resident bytes and faults.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
# usage: ddp_check.sh UMSWAP [BUDGET]      (exit 77: no PyTorch with 2 GPUs, no torchrun)
# UMSWAP_MANAGED_LIMIT must be set by the caller (per process: each rank is capped on its own).
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $(basename "$0") UMSWAP" >&2
  exit 2
fi
umswap=$1
budget=${2:-256M}
here=$(cd "$(dirname "$0")" && pwd)
script=$here/ddp_train.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL (ddp): $*"
  for f in "$work"/*.out "$work"/*.err "$work"/*/rank*.txt; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }
  done
  exit 1
}
[ -n "${UMSWAP_MANAGED_LIMIT:-}" ] || { echo "ddp_check.sh: set UMSWAP_MANAGED_LIMIT" >&2; exit 2; }
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.device_count() >= 2 else 77)' 2>/dev/null ||
  { echo "skip: needs PyTorch with 2 GPUs"; exit 77; }
export NCCL_NVLS_ENABLE=0
run_ddp() { python3 -m torch.distributed.run --standalone --nproc-per-node 2 "$script" "$@"; }
args=(--steps 12 --batch 64 --image 64)
mkdir -p "$work/native" "$work/umswap"

run_ddp "${args[@]}" --out "$work/native" >"$work/native.out" 2>"$work/native.err" ||
  fail "native torchrun exited $?"
for r in 0 1; do
  [ "$(grep -c "^rank $r device $r step" "$work/native/rank$r.txt")" = 12 ] ||
    fail "native run: rank $r did not train 12 steps on GPU $r"
done
"$umswap" run --budget "$budget" --stats "$work/stats.%p.json" -- \
  python3 -m torch.distributed.run --standalone --nproc-per-node 2 "$script" "${args[@]}" \
  --out "$work/umswap" >"$work/run.out" 2>"$work/run.err" || fail "torchrun under umswap exited $?"
for r in 0 1; do
  diff "$work/native/rank$r.txt" "$work/umswap/rank$r.txt" ||
    fail "rank $r: losses or weights differ from the native run"
done
diff <(grep '^weights' "$work/umswap/rank0.txt") <(grep '^weights' "$work/umswap/rank1.txt") ||
  fail "the ranks' weights differ"
python3 - "$work" "$budget" <<'PY' || fail "stats check failed"
import glob, json, sys
work, budget = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(f"{work}/stats.*.json"))
ok = len(files) == 2
print(f"{len(files)} stats files (expected 2, one per rank)")
pids = set()
for f in files:
    s = json.load(open(f))
    pids.add(s["pid"])
    a = s.get("advisor", {})
    its = s.get("iterations", [])
    moved = sum(i.get("bytes_htod", 0) + i.get("bytes_dtoh", 0) + i.get("gpu_page_faults", 0)
                for i in its)
    good = (s["tracer"] and s["allocator"]["allocations"] > 0
            and s["allocator"]["escaped_allocations"] == 0
            and s["options"]["budget"] == budget and moved > 0)
    print(f"pid {s['pid']}: mode {s['mode']} budget {s['options']['budget']} tracer {s['tracer']} "
          f"allocations {s['allocator']['allocations']} escaped "
          f"{s['allocator']['escaped_allocations']} period {s.get('detection', {}).get('period')} "
          f"advisor {a.get('state')} peak resident {s.get('peak_resident_bytes')} "
          f"faults {[i.get('gpu_page_faults') for i in its]} "
          f"{'ok' if good else 'BAD'}")
    ok = ok and good
ok = ok and len(pids) == 2
sys.exit(0 if ok else 1)
PY
echo "ddp: 2 ranks x 12 steps, losses and weights identical to native; $(grep -c . "$work/run.err") stderr lines under umswap"
grep '^umswap: ' "$work/run.err" | sort | uniq -c | head -5
