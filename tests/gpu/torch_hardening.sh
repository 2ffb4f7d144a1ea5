#!/bin/bash
# umswap under conditions a real training job meets (torch_hardening.py has the programs):
#   profiler       torch.profiler holds CUPTI: the program runs on plain managed memory, umswap
#                  prints exactly one warning naming the cause, training completes
#   cupti-missing  UMSWAP_CUPTI_LIBRARY=/nonexistent: one warning naming the path, the losses are
#                  bit-identical to the native run's
#   dataloader     DataLoader with 2 forked workers (and one more forked child that exits
#                  normally) under `umswap run --stats`: only the parent writes a stats file
#   graph          a CUDA graph captured and replayed: losses and weights bit-identical to native
# usage: torch_hardening.sh UMSWAP CASE       (exit 77: no PyTorch with CUDA here)
# UMSWAP_MANAGED_LIMIT comes from CTest (tests/gpu/CMakeLists.txt); it is passed through.
set -uo pipefail
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

case $case in
profiler)
  "$umswap" run --stats "$work/stats.json" -- python3 "$script" profiler \
    >"$work/run.out" 2>"$work/run.err" || fail "exited $?"
  grep -q '^done$' "$work/run.out" || fail "training did not complete"
  lines=$(umswap_lines "$work/run.err")
  [ "$(printf '%s' "$lines" | grep -c .)" = 1 ] || fail "expected exactly one umswap warning, got: $lines"
  printf '%s\n' "$lines" | grep -q 'another CUPTI subscriber (a profiler such as torch.profiler' ||
    fail "the warning does not name the profiler as the cause: $lines"
  check_managed "$work/stats.json" False
  echo "$lines"
  grep '^profiler:' "$work/run.out"
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
  python3 "$script" graph >"$work/native.out" 2>"$work/native.err" || fail "native run exited $?"
  "$umswap" run --stats "$work/stats.json" -- python3 "$script" graph \
    >"$work/run.out" 2>"$work/run.err" || fail "exited $?"
  grep -q '^done$' "$work/run.out" || fail "replays did not complete"
  diff "$work/native.out" "$work/run.out" || fail "losses or weights differ from the native run"
  check_managed "$work/stats.json"
  umswap_lines "$work/run.err"
  echo "graph replays identical over $(grep -c '^step' "$work/run.out") steps"
  ;;
*)
  echo "usage: torch_hardening.sh UMSWAP profiler|cupti-missing|dataloader|graph" >&2
  exit 2
  ;;
esac
