#!/bin/bash
# compute-sanitizer's memcheck on the bundled samples under umswap: cudnn_vgg16 and mlp_train, each
# under `umswap run` online with a budget below its footprint, and in managed mode. Checks:
# memcheck reports 0 errors and exits 0, and the sample's checksum equals the one of a native run
# without the sanitizer. compute-sanitizer holds CUPTI, so in online mode umswap's tracer (and with
# it the advisor) stays off, with exactly one warning naming the sanitizer: what memcheck checks is
# every kernel running on umswap's managed allocations (measured on an H200, 2026-11-22).
# usage: sanitizer_check.sh UMSWAP CUDNN_VGG16 MLP_TRAIN   (exit 77: no compute-sanitizer or GPU)
# UMSWAP_MANAGED_LIMIT must be set by the caller.
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $(basename "$0") UMSWAP VGG MLP" >&2
  exit 2
fi
umswap=$1 vgg=$2 mlp=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -n "${UMSWAP_MANAGED_LIMIT:-}" ] || { echo "sanitizer_check.sh: set UMSWAP_MANAGED_LIMIT" >&2; exit 2; }
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[ -x "$sanitizer" ] || { echo "skip: no compute-sanitizer"; exit 77; }
nvidia-smi -L >/dev/null 2>&1 || { echo "skip: no GPU"; exit 77; }
checksum() { sed -n 's/.*checksum \([0-9a-f]\{16\}\).*/\1/p' "$1" | tail -1; }
failed=0
check() {  # NAME BUDGET SAMPLE ARGS...
  local name=$1 budget=$2
  shift 2
  "$umswap" run --mode passthrough -- "$@" >"$work/$name.native" 2>&1 ||
    { echo "FAIL $name: native run exited $?"; failed=1; return; }
  local want
  want=$(checksum "$work/$name.native")
  for mode in online managed; do
    local out=$work/$name.$mode
    # --quiet: the lines counted below are warnings (no plan notice, no summary at the end).
    local opts=(--quiet --mode "$mode")
    [ "$mode" = online ] && opts+=(--budget "$budget")
    local start=$SECONDS
    "$sanitizer" --tool memcheck --error-exitcode 9 --target-processes all --print-limit 20 \
      "$umswap" run "${opts[@]}" -- "$@" >"$out" 2>&1
    local rc=$?
    local summary
    summary=$(grep -o 'ERROR SUMMARY: [0-9]* error[s]*' "$out" | tail -1)
    local got
    got=$(checksum "$out")
    local said expected=0
    said=$(grep -c '^umswap: ' "$out")
    if [ "$mode" = online ]; then
      expected=1
      grep -q '^umswap: warning: tracing is off: another CUPTI subscriber.*compute-sanitizer' "$out" ||
        expected=-1
    fi
    if [ $rc = 0 ] && [ "$summary" = "ERROR SUMMARY: 0 errors" ] && [ -n "$want" ] &&
      [ "$got" = "$want" ] && [ "$said" = "$expected" ]; then
      echo "ok   $name $mode: $summary, checksum $got = native, $((SECONDS - start)) s," \
        "$(grep -c 'ERROR SUMMARY' "$out") processes checked"
      grep '^umswap: ' "$out" | sed 's/^/     /'
    else
      echo "FAIL $name $mode: exit $rc, '${summary:-no summary}', checksum '$got' (native '$want')," \
        "$said umswap lines (expected $expected: online, one naming compute-sanitizer)"
      grep -E '^(=========|umswap:)' "$out" | head -30
      failed=1
    fi
  done
}
check cudnn_vgg16 256M "$vgg" --batch 4 --image 64 --steps 4
check mlp_train 16M "$mlp" --batch 256 --hidden 1024 --steps 6
exit $failed
