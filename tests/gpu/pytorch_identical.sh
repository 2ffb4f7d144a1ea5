#!/bin/bash
# A small PyTorch training loop gives bit-identical losses natively and under `umswap run`, and
# the managed limit turns into torch.OutOfMemoryError that the program catches and survives.
# usage: pytorch_identical.sh UMSWAP SMALL_CNN_PY        (exit 77: no PyTorch with CUDA here)
# bash only (pipefail): run with `sh`, the script starts itself again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $(basename "$0") UMSWAP SCRIPT" >&2
  exit 2
fi
umswap=$1
script=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$script" --steps 5 >"$work/native"
rc=$?
[ $rc -eq 77 ] && { cat "$work/native"; exit 77; }
[ $rc -eq 0 ] || { echo "FAIL: native run exited $rc"; exit 1; }
"$umswap" run --stats "$work/stats.json" -- python3 "$script" --steps 5 >"$work/umswap" ||
  { echo "FAIL: umswap run exited $?"; exit 1; }
diff "$work/native" "$work/umswap" || { echo "FAIL: losses differ"; exit 1; }
echo "losses identical over $(grep -c '^step' "$work/native") steps"
python3 - "$work/stats.json" <<'PY' || exit 1
import json, sys
s = json.load(open(sys.argv[1]))["allocator"]
print(f"allocations {s['allocations']} {s['allocations_by_api']}, escaped {s['escaped_allocations']}, "
      f"vmm {s['unmanaged_vmm_allocations']}")
sys.exit(0 if s["allocations"] > 0 and s["escaped_allocations"] == 0
         and s["unmanaged_vmm_allocations"] == 0 else 1)
PY
# Cap of 2 GiB, then a 3 GiB tensor: PyTorch must raise its own OutOfMemoryError.
"$umswap" run --limit 2G -- python3 "$script" --steps 2 --oom-check 3221225472 >"$work/oom" 2>&1
rc=$?
cat "$work/oom" | grep -E 'oom|after-oom|umswap' || true
[ $rc -eq 0 ] && grep -q 'oom caught: OutOfMemoryError' "$work/oom" && grep -q '^after-oom' "$work/oom" ||
  { echo "FAIL: cap did not turn into a caught torch.OutOfMemoryError (exit $rc)"; cat "$work/oom"; exit 1; }
echo "cap -> torch.OutOfMemoryError caught, training continued"
