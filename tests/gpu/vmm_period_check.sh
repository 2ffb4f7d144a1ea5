#!/bin/bash
# Engine vmm moving a training-like loop (issue 38): advisor_loop over 24 x 128 MiB (3 GiB) under
# `umswap run --engine vmm --budget 1G` (a third of its footprint) gives the period checksum of a
# native run over 24 x 8 MiB (advisor_loop --period-checksum: every buffer is its first 4 KiB over
# and over, whatever its size), and every word agrees with its period. The native runs at both
# sizes must agree too (the property the check rests on). From the stats: ranges moved both ways,
# the GPU chunks' peak within the budget, and ranges nothing had written yet (each buffer between
# its allocation and its memset) moved with no copy.
# The same check, at 24 x 7,680 MiB (1.28x an H200) with no budget, is docs/BENCHMARKS.md's
# "real oversubscription" (not run here: 52 GiB of host chunks).
# usage: vmm_period_check.sh UMSWAP ADVISOR_LOOP
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $(basename "$0") UMSWAP ADVISOR_LOOP" >&2
  exit 2
fi
umswap=$1
loop=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$loop" --buffers 24 --mib 8 --iterations 4 --period-checksum >"$work/small.out"
"$loop" --buffers 24 --mib 128 --iterations 4 --period-checksum >"$work/native.out"
timeout -s KILL 300 "$umswap" run --engine vmm --budget 1G --stats "$work/vmm.json" -- \
  "$loop" --buffers 24 --mib 128 --iterations 4 --period-checksum >"$work/vmm.out"
status=0
sum() { grep '^period_checksum ' "$1" | cut -d' ' -f2; }
bad() { grep '^period_mismatches ' "$1" | cut -d' ' -f2; }
for f in small native vmm; do
  [ -n "$(sum "$work/$f.out")" ] || { echo "FAIL: $f: no period checksum"; status=1; }
  [ "$(bad "$work/$f.out")" = 0 ] || { echo "FAIL: $f: $(bad "$work/$f.out") words unlike their period"; status=1; }
done
[ "$(sum "$work/small.out")" = "$(sum "$work/native.out")" ] ||
  { echo "FAIL: the native period checksums differ between 8 and 128 MiB"; status=1; }
[ "$(sum "$work/vmm.out")" = "$(sum "$work/native.out")" ] ||
  { echo "FAIL: engine vmm's period checksum is not native's"; status=1; }
python3 - "$work/vmm.json" <<'PY' || status=1
import json, sys
v = json.load(open(sys.argv[1]))['vmm']
ok = True
def check(cond, what):
    global ok
    if not cond:
        print('FAIL:', what, {k: v.get(k) for k in ('bytes_to_gpu', 'bytes_to_host', 'gpu_bytes_peak', 'budget_bytes', 'bytes_not_copied', 'ranges_unwritten', 'move_failures')})
        ok = False
check(v['bytes_to_gpu'] > 0 and v['bytes_to_host'] > 0, 'ranges moved both ways')
check(v['gpu_bytes_peak'] <= v['budget_bytes'], 'GPU chunks within the budget')
check(v['bytes_not_copied'] > 0 and v['ranges_unwritten'] > 0, 'unwritten ranges moved with no copy')
check(v['move_failures'] == 0, 'no move failed')
sys.exit(0 if ok else 1)
PY
[ "$status" = 0 ] && echo "ok: period checksum $(sum "$work/vmm.out") natively at 8 and 128 MiB and under engine vmm at 1G"
exit "$status"
