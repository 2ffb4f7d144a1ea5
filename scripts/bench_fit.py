#!/usr/bin/env python3
"""Benchmark: a PyTorch workload that fits on the GPU, native vs under umswap, side by side.

Runs samples/pytorch/vgg16.py (or another script printing the same `summary {json}` line) in
several configurations one after another in this one invocation, repeating the whole set
--rounds times in alternating order, and prints one table: first-iteration time, median steady
iteration time, their ratios to native, and peak memory as PyTorch saw it.

    python3 scripts/bench_fit.py --umswap build/bin/umswap --limit 60G -- --batch 256 --steps 12

Configurations: native (no umswap), passthrough (`umswap run --mode passthrough`: hooks loaded,
nothing redirected) and managed (`umswap run`: every allocation managed memory, no advice).
--limit is passed to every umswap run as UMSWAP_MANAGED_LIMIT (required on shared GPUs).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SCRIPT = os.path.join(HERE, "..", "samples", "pytorch", "vgg16.py")


def run(cmd, env):
    start = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    summary = None
    for line in p.stdout.splitlines():
        if line.startswith("summary "):
            summary = json.loads(line[len("summary "):])
    return p.returncode, summary, p.stdout, time.time() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--umswap", default=os.path.join(HERE, "..", "build", "bin", "umswap"))
    ap.add_argument("--limit", required=True, help="UMSWAP_MANAGED_LIMIT for the umswap runs")
    ap.add_argument("--script", default=DEFAULT_SCRIPT)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("script_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    extra = [x for x in a.script_args if x != "--"]
    py = [sys.executable, a.script] + extra
    configs = {
        "native": py,
        "passthrough": [a.umswap, "run", "--mode", "passthrough", "--limit", a.limit, "--"] + py,
        "managed": [a.umswap, "run", "--limit", a.limit, "--"] + py,
    }
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    results = {name: [] for name in configs}
    order = list(configs)
    for r in range(a.rounds):
        for name in (order if r % 2 == 0 else reversed(order)):
            rc, summary, out, wall = run(configs[name], env)
            print(f"round {r + 1} {name}: exit {rc}, {wall:.1f} s"
                  + (f", first {summary['first_ms']:.1f} ms, steady {summary['steady_median_ms']:.1f} ms"
                     if summary else ""), flush=True)
            if rc != 0 or not summary:
                print(out[-3000:])
                continue
            results[name].append(summary)

    def med(name, key):
        vals = [s[key] for s in results[name] if s.get(key) is not None]
        return statistics.median(vals) if vals else None

    base_first, base_steady = med("native", "first_ms"), med("native", "steady_median_ms")
    print()
    print(f"{'config':<12} {'first ms':>10} {'x native':>9} {'steady ms':>10} {'x native':>9} "
          f"{'peak alloc GiB':>15} {'runs':>5}")
    table = {}
    for name in configs:
        first, steady = med(name, "first_ms"), med(name, "steady_median_ms")
        peak = med(name, "peak_allocated_bytes")
        row = {"first_ms": first, "steady_ms": steady, "peak_allocated_bytes": peak,
               "runs": len(results[name]),
               "first_ratio": first / base_first if first and base_first else None,
               "steady_ratio": steady / base_steady if steady and base_steady else None}
        table[name] = row
        fmt = lambda v, f: (f.format(v) if v is not None else "-")
        print(f"{name:<12} {fmt(first, '{:.1f}'):>10} {fmt(row['first_ratio'], '{:.3f}'):>9} "
              f"{fmt(steady, '{:.1f}'):>10} {fmt(row['steady_ratio'], '{:.3f}'):>9} "
              f"{fmt(peak / 2**30 if peak else None, '{:.2f}'):>15} {row['runs']:>5}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": extra, "limit": a.limit, "results": table, "raw": results}, f, indent=2)
    return 0 if all(table[n]["runs"] for n in configs) else 1


if __name__ == "__main__":
    sys.exit(main())
