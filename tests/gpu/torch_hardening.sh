#!/bin/bash
# umswap under conditions a real training job meets (torch_hardening.py has the programs):
#   profiler       torch.profiler started before the first CUDA call, or mid-run: the profiler
#                  gets CUPTI and records CUDA events, umswap prints exactly one warning naming the
#                  profiler (its tracer stays off, or steps aside), the losses equal native ones
#   cupti-missing  UMSWAP_CUPTI_LIBRARY=/nonexistent: one warning naming the path, the losses are
#                  bit-identical to the native run's
#   dataloader     DataLoader with 2 forked workers (and one more forked child that exits
#                  normally) under `umswap run --stats`: only the parent writes a stats file
#   graph          a CUDA graph captured and replayed: losses and weights bit-identical to native,
#                  without a budget and with one below the footprint (the captured calls are
#                  counted in the stats and are no steps)
#   compile        torch.compile(mode="reduce-overhead"): losses and weights bit-identical to native
#   async-alloc    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (every tensor a cudaMallocAsync):
#                  eager training with a budget below its footprint (the advisor moves blocks of
#                  umswap's slabs, frees discard the dead pages its plan drops) and a captured
#                  CUDA graph (allocations during capture take the driver's pool): bit-identical
#                  to native; the stats show the slabs in use and dead pages discarded
#   default-alloc  PyTorch's default caching allocator, its blocks followed (torch_blocks.h):
#                  eager training with a budget below its footprint, whose frees drop the dead
#                  pages the plan drops, and a captured CUDA graph under the same budget (nothing
#                  dropped on a capturing stream): bit-identical to native; the stats show the
#                  blocks followed ("checked"), the drops on, and dead pages discarded
#   evict-copy     a small GPT-2 (samples/pytorch/gpt2.py --deterministic) at half its peak with
#                  UMSWAP_EVICT_COPY=1 (by umswap's copy kernel), with UMSWAP_DEBUG=keep-pages
#                  too, and =0
#                  (scripts/evict_copy_check.py): every loss and the final weights' checksum
#                  equal native's, the copy runs copied, and no step ran on a discarded or
#                  returning page (copy_check)
# usage: torch_hardening.sh UMSWAP CASE       (exit 77: no PyTorch with CUDA here)
# UMSWAP_MANAGED_LIMIT comes from CTest (tests/gpu/CMakeLists.txt); it is passed through.
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $(basename "$0") UMSWAP CASE" >&2
  exit 2
