#!/bin/bash
# The detected period of a PyTorch training loop equals the number of launches per iteration
# counted independently: the same script is recorded twice, once with automatic detection and
# once with an NVTX mark at each iteration start (`umswap record --marker`), and the period must
# equal the median number of steps between marks.
# usage: period_vs_marks.sh UMSWAP SCRIPT [script args...]     (exit 77: no PyTorch/GPU)
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $(basename "$0") UMSWAP SCRIPT" >&2
  exit 2
fi
umswap=$1 script=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 77)' 2>/dev/null || exit 77
"$umswap" record -o "$work/period.umtrace" -- python3 "$script" "$@" >"$work/period.log" 2>&1 ||
  { cat "$work/period.log"; exit 1; }
"$umswap" record --marker umswap_iter -o "$work/marks.umtrace" -- python3 "$script" "$@" \
  --nvtx-mark umswap_iter >"$work/marks.log" 2>&1 || { cat "$work/marks.log"; exit 1; }
"$umswap" report "$work/period.umtrace" >"$work/period.txt"
"$umswap" report "$work/marks.umtrace" >"$work/marks.txt"
period=$(sed -n 's/^  period *\([0-9]*\) steps.*/\1/p' "$work/period.txt" | head -1)
marked=$(sed -n 's/^  steps\/iteration *\(min [0-9]*, median \)\{0,1\}\([0-9]*\).*/\2/p' "$work/marks.txt" | head -1)
source=$(sed -n 's/^  found .*(source: \(.*\))/\1/p' "$work/marks.txt" | head -1)
echo "$(basename "$script") $*: detected period $period; between NVTX marks ($source): median $marked steps"
[ -n "$period" ] && [ "$period" = "$marked" ] && [ "$source" = "nvtx:umswap_iter" ]
