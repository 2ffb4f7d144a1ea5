#!/usr/bin/env python3
"""Check UMSWAP_EVICT_COPY's results against native, iteration by iteration, in one invocation.

Runs a training script that prints `iter <i> ms <t> loss <x>` lines (samples/pytorch/*.py)
natively, then under `umswap run --budget B` once per variant and round:

  copy    UMSWAP_EVICT_COPY=1: evictions copied to pinned host memory by umswap's copy kernel
          (copy engines when it does not load), GPU pages discarded;
  keep    UMSWAP_EVICT_COPY=1 UMSWAP_DEBUG=keep-pages: the same copies out and back, GPU pages
          kept (a diagnostic);
  off     UMSWAP_EVICT_COPY=0: the driver path (evictions by cudaMemPrefetchAsync), same budget;
  native  the script again without umswap: how far native runs differ from each other.

A training run whose kernels are not deterministic (atomics in a backward pass) drifts from
another run of itself, and a drifting run can spike in an iteration another run does not: a
`native` variant shows that spread. With deterministic kernels (gpt2.py --deterministic) every
run must match native exactly, and the summary's checksum (the weights after the last
step) is compared too.

A wrong loss under `copy` that `keep` does not show points at a read of a discarded range (an
access neither the guard nor the plan knows); one that `keep` shows too points at a copy back
that overwrote newer bytes (docs/advisor.md, "Evictions umswap copies").

For each run it prints every iteration's loss beside native's, the worst difference and its
iteration, GPU faults per iteration, the stats' copy_check (steps on a page while it was
discarded or coming back, from CUPTI's times) and what the guard caught.

    python3 scripts/evict_copy_check.py --limit 60G --budget 29% -- \\
        samples/pytorch/gpt2.py --batch 16 --seq 1024 --precision bf16 --steps 20

--budget: a size (13.86G) or a share of native peak allocated memory (29%).
--limit is UMSWAP_MANAGED_LIMIT for every umswap run (required: on a shared GPU it must stay
below the card's free memory). PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync is set unless
the environment sets it. Exit: 0 every run matched native within --tolerance, 1 one did not or
failed, 2 bad arguments.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ITER = re.compile(r"^iter (\d+) ms ([0-9.]+) loss ([-0-9.einfa]+)", re.M)
VARIANTS = {
    "copy": {"UMSWAP_EVICT_COPY": "1"},
    "keep": {"UMSWAP_EVICT_COPY": "1", "UMSWAP_DEBUG": "keep-pages"},
    "off": {"UMSWAP_EVICT_COPY": "0"},
    "native": None,
}


def parse_iterations(text):
    """{iteration: (ms, loss)} from a training script's output."""
    return {int(m.group(1)): (float(m.group(2)), float(m.group(3))) for m in ITER.finditer(text)}


def parse_summary(text):
    for line in text.splitlines():
        if line.startswith("summary "):
            try:
                return json.loads(line[len("summary "):])
            except json.JSONDecodeError:
                return None
    return None