fi
umswap=$1
case=$2
here=$(cd "$(dirname "$0")" && pwd)
script=$here/torch_hardening.py
cnn=$here/../../samples/pytorch/small_cnn.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL ($case): $*"
  for f in "$work"/*.out "$work"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }; done
  exit 1
}
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 77)' 2>/dev/null ||
  { echo "skip: no PyTorch with CUDA"; exit 77; }

# The lines umswap itself printed (warnings and errors) in a stderr file.
umswap_lines() { grep -E '^umswap: (warning|error): ' "$1" || true; }
# A field of a stats file: stats FILE 'python expression on s'
stats() { python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print($2)" "$1"; }
# The stats show managed allocations, nothing escaped, and (if given) whether the tracer ran.
check_managed() {
  local file=$1 tracer=${2:-}
  [ -f "$file" ] || fail "no stats file $file"
  [ "$(stats "$file" 's["allocator"]["allocations"] > 0')" = True ] || fail "no managed allocations"
  [ "$(stats "$file" 's["allocator"]["escaped_allocations"]')" = 0 ] || fail "allocations escaped"
  [ -z "$tracer" ] || [ "$(stats "$file" 's["tracer"]')" = "$tracer" ] ||
    fail "tracer is not $tracer in $file"
}

# Runs torch_hardening.py ARGS natively and under `umswap run --stats $RUN_ARGS`: it completes,
# its output (losses, weights) is identical, its allocations are managed; prints umswap's own lines.
same_as_native() {
  python3 "$script" "$@" >"$work/native.out" 2>"$work/native.err" || fail "native run exited $?"
  # shellcheck disable=SC2086  # RUN_ARGS: words for `umswap run`
  "$umswap" run --stats "$work/stats.json" ${RUN_ARGS:-} -- python3 "$script" "$@" \
    >"$work/run.out" 2>"$work/run.err" || fail "exited $?"
  grep -q '^done$' "$work/run.out" || fail "the run did not complete"
  diff "$work/native.out" "$work/run.out" || fail "losses or weights differ from the native run"
  check_managed "$work/stats.json"
  umswap_lines "$work/run.err"
}

case $case in
profiler)
  # From before the first CUDA call (umswap's tracer never starts), and from step 20 of 30 (the
  # tracer and the online advisor are running and must step aside).
  for from in 0 20; do
    args=(profiler --steps 30 --profile-from "$from")
    python3 "$script" "${args[@]}" >"$work/native.out" 2>"$work/native.err" ||
      fail "native run exited $?"
    native_events=$(sed -n 's/^profiler: \([0-9]*\) CUDA events$/\1/p' "$work/native.err")
    "$umswap" run --stats "$work/stats.json" -- python3 "$script" "${args[@]}" \
      >"$work/run.out" 2>"$work/run.err" || fail "exited $? (profiling from step $from)"
    diff "$work/native.out" "$work/run.out" || fail "losses differ from the native run"
    events=$(sed -n 's/^profiler: \([0-9]*\) CUDA events$/\1/p' "$work/run.err")
    [ -n "$events" ] && [ "$events" -gt 0 ] ||
      fail "the profiler recorded no CUDA events under umswap (natively $native_events)"
    lines=$(umswap_lines "$work/run.err")
    [ "$(printf '%s' "$lines" | grep -c .)" = 1 ] ||
      fail "expected exactly one umswap warning, got: $lines"
    printf '%s\n' "$lines" | grep -q 'the program \(uses CUPTI itself\|started a profiler\)' ||
      fail "the warning does not name the profiler as the cause: $lines"
    [ "$(stats "$work/stats.json" 's.get("tracer_yielded_to", "")')" != "" ] ||
      fail "the stats do not say the tracer yielded"
    # From step 0 the tracer may or may not have started before kineto's first CUPTI call (kineto
    # makes CUDA calls while it starts), so "tracer" can be either; the allocations are managed.
    check_managed "$work/stats.json"
    echo "profiling from step $from: $events CUDA events under umswap, $native_events natively;" \
      "losses identical; $lines"
  done
  ;;
cupti-missing)
  python3 "$cnn" --steps 5 >"$work/native.out" 2>"$work/native.err" || fail "native run exited $?"
  UMSWAP_CUPTI_LIBRARY=/nonexistent/libcupti.so \
    "$umswap" run --stats "$work/stats.json" -- python3 "$cnn" --steps 5 \
    >"$work/run.out" 2>"$work/run.err" || fail "exited $?"
  diff "$work/native.out" "$work/run.out" || fail "losses differ from the native run"
  lines=$(umswap_lines "$work/run.err")
  [ "$(printf '%s' "$lines" | grep -c .)" = 1 ] || fail "expected exactly one umswap warning, got: $lines"
  printf '%s\n' "$lines" | grep -q 'tracing is off: /nonexistent/libcupti.so cannot be loaded' ||
    fail "the warning does not name the library: $lines"
  check_managed "$work/stats.json" False
  echo "$lines"
  ;;
dataloader)
  python3 "$script" dataloader >"$work/native.out" 2>"$work/native.err" || fail "native run exited $?"
  native_child=$(sed -n 's/^child [0-9]* exit //p' "$work/native.out")
  for pattern in 'stats.%p.json' 'fixed.json'; do
    rm -f "$work"/*.json
    "$umswap" run --stats "$work/$pattern" -- python3 "$script" dataloader \
      >"$work/run.out" 2>"$work/run.err" || fail "exited $? (--stats $pattern)"
    grep -q '^done$' "$work/run.out" || fail "training did not complete"
    diff <(grep '^step' "$work/native.out") <(grep '^step' "$work/run.out") ||
      fail "losses differ from the native run"
    [ -z "$(umswap_lines "$work/run.err")" ] || fail "umswap warned: $(umswap_lines "$work/run.err")"
    parent=$(sed -n 's/^pid //p' "$work/run.out")
    # The child that exits normally must end as it does natively (umswap's exit code runs in it).
    child=$(sed -n 's/^child [0-9]* exit //p' "$work/run.out")
    [ "$child" = "$native_child" ] || fail "the forked child exited $child (natively $native_child)"
    written=$(cd "$work" && ls -- *.json)
    expected=${pattern//%p/$parent}
    [ "$written" = "$expected" ] || fail "stats files written: '$written' (expected only $expected)"
    [ "$(stats "$work/$expected" 's["pid"]')" = "$parent" ] || fail "stats pid is not the parent's"
    check_managed "$work/$expected"
    echo "--stats $pattern: only $expected, from pid $parent;" \
      "$(grep '^workers' "$work/run.out"); $(grep '^child' "$work/run.out")"
  done
  ;;
graph)
  # Without a budget and with one below the footprint (the advisor learns and evicts while the
  # graph is captured): the captured launches are no steps, nothing of umswap's joins the capture.
  same_as_native graph --steps 8
  echo "graph replays identical over $(grep -c '^step' "$work/run.out") steps"
  RUN_ARGS="--budget 2M" same_as_native graph --steps 8
  captured=$(stats "$work/stats.json" 's.get("captured_calls", 0)')
  [ "$captured" -gt 0 ] || fail "the stats count no captured calls"
  echo "graph with --budget 2M: identical over $(grep -c '^step' "$work/run.out") steps;" \
    "$captured captured calls were no steps"
  ;;
compile)
  # One Inductor cache for both runs: the run under umswap loads the kernels the native run
  # compiled and tuned (tuning by timing could pick a different reduction order otherwise); its
  # CUDA graphs are captured and replayed under umswap.
  export TORCHINDUCTOR_CACHE_DIR=$work/inductor
  same_as_native compile --steps 12
  echo "torch.compile(mode=reduce-overhead): identical over $(grep -c '^step' "$work/run.out") steps"
  ;;
async-alloc)
  export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
  RUN_ARGS="--budget 2M" same_as_native eager --steps 30
  blocks=$(stats "$work/stats.json" 's["allocator"]["allocations_by_api"]["cudaMallocAsync"]')
  slabs=$(stats "$work/stats.json" '(s["allocator"]["async_slabs"] or {}).get("slabs_created", 0)')
  [ "$blocks" -gt 0 ] && [ "$slabs" -gt 0 ] ||
    fail "no cudaMallocAsync blocks from slabs (blocks $blocks, slabs $slabs)"
  moved=$(stats "$work/stats.json" 's["advisor"]["prefetched_bytes"] + s["advisor"]["evicted_bytes"]')
  echo "eager, budget 2M: identical over 30 steps; $blocks allocations from $slabs slabs;" \
    "advisor $(stats "$work/stats.json" 's["advisor"]["state"]'), $moved bytes moved;" \
    "dead data dropped per iteration" \
    "$(stats "$work/stats.json" 's["advisor"].get("plan", {}).get("bytes_dropped_per_iteration")')," \
    "discarded $(stats "$work/stats.json" 's["allocator"]["async_slabs"]["discarded_bytes"]')" \
    "populated $(stats "$work/stats.json" 's["allocator"]["async_slabs"]["populated_bytes"]')"
  discarded=$(stats "$work/stats.json" 's["allocator"]["async_slabs"]["discarded_bytes"]')
  [ "$discarded" -gt 0 ] || fail "the plan dropped no dead data (UMSWAP_LIFETIMES=1): nothing discarded"
  same_as_native graph --steps 8
  echo "graph under backend:cudaMallocAsync: identical over $(grep -c '^step' "$work/run.out") steps"
  ;;
default-alloc)
  unset PYTORCH_CUDA_ALLOC_CONF
  RUN_ARGS="--budget 2M" same_as_native eager --steps 30
  state=$(stats "$work/stats.json" 's["torch_blocks"]["state"]')
  drops=$(stats "$work/stats.json" 's["torch_blocks"]["drops"]')
  discarded=$(stats "$work/stats.json" 's["torch_blocks"]["discarded_bytes"]')
  echo "eager, budget 2M, default allocator: identical over 30 steps; blocks $state, drops" \
    "$drops, $discarded bytes discarded," \
    "$(stats "$work/stats.json" 's["torch_blocks"]["populated_bytes"]') populated; dead data" \
    "dropped per iteration" \
    "$(stats "$work/stats.json" 's["advisor"].get("plan", {}).get("bytes_dropped_per_iteration")')"
  [ "$state" = checked ] || fail "PyTorch's blocks not followed: $state"
  [ "$drops" = on ] || fail "the drops are not on: $drops"
  [ "$discarded" -gt 0 ] || fail "no dead page discarded"
  RUN_ARGS="--budget 2M" same_as_native graph --steps 8
  echo "graph under the default allocator, budget 2M: identical over" \
    "$(grep -c '^step' "$work/run.out") steps"
  ;;
evict-copy)
  python3 -c 'import transformers' 2>/dev/null || { echo "skip: no transformers"; exit 77; }
  check=$here/../../scripts/evict_copy_check.py
  gpt2=$here/../../samples/pytorch/gpt2.py
  python3 "$check" --umswap "$umswap" --limit "$UMSWAP_MANAGED_LIMIT" --budget 50% \
    --variants copy,keep,off --tolerance 0 --timeout 240 \
    --out "$work/ecc" --json "$work/ecc.json" \
    -- "$gpt2" --layers 4 --width 256 --heads 4 --batch 8 --seq 256 --steps 24 --deterministic \
    >"$work/ecc.out" 2>&1 || { cat "$work/ecc.out"; fail "a run differs from native or failed"; }
  grep -E '^(native|budget|copy1|keep1|off1)|copy_check|copy path' "$work/ecc.out"
  python3 - "$work/ecc.json" <<'PY' || fail "the copies did not run, or a step met a page in flight"
import json, sys
r = json.load(open(sys.argv[1]))
for run in r["runs"]:
    check = run["copy_check"] or {}
    if run["weights"] != "same":
        sys.exit(f"{run['name']}: final weights {run['weights']}")
    if run["variant"] in ("copy", "keep") and not check.get("copies"):
        sys.exit(f"{run['name']}: no copies (the plan evicted nothing by copy)")
    if check.get("harmful"):
        sys.exit(f"{run['name']}: copy_check found {check['harmful']} harmful clashes")
PY
  ;;
*)
  echo "usage: torch_hardening.sh UMSWAP profiler|cupti-missing|dataloader|graph|compile|async-alloc|default-alloc|evict-copy" >&2
  exit 2
  ;;
esac
