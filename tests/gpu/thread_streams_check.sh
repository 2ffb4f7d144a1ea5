#!/bin/bash
# Launches from 4 host threads on 4 streams, recorded with `umswap record`: the program's output
# is the same as natively, and every thread's launches are in the trace (thread_streams_check).
# usage: thread_streams_check.sh UMSWAP THREAD_STREAMS THREAD_STREAMS_CHECK
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $(basename "$0") UMSWAP PROBE CHECK" >&2
  exit 2
fi
umswap=$1 probe=$2 check=$3
launches=50
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$probe" "$launches" >"$work/native"
"$umswap" record -o "$work/threads.umtrace" -- "$probe" "$launches" >"$work/recorded"
diff "$work/native" "$work/recorded" || { echo "FAIL: output differs under umswap record"; exit 1; }
UMSWAP_TEST_TRACE="$work/threads.umtrace" UMSWAP_TEST_LAUNCHES=$launches "$check"
"$umswap" report "$work/threads.umtrace" | head -n 30