def budget_bytes(spec, native_peak):
    """A size with a unit (K, M, G, T; powers of 1024) or a share of native_peak ("29%")."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT%]?)\s*", spec)
    if not m:
        raise ValueError(f"--budget {spec!r} is not a size (13.86G) or a share (29%)")
    value, unit = float(m.group(1)), m.group(2)
    if value <= 0:
        raise ValueError(f"--budget {spec!r} is not above 0 (0 would mean the GPU's memory)")
    if unit == "%":
        if native_peak is None:
            raise ValueError("--budget as a share needs the native run's peak_allocated_bytes")
        return int(native_peak * value / 100)
    return int(value * (1 << (10 * " KMGT".index(unit or " "))))


def worst_difference(native, other):
    """(iteration, difference) of the largest |loss - native loss| over the iterations both
    printed; (None, None) when they share none. A NaN loss counts as infinitely far."""
    worst = (None, None)
    for i in sorted(set(native) & set(other)):
        a, b = native[i][1], other[i][1]
        d = abs(a - b) if a == a and b == b else float("inf")
        if worst[1] is None or d > worst[1]:
            worst = (i, d)
    return worst


def checksum_verdict(native_summary, summary):
    """"same" or "DIFFER" when both summaries carry a checksum (the final weights), else None."""
    a, b = native_summary.get("checksum"), summary.get("checksum")
    if a is None or b is None:
        return None
    return "same" if a == b else "DIFFER"


def describe_stats(path):
    """Lines about a stats file: faults per iteration, copy_check, the guard."""
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        return [f"  stats: not read ({e})"], None
    lines = []
    its = s.get("iterations", [])
    lines.append("  faults per iteration: " + " ".join(str(i.get("gpu_page_faults")) for i in its))
    if any("copy_out_busy_ms" in i for i in its):
        # The link busy with umswap's copies (CUPTI's times): out/in/both ways at once, ms.
        lines.append("  copies busy per iteration, out/in/both ms of wall: " + " ".join(
            f"{i.get('copy_out_busy_ms', 0):.0f}/{i.get('copy_in_busy_ms', 0):.0f}/"
            f"{i.get('copy_both_busy_ms', 0):.0f} of {i.get('wall_ms', 0):.0f}" for i in its))
    check = s.get("copy_check")
    if check:
        lines.append(f"  copy_check: {check.get('harmful')} harmful of {check.get('clashes')} clashes, "
                     f"{check.get('pages_checked')} page spans, {check.get('copies')} copies")
        for c in check.get("first", [])[:8]:
            lines.append(f"    step {c.get('step')} {c.get('kernel')} page {c.get('page')} "
                         f"{c.get('kind')} +{c.get('ns_into_span')} ns")
        idle = check.get("idle") or {}
        if idle.get("gaps"):
            # The longest stretches with no copy either way in one steady iteration.
            lines.append(f"  no copy either way, iteration {idle.get('iteration')} (at ms: "
                         f"length ms, steps busy ms, first kernel):")
            for g in idle["gaps"][:8]:
                lines.append(f"    {g.get('at_ms', 0):.1f}: {g.get('ms', 0):.1f}, "
                             f"{g.get('steps_busy_ms', 0):.1f}, {(g.get('kernel') or '-')[:70]}")
    else:
        lines.append("  copy_check: none in the stats (no copies with CUPTI records)")
    adv = s.get("advisor", {})
    if adv.get("opaque_calls"):
        lines.append(f"  graph launches, host functions or stream callbacks: {adv.get('opaque_calls')} "
                     f"(first: {adv.get('first_opaque_call')})")
    ec = adv.get("evict_copy", {})
    if ec:
        lines.append(f"  guard hits {ec.get('guard_hits')}, rescued {ec.get('rescued_bytes')} bytes, "
                     f"stops {ec.get('rescues')}, off: {ec.get('off_reason') or '-'}")
        for k in ec.get("guard_kernels", [])[:8]:
            lines.append(f"    caught {k}")
        if "path" in ec:
            off = f" (kernel off: {ec['kernel_off']})" if ec.get("kernel_off") else ""
            lines.append(f"  copy path {ec['path']}: {ec.get('kernel_copies')} kernel copies, "
                         f"{ec.get('engine_copies')} copy-engine copies{off}")
    return lines, check


def run(cmd, env, log_path):
    start = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(log_path, "w") as f:
        f.write(p.stdout)
    return p.returncode, p.stdout, time.time() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--umswap", default=os.path.join(HERE, "..", "build", "bin", "umswap"))
    ap.add_argument("--limit", required=True, help="UMSWAP_MANAGED_LIMIT for every umswap run")
    ap.add_argument("--budget", required=True, help="a size (13.86G) or a share of native peak (29%%)")
    ap.add_argument("--variants", default="copy,keep",
                    help="comma-separated, of copy, keep, off, native (default copy,keep)")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each variant (default 1)")
    ap.add_argument("--tolerance", type=float, default=0.05,
                    help="largest |loss - native| a run may show (default 0.05)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run (default 300)")
    ap.add_argument("--out", help="directory for the outputs and stats (default: a new temporary one)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- script.py args...")
    a = ap.parse_args()
    command = [x for x in a.command if x != "--"] if a.command[:1] == ["--"] else a.command
    if not command:
        ap.error("give the training script after --")
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    if not variants or any(v not in VARIANTS for v in variants):
        ap.error(f"--variants takes {', '.join(VARIANTS)} (comma-separated)")
    if a.rounds < 1 or a.timeout < 1 or a.tolerance < 0:
        ap.error("--rounds and --timeout must be at least 1, --tolerance not negative")
    if command[0].endswith(".py"):
        command = [sys.executable] + command
    out = a.out or tempfile.mkdtemp(prefix="umswap-evict-copy-")
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync")
    print(f"outputs in {out}", flush=True)

    rc, text, wall = run(command, env, os.path.join(out, "native.out"))
    native = parse_iterations(text)
    summary = parse_summary(text) or {}
    print(f"native: exit {rc}, {wall:.0f} s, {len(native)} iterations, steady "
          f"{summary.get('steady_median_ms')} ms, peak allocated {summary.get('peak_allocated_bytes')}",
          flush=True)
    if rc != 0 or not native:
        print("native run failed: nothing to compare with", file=sys.stderr)
        return 1
    try:
        budget = budget_bytes(a.budget, summary.get("peak_allocated_bytes"))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"budget {budget} bytes ({budget / (1 << 30):.2f} GiB)", flush=True)

    results = {"native": {"iterations": native, "summary": summary}, "budget_bytes": budget,
               "runs": []}
    all_good = True
    for r in range(a.rounds):
        for v in variants:
            name = f"{v}{r + 1}"
            stats = os.path.join(out, f"{name}.json")
            cmd = ["timeout", "-s", "KILL", str(a.timeout)]
            if VARIANTS[v] is None:
                cmd += command
                run_env, label = env, "without umswap"
            else:
                # --no-cache: every variant and round learns online, none replays another's.
                cmd += [a.umswap, "run", "--no-cache", "--limit", a.limit, "--budget",
                        str(budget), "--stats", stats, "--"] + command
                run_env = dict(env, **VARIANTS[v])
                label = " ".join(f"{k}={x}" for k, x in VARIANTS[v].items())
            rc, text, wall = run(cmd, run_env, os.path.join(out, f"{name}.out"))
            its = parse_iterations(text)
            at, diff = worst_difference(native, its)
            good = rc == 0 and len(its) == len(native) and diff is not None and diff <= a.tolerance
            weights = checksum_verdict(summary, parse_summary(text) or {})
            good = good and weights != "DIFFER"
            all_good = all_good and good
            killed = rc in (-9, 124, 137) and wall >= a.timeout - 1
            print(f"\n{name} ({label}): exit {rc}{' (killed at --timeout)' if killed else ''}, "
                  f"{wall:.0f} s, "
                  f"{len(its)} iterations; worst |loss - native| {diff} at iteration {at}"
                  f"{'' if weights is None else f'; final weights {weights}'}: "
                  f"{'same within tolerance' if good else 'DIFFERS'}")
            print("  iter   native loss   this loss      ms")
            for i in sorted(its):
                n = native.get(i, (None, None))[1]
                mark = "  <--" if n is not None and at == i and not good else ""
                print(f"  {i:4d}  {n if n is not None else '-':>11}  {its[i][1]:>10}  {its[i][0]:8.1f}{mark}")
            lines, check = describe_stats(stats) if VARIANTS[v] is not None else ([], None)
            if lines:
                print("\n".join(lines), flush=True)
            results["runs"].append({"name": name, "variant": v, "exit": rc, "iterations": its,
                                    "worst_iteration": at, "worst_difference": diff,
                                    "weights": weights, "same": good, "copy_check": check})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    print("\nall runs matched native" if all_good else "\nsome run did NOT match native")
    return 0 if all_good else 1


if __name__ == "__main__":
    sys.exit(main())
