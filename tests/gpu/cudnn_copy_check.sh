#!/bin/bash
# UMSWAP_EVICT_COPY=1 (opt-in since 2026-11-28, set here) on the bundled cuDNN trainer (samples/cudnn_vgg16: cudaMalloc buffers, a
# cudaDeviceSynchronize and a copy of the loss to pageable memory every iteration): natively,
# then under `umswap run --budget` at about half its footprint, and under `umswap replay` of a
# trace recorded first, both with copies by umswap's copy kernel (copy engines only when it does
# not load: here it must load). Each must end in time (a hang fails the test instead of blocking
# it), print the native checksum, have copied, lose nothing, and have no step on a discarded page.
# Two hangs it covers (docs/advisor.md, "A hang with the cuDNN sample"), both on an H200:
#  - online (2026-11-26 02:35): the advisor thread blocked for good inside cuMemPrefetchAsync;
#    avoided since by a stream write after each of the advisor's event waits (always on;
#    docs/advisor.md "Closing the advisor's calls"), so this test runs with the defaults (a host
#    gate, since removed, was its earlier work-around);
#  - replay (12:21): a kernel's first launch loaded its module lazily, which waited for the GPU,
#    while the GPU waited for the advisor thread, itself behind the load in the driver; fixed by
#    waiting for the advisor before a function's first use (tracer_callback.cpp,
#    before_first_use()).
# usage: cudnn_copy_check.sh UMSWAP CUDNN_VGG16
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $(basename "$0") UMSWAP SAMPLE" >&2
  exit 2
fi
umswap=$1
sample=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args="--batch 16 --steps 8"
"$sample" $args >"$work/native.out"
native=$(grep '^checksum' "$work/native.out")
if ! timeout -s KILL 120 "$umswap" record -o "$work/trace.umtrace" --budget 1200M -- \
    "$sample" $args >"$work/record.out" 2>&1; then
  echo "FAIL: recording the trace failed or hung; its last lines:"
  tail -n 20 "$work/record.out"
  exit 1
fi
status=0
path=kernel  # what the stats must say made the copies
for run in online replay; do
  command=(run)
  if [ "$run" = replay ]; then
    command=(replay "$work/trace.umtrace")
  fi
  if ! UMSWAP_EVICT_COPY=1 UMSWAP_VERBOSE=2 UMSWAP_DEBUG=hang-stacks \
      timeout -s KILL 120 "$umswap" "${command[@]}" --budget 1200M --stats "$work/$run.json" -- \
      "$sample" $args >"$work/$run.out" 2>"$work/$run.err"; then
    echo "FAIL: $run: the run failed or hung (killed after 120 s); its last lines:"
    tail -n 5 "$work/$run.out"
    grep -v "^umswap:   UMSWAP_" "$work/$run.err" | grep -v "^\[umswap\]" | tail -n 60
    status=1
    continue
  fi
  got=$(grep '^checksum' "$work/$run.out" || true)
  [ "$got" = "$native" ] || { echo "FAIL: $run: $got, native $native"; status=1; }
  python3 - "$work/$run.json" "$run" "$path" <<'PY' || status=1
import json, sys
s = json.load(open(sys.argv[1]))
a = s.get("advisor", {})
c = a.get("evict_copy") or {}
print(f"{sys.argv[2]}: copied out {c.get('copied_out_bytes')} bytes, path {c.get('path')}, "
      f"off: {c.get('off_reason')}; lost {c.get('lost_bytes')} bytes; copy_check "
      f"{s.get('copy_check', {}).get('harmful')} harmful; "
      f"kernel layouts {s.get('kernel_layouts')}")
ok = (c.get("copied_out_bytes", 0) > 0 and c.get("path") == sys.argv[3]
      and c.get("lost_bytes") == 0 and (s.get("copy_check") or {}).get("harmful") == 0)
sys.exit(0 if ok else 1)
PY
done
exit $status
