#!/bin/bash
# JAX under umswap (docs/jax.md): a small jitted MLP (samples/jax/train.py) natively with JAX's own
# settings, then under `umswap run` at half its native peak with engine um and with engine vmm.
# Checks: the weights' checksum is native's in both; umswap run's XLA settings took (the memory
# came as stream-ordered allocations umswap served, none mapped by the program with cuMemMap);
# under vmm the GPU chunks' peak stays within the pool; XLA's CUDA graph launches (its command
# buffers: 6 in run 207, JAX 0.11.2) are counted by both engines and said in the summary. The
# native run has JAX's own allocator without preallocation (75% of the GPU otherwise). Exit 77
# without JAX or a GPU (the sample's own skip).
# usage: jax_check.sh UMSWAP
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $(basename "$0") UMSWAP" >&2
  exit 2
fi
umswap=$1
sample=$(cd "$(dirname "$0")/../.." && pwd)/samples/jax/train.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# 0.94 GB at its peak (4 layers of 4096 x 4096, batch 4096; run 208, H200, JAX 0.11.2).
args=(--model mlp --layers 4 --width 4096 --batch 4096 --steps 6)

rc=0
env -u XLA_PYTHON_CLIENT_ALLOCATOR XLA_PYTHON_CLIENT_PREALLOCATE=false \
  python3 "$sample" "${args[@]}" >"$work/native.out" 2>"$work/native.err" || rc=$?
if [ "$rc" = 77 ]; then
  cat "$work/native.out"
  exit 77
fi
[ "$rc" = 0 ] || { echo "FAIL: the native run exited $rc"; cat "$work/native.err"; exit 1; }
half=$(python3 - "$work/native.out" <<'PY'
import json, sys
s = [l for l in open(sys.argv[1]) if l.startswith("summary ")]
peak = json.loads(s[-1][len("summary "):]).get("peak_allocated_bytes") if s else None
if not peak:
    sys.exit(1)
print(int(peak) // 2)
PY
) || { echo "FAIL: the native run's summary gives no peak"; cat "$work/native.out"; exit 1; }
echo "native peak / 2: $half bytes"

status=0
for engine in um vmm; do
  "$umswap" run --engine "$engine" --budget "$half" --stats "$work/$engine.json" -- \
    python3 "$sample" "${args[@]}" >"$work/$engine.out" 2>"$work/$engine.err" ||
    { echo "FAIL: $engine: exit $?"; cat "$work/$engine.err"; status=1; continue; }
  python3 - "$engine" "$work/native.out" "$work/$engine.out" "$work/$engine.json" \
    "$work/$engine.err" <<'PY' || status=1
import json, sys
engine, native_out, out, stats_path, err_path = sys.argv[1:]
def summary(path):
    return json.loads([l for l in open(path) if l.startswith("summary ")][-1][len("summary "):])
native, run, stats, err = summary(native_out), summary(out), json.load(open(stats_path)), \
    open(err_path).read()
ok = True
def check(cond, what):
    global ok
    print(("ok:   " if cond else "FAIL: ") + f"{engine}: {what}")
    ok = ok and cond
check(run["checksum"] == native["checksum"],
      f"checksum {run['checksum']}, native {native['checksum']}")
if engine == "um":
    by_api = stats["allocator"]["allocations_by_api"]
    check(stats["allocator"]["unmanaged_vmm_allocations"] == 0, "nothing mapped with cuMemMap")
    graphs = stats["advisor"]["graph_launches"]
else:
    v = stats["vmm"]
    by_api = v["allocations_by_api"]
    check(v["program_mapped"] == 0, "nothing mapped with cuMemMap")
    check(v["gpu_bytes_peak"] <= v["budget_bytes"],
          f"GPU chunks' peak {v['gpu_bytes_peak']} within the pool {v['budget_bytes']}")
    graphs = v["graph_launches"]
check(graphs > 0 and f" {graphs} CUDA graph launch" in err,
      f"{graphs} CUDA graph launches counted and said in the summary")
ordered = sum(by_api.get(k, 0) for k in ("cudaMallocAsync", "cuMemAllocAsync",
                                          "cudaMallocFromPoolAsync", "cuMemAllocFromPoolAsync"))
check(ordered > 0, f"{ordered} stream-ordered allocations (XLA_PYTHON_CLIENT_ALLOCATOR took)")
sys.exit(0 if ok else 1)
PY
done
exit $status
