#!/bin/bash
# Records trace_probe under `umswap record`, checks the trace (trace_check), and runs `umswap
# report` and `umswap timeline` on it. usage: trace_probe_check.sh UMSWAP TRACE_PROBE TRACE_CHECK
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $(basename "$0") UMSWAP PROBE CHECK" >&2
  exit 2
fi
umswap=$1 probe=$2 check=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# UMSWAP_LEARN_EVICT=0: the learning advisor would prefetch each launch's new blocks, and the
# check wants the cold iteration's first touches to fault (the tracer counts the faults).
UMSWAP_LEARN_EVICT=0 "$umswap" record -o "$work/probe.umtrace" -- "$probe" 12
UMSWAP_TEST_TRACE="$work/probe.umtrace" "$check"
"$umswap" report "$work/probe.umtrace"
"$umswap" timeline "$work/probe.umtrace" -o "$work/probe.json"
python3 -c "import json,sys; t=json.load(open(sys.argv[1])); e=t['traceEvents']; print('timeline events', len(e)); sys.exit(0 if any(x.get('ph')=='X' for x in e) else 1)" "$work/probe.json"
