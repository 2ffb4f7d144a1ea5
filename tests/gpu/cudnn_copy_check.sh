#!/bin/bash
# UMSWAP_EVICT_COPY on the bundled cuDNN trainer (samples/cudnn_vgg16: cudaMalloc buffers, a
# cudaDeviceSynchronize and a copy of the loss to pageable memory every iteration): natively,
# then under `umswap run --budget` at about half its footprint with copies by copy engine and by
# umswap's copy kernel, with UMSWAP_MANAGED_OPS_CAP=8. Each must end in time (a hang fails the
# test instead of blocking it), print the native checksum, and have copied.
# Without the cap both runs hung on an H200 (2026-11-26): the advisor thread was blocked inside
# cuMemPrefetchAsync, which the driver holds once about 57 managed-memory calls wait on the GPU
# (docs/advisor.md, "A hang with the cuDNN sample"); with the cap hard-coded to 8 this test
# passed there (03:21 UTC).
# usage: cudnn_copy_check.sh UMSWAP CUDNN_VGG16
set -euo pipefail
umswap=$1
sample=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args="--batch 16 --steps 8"
"$sample" $args >"$work/native.out"
native=$(grep '^checksum' "$work/native.out")
status=0
for path in engine kernel; do
  if ! UMSWAP_EVICT_COPY=1 UMSWAP_EVICT_COPY_PATH=$path UMSWAP_MANAGED_OPS_CAP=8 \
      UMSWAP_VERBOSE=2 UMSWAP_HANG_STACKS=1 timeout -s KILL 120 \
      "$umswap" run --budget 1200M --stats "$work/$path.json" -- "$sample" $args \
      >"$work/$path.out" 2>"$work/$path.err"; then
    echo "FAIL: $path: the run failed or hung (killed after 120 s); its last lines:"
    tail -n 5 "$work/$path.out"
    grep -v "^umswap:   UMSWAP_" "$work/$path.err" | grep -v "^\[umswap\]" | tail -n 60
    status=1
    continue
  fi
  got=$(grep '^checksum' "$work/$path.out" || true)
  [ "$got" = "$native" ] || { echo "FAIL: $path: $got, native $native"; status=1; }
  python3 - "$work/$path.json" "$path" <<'PY' || status=1
import json, sys
s = json.load(open(sys.argv[1]))
c = s.get("advisor", {}).get("evict_copy") or {}
a = s.get("advisor", {})
print(f"{sys.argv[2]}: copied out {c.get('copied_out_bytes')} bytes, path {c.get('path')}, "
      f"off: {c.get('off_reason')}; copy_check {s.get('copy_check', {}).get('harmful')} harmful; "
      f"waits before blocking calls {a.get('blocking_waits')} "
      f"(timed out {a.get('blocking_timeouts')}); at most {a.get('managed_ops_most_waiting')} "
      f"prefetches and discards waiting, {a.get('managed_ops_throttled')} waits for the GPU")
ok = (c.get("copied_out_bytes", 0) > 0 and c.get("path") == sys.argv[2]
      and (s.get("copy_check") or {}).get("harmful") == 0)
sys.exit(0 if ok else 1)
PY
done
exit $status
