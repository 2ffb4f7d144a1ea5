#!/bin/bash
# The bundled sample gives bit-identical results natively and under `umswap run`, for both the
# static-cudart and the shared-cudart build, and every allocation it makes is umswap's.
# usage: sample_identical.sh UMSWAP MLP_TRAIN_STATIC MLP_TRAIN_SHARED
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $(basename "$0") UMSWAP" >&2
  exit 2
fi
umswap=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for sample in "$@"; do
  name=$(basename "$sample")
  "$sample" --steps 30 >"$work/$name.native"
  "$umswap" run --stats "$work/$name.stats.json" -- "$sample" --steps 30 >"$work/$name.umswap"
  if ! diff "$work/$name.native" "$work/$name.umswap"; then
    echo "FAIL: $name differs between native and umswap run"
    status=1
  fi
  grep -q '^result OK' "$work/$name.umswap" || { echo "FAIL: $name did not report OK"; status=1; }
  python3 - "$work/$name.stats.json" "$name" <<'PY' || status=1
import json, sys
s = json.load(open(sys.argv[1]))["allocator"]
name = sys.argv[2]
print(f"{name}: {s['allocations']} allocations {s['allocations_by_api']}, "
      f"peak {s['managed_bytes_peak']} bytes, escaped {s['escaped_allocations']}")
ok = s["allocations"] > 0 and s["escaped_allocations"] == 0 \
     and s["allocations_by_api"]["cudaMallocAsync"] + s["allocations_by_api"]["cuMemAllocAsync"] > 0
sys.exit(0 if ok else 1)
PY
  echo "$name: $(grep -c '^step' "$work/$name.native") steps identical, $(grep checksum "$work/$name.native")"
done
exit $status
