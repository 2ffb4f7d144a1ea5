#!/bin/bash
# The invariant "an access the plan did not foresee costs time, never correctness", on a kernel
# that reads, and one that writes, buffers the plan keeps off the GPU only through a pointer table
# in device memory (advisor_loop --table: filled once by a copy from the host, or by a kernel).
# For each table: natively, then under `umswap run --budget 1G` (a third of the footprint) with
# every default: the same checksum as natively (the default evicts through the driver, which
# keeps managed memory coherent whatever a kernel reaches). Then `umswap run --verify` (the fast
# copy path, whose discards such a kernel defeats) must exit 3 and name table_read: the copy path
# is unsafe for this program, and --verify says so.
# usage: unseen_access_check.sh UMSWAP ADVISOR_LOOP
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
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
args="--buffers 24 --mib 128 --iterations 16"
status=0
for table in host device; do
  "$loop" $args --table $table > "$work/native-$table.out"
  native=$(grep '^checksum' "$work/native-$table.out")
  if ! timeout -s KILL 150 "$umswap" run --no-cache --budget 1G --stats "$work/default-$table.json" -- \
      "$loop" $args --table $table > "$work/default-$table.out" 2> "$work/default-$table.err"; then
    echo "FAIL: $table: the run under umswap failed or hung"; tail -n 20 "$work/default-$table.err"
    status=1
    continue
  fi
  got=$(grep '^checksum' "$work/default-$table.out" || true)
  if [ "$got" = "$native" ]; then
    echo "$table table, defaults: $got, as natively"
  else
    echo "FAIL: $table table, defaults: $got, natively $native"
    status=1
  fi
  set +e
  timeout -s KILL 150 "$umswap" run --verify --budget 1G -- "$loop" $args --table $table \
    > "$work/verify-$table.out" 2> "$work/verify-$table.err"
  rc=$?
  set -e
  if [ $rc -eq 3 ] && grep -q "FAILED: .* GPU page faults" "$work/verify-$table.err" &&
      grep -q "table_read" "$work/verify-$table.err"; then
    echo "$table table, --verify: exit 3, $(grep -m1 'FAILED' "$work/verify-$table.err" | cut -c1-90)"
  else
    echo "FAIL: $table table, --verify: exit $rc, expected 3 naming table_read; its report:"
    grep "umswap: verify" "$work/verify-$table.err" | head -n 8
    status=1
  fi
done
exit $status
