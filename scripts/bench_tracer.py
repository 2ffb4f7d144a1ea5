#!/usr/bin/env python3
"""Benchmark: what the CUPTI tracer costs, side by side in one run.

Two workloads, each run under `umswap run` (managed memory, no tracer) and under
`umswap record` (managed memory + tracer), alternating, --rounds times:
  * samples/pytorch/launch_bound.py: tiny kernels, so the difference per iteration divided by
    launches per iteration is the tracer's cost per launch (target <= 1 us);
  * samples/pytorch/vgg16.py batch 256: the iteration-time ratio record / run (target <= 1.02).
--limit is passed to every run as UMSWAP_MANAGED_LIMIT (required on shared GPUs).

    python3 scripts/bench_tracer.py --umswap build/bin/umswap --limit 60G
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "..", "samples", "pytorch")


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, PYTHONUNBUFFERED="1"))
    summary = None
    for line in p.stdout.splitlines():
        if line.startswith("summary "):
            summary = json.loads(line[len("summary "):])
    if p.returncode != 0 or summary is None:
        print(p.stdout[-2000:])
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--umswap", default=os.path.join(HERE, "..", "build", "bin", "umswap"))
    ap.add_argument("--limit", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    workloads = {
        "launch_bound": [sys.executable, os.path.join(SAMPLES, "launch_bound.py"), "--steps", "15"],
        "vgg16_b256": [sys.executable, os.path.join(SAMPLES, "vgg16.py"), "--batch", "256",
                       "--steps", "10"],
    }
    results = {}
    for name, cmd in workloads.items():
        runs = {"run": [], "record": []}
        for r in range(a.rounds):
            for mode in (("run", "record") if r % 2 == 0 else ("record", "run")):
                trace = os.path.join(tmp, f"{name}.{r}.umtrace")
                prefix = ([a.umswap, "run", "--limit", a.limit, "--"] if mode == "run" else
                          [a.umswap, "record", "-o", trace, "--", ])
                env_cmd = ["env", f"UMSWAP_MANAGED_LIMIT={a.limit}"] + prefix + cmd
                s = run(env_cmd)
                if s:
                    runs[mode].append(s)
                    print(f"{name} round {r + 1} {mode}: steady {s['steady_median_ms']:.2f} ms",
                          flush=True)
        med = {m: statistics.median([s["steady_median_ms"] for s in v]) if v else None
               for m, v in runs.items()}
        row = {"run_ms": med["run"], "record_ms": med["record"]}
        if med["run"] and med["record"]:
            row["ratio"] = med["record"] / med["run"]
            launches = runs["run"][0].get("launches_per_iteration")
            if launches:
                row["us_per_launch"] = (med["record"] - med["run"]) * 1e3 / launches
        results[name] = row
    print()
    print(f"{'workload':<14} {'run ms':>9} {'record ms':>10} {'ratio':>7} {'us/launch':>10}")
    for name, row in results.items():
        f = lambda k, spec: (spec.format(row[k]) if row.get(k) is not None else "-")
        print(f"{name:<14} {f('run_ms', '{:.2f}'):>9} {f('record_ms', '{:.2f}'):>10} "
              f"{f('ratio', '{:.3f}'):>7} {f('us_per_launch', '{:.3f}'):>10}")
    if a.json:
        json.dump(results, open(a.json, "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
