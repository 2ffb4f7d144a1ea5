#!/usr/bin/env python3
"""Benchmark: one workload under two or more builds of umswap (and natively), side by side.

Runs the command natively (--native) and under `umswap run RUN_ARGS --stats F --` of every
--build, in alternating order, --rounds times, in this one invocation, and prints one table: each
entry's steady iteration time per round (the median of the last half of the iterations the
command printed), the median over rounds, its ratio to native and to the first build, the host's
enqueue time where the command prints it, and engine vmm's allocator and driver figures from the
stats file.

    python3 scripts/bench_builds.py --native --build A=old/bin/umswap --build B=build/bin/umswap \\
        --run-args "--engine vmm --limit 40G --budget 40G" --rounds 2 \\
        -- python3 bench/gpt2_host_share.py 12

The command must print one line per iteration, `iter <i> ms <float> ...` (samples/pytorch/) or
`iter <i> wall <float> host <float> ...` (bench/gpt2_host_share.py). Under engine um, set --limit
in --run-args below the card's free memory (rule of docs/RELIABILITY.md: never oversubscribe
managed memory). Exit: 0 every run finished and printed iterations, 1 otherwise, 2 bad arguments.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ITER = re.compile(r"^iter (\d+) (?:ms|wall) ([0-9.]+)(?: host ([0-9.]+))?")


def steady(values):
    """The median of the last half (at least one value), or None."""
    if not values:
        return None
    return statistics.median(values[-max(1, len(values) // 2):])


def parse_iterations(text):
    walls, hosts = [], []
    for line in text.splitlines():
        m = ITER.match(line)
        if m:
            walls.append(float(m.group(2)))
            if m.group(3) is not None:
                hosts.append(float(m.group(3)))
    return walls, hosts


def vmm_figures(stats_path):
    """Engine vmm's allocator and driver figures from a stats file, or {} (engine um, none)."""
    try:
        with open(stats_path) as f:
            vmm = json.load(f).get("vmm") or {}
    except (OSError, ValueError):
        return {}
    if not vmm:
        return {}
    calls = vmm.get("driver_calls") or {}
    return {
        "allocate_ms": vmm.get("allocate_ms"),
        "free_ms": vmm.get("free_ms"),
        # "cuMemCreate (host)" is a part of "cuMemCreate", counted again: not summed twice.
        "driver_ms": sum(c.get("ms", 0) for name, c in calls.items() if "(host)" not in name),
        "event_queries": (calls.get("cuEventQuery") or {}).get("calls", 0),
    }


def run_one(cmd, timeout, log_path):
    start = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = "timeout"
    with open(log_path, "w") as f:
        f.write(out)
    return rc, out, time.time() - start


def fmt(value, digits=1):
    return "-" if value is None else f"{value:,.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="append", default=[], metavar="NAME=UMSWAP",
                    help="a build's name and its umswap command (at least one)")
    ap.add_argument("--native", action="store_true", help="also run the command without umswap")
    ap.add_argument("--run-args", default="",
                    help="options for every `umswap run`, one string (--run-args=--quiet for one)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600, help="seconds a run may take")
    ap.add_argument("--out", help="directory for the logs and stats files (default: temporary)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    builds = []
    for spec in a.build:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            ap.error(f"--build {spec!r}: expected NAME=UMSWAP, NAME letters, digits, _ . -")
        if name == "native" or name in (b[0] for b in builds):
            ap.error(f"--build {name}: the name is taken")
        builds.append((name, path))
    if not builds:
        ap.error("at least one --build NAME=UMSWAP")
    if not command:
        ap.error("the command to run goes after --")
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    try:
        run_args = shlex.split(a.run_args)
    except ValueError as e:
        ap.error(f"--run-args: {e}")
    out_dir = a.out or tempfile.mkdtemp(prefix="bench_builds.")
    os.makedirs(out_dir, exist_ok=True)

    entries = ([("native", None)] if a.native else []) + builds
    results = {name: {"walls": [], "hosts": [], "vmm": [], "failed": 0} for name, _ in entries}
    for r in range(a.rounds):
        for name, umswap in (entries if r % 2 == 0 else list(reversed(entries))):
            stem = os.path.join(out_dir, f"r{r + 1}_{name}")
            cmd = list(command)
            if umswap is not None:
                cmd = [umswap, "run"] + run_args + ["--stats", stem + ".json", "--"] + command
            rc, out, seconds = run_one(cmd, a.timeout, stem + ".log")
            walls, hosts = parse_iterations(out)
            res = results[name]
            if rc != 0 or not walls:
                res["failed"] += 1
            res["walls"].append(steady(walls))
            res["hosts"].append(steady(hosts))
            res["vmm"].append(vmm_figures(stem + ".json") if umswap is not None else {})
            print(f"round {r + 1} {name}: exit {rc}, {len(walls)} iterations, {seconds:.1f} s, "
                  f"steady {fmt(steady(walls))} ms", flush=True)

    def median_of(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    native = median_of(results["native"]["walls"]) if a.native else None
    first = median_of(results[builds[0][0]]["walls"])
    print(f"\n{' '.join(shlex.quote(c) for c in command)}; umswap run {a.run_args}; "
          f"{a.rounds} rounds; logs in {out_dir}\n")
    print("| entry | steady ms by round | median | x native | x " + builds[0][0] +
          " | host ms | allocate / free ms | driver ms | event queries |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    summary = {}
    for name, _ in entries:
        res = results[name]
        med = median_of(res["walls"])
        vm = [v for v in res["vmm"] if v]
        vmm_mean = {k: statistics.mean(v[k] for v in vm if v.get(k) is not None)
                    for k in ("allocate_ms", "free_ms", "driver_ms", "event_queries")
                    if any(v.get(k) is not None for v in vm)}
        ratio_native = med / native if med and native else None
        ratio_first = med / first if med and first else None
        print(f"| {name} | {', '.join(fmt(w) for w in res['walls'])} | {fmt(med)} | "
              f"{fmt(ratio_native, 2)} | {fmt(ratio_first, 2)} | {fmt(median_of(res['hosts']))} | "
              f"{fmt(vmm_mean.get('allocate_ms'), 0)} / {fmt(vmm_mean.get('free_ms'), 0)} | "
              f"{fmt(vmm_mean.get('driver_ms'), 0)} | {fmt(vmm_mean.get('event_queries'), 0)} |")
        summary[name] = {"steady_ms": res["walls"], "median_ms": med, "x_native": ratio_native,
                         "x_first": ratio_first, "host_ms": res["hosts"], "vmm": res["vmm"],
                         "failed_runs": res["failed"]}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": command, "run_args": a.run_args, "rounds": a.rounds,
                       "entries": summary}, f, indent=1)
    failed = sum(results[name]["failed"] for name, _ in entries)
    if failed:
        print(f"\n{failed} run(s) failed or printed no iterations: see the logs", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
