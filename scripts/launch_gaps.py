#!/usr/bin/env python3
"""Where one planned iteration's time goes: the program's kernels, umswap's copies each way,
the gaps between kernels and what the launch after each gap waited for.

Reads a timeline written by `umswap timeline TRACE -o OUT.json` (plain or gzipped) and the stats
file of the same run (`umswap record --stats FILE ...`), whose `advisor.launch_waits` lists the
last 8192 launches: the copy-back word and progress values each launch's stream waits for
(progress even: evictions for room; odd: all of a launch's actions), its populates, and when
umswap's launch path began and left it (host clock). The trace's step numbers are the launch
numbers, so the two meet by step.

    umswap record -o g.umtrace --stats s.json --budget 14880000000 -- python3 gpt2.py ...
    umswap timeline g.umtrace -o t9.json --iterations 9
    python3 scripts/launch_gaps.py t9.json s.json --iteration 9

It prints, for the iteration and its busiest stream:
  - the span, the kernels' busy time, each direction's copies (count, busy time);
  - the link (either direction's copies) busy and idle, split at the iteration's first copy
    back after its first tenth (roughly where the backward pass begins: "fwd", "bwd"), and the
    idle periods by length with the kernel time that ran in them;
  - the gaps before kernels by phase and by what umswap placed before that launch
    (populate, restore: copy-back word, room: evictions, actions: a launch's actions, none);
  - the largest gaps, and how much of the gap time came right after the host submitted the
    launch (under 30 us: the host was late) rather than with the launch waiting on the GPU;
  - the host time in umswap's launch path over the iteration.

--json FILE writes the same figures. Exit: 0 done, 2 bad input (a file missing or unreadable,
no such iteration in the timeline).
"""
import argparse
import collections
import gzip
import json
import sys

HOST_LATE_US = 30.0  # a kernel that starts this soon after the host left its launch path


def fail(message):
    print(f"launch_gaps: {message}", file=sys.stderr)
    sys.exit(2)


def load_json(path, what):
    try:
        with open(path, "rb") as f:
            head = f.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(path, "rt") as f:
            return json.load(f)
    except OSError as e:
        fail(f"cannot read the {what} {path}: {e.strerror or e}")
    except (ValueError, EOFError) as e:
        fail(f"the {what} {path} is not JSON: {e}")


def wait_kind(row):
    """What a launch_waits row says umswap placed before the launch."""
    if row is None:
        return "none"
    restore, progress, populates = row[1], row[2], row[3]
    parts = []
    if populates:
        parts.append("populate")
    if restore:
        parts.append("restore")
    if progress:
        parts.append("room" if progress % 2 == 0 else "actions")
    return "+".join(parts) or "none"


def merged(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap(spans, s, e):
    return sum(max(0.0, min(e, b) - max(s, a)) for a, b in spans)


def analyse(events, rows, iteration):
    steps = [e for e in events if e.get("ph") == "X" and "step" in (e.get("args") or {})]
    drawn = sorted({e["args"]["iteration"] for e in steps if "iteration" in e["args"]})
    if iteration is None:
        if not drawn:
            fail("the timeline has no steps of a detected iteration")
        iteration = drawn[0]
    mine = [e for e in steps if e["args"].get("iteration") == iteration]
    if not mine:
        fail(f"iteration {iteration} is not in the timeline (it has {drawn or 'none'})")
    busiest = collections.Counter(e["tid"] for e in mine).most_common(1)[0][0]
    ks = sorted((e for e in mine if e["tid"] == busiest), key=lambda e: e["ts"])
    t0, t1 = ks[0]["ts"], max(e["ts"] + e["dur"] for e in ks)
    copies = {"out": [], "in": []}
    for e in events:
        if e.get("ph") != "X" or e.get("name") not in ("umswap copy out", "umswap copy in"):
            continue
        if e["ts"] < t1 and e["ts"] + e["dur"] > t0:
            copies["in" if e["name"].endswith("in") else "out"].append(
                (max(e["ts"], t0), min(e["ts"] + e["dur"], t1)))
    split = min((s for s, _ in copies["in"] if s > t0 + (t1 - t0) / 10), default=t1)
    phases = {"fwd": (t0, split), "bwd": (split, t1)}
    phase_of = lambda ts: "fwd" if ts < split else "bwd"  # noqa: E731
    kernel_spans = merged([(e["ts"], e["ts"] + e["dur"]) for e in ks])
    link = merged(copies["out"] + copies["in"])
    idle, at = [], t0
    for s, e in link:
        if s > at:
            idle.append((at, s))
        at = max(at, e)
    if t1 > at:
        idle.append((at, t1))

    out = {
        "iteration": iteration,
        "steps": len(ks),
        "first_step": ks[0]["args"]["step"],
        "last_step": ks[-1]["args"]["step"],
        "span_ms": (t1 - t0) / 1000,
        "kernels_busy_ms": sum(e - s for s, e in kernel_spans) / 1000,
        "copies_out": len(copies["out"]),
        "copies_out_busy_ms": sum(e - s for s, e in merged(copies["out"])) / 1000,
        "copies_in": len(copies["in"]),
        "copies_in_busy_ms": sum(e - s for s, e in merged(copies["in"])) / 1000,
        "split_ms": (split - t0) / 1000,
        "link_busy_ms": sum(e - s for s, e in link) / 1000,
        "link_idle_ms": sum(e - s for s, e in idle) / 1000,
    }
    out["phases"] = {
        name: {"span_ms": (b - a) / 1000,
               "link_idle_ms": overlap(idle, a, b) / 1000,
               "kernels_busy_ms": overlap(kernel_spans, a, b) / 1000}
        for name, (a, b) in phases.items()}
    sizes = [("under 0.1 ms", 100), ("0.1-1 ms", 1000), ("1-5 ms", 5000), ("5 ms or more", None)]
    by_size = {name: {"periods": 0, "ms": 0.0, "kernels_ms": 0.0} for name, _ in sizes}
    for s, e in idle:
        name = next(n for n, limit in sizes if limit is None or e - s < limit)
        by_size[name]["periods"] += 1
        by_size[name]["ms"] += (e - s) / 1000
        by_size[name]["kernels_ms"] += overlap(kernel_spans, s, e) / 1000
    out["link_idle_by_length"] = by_size

    by_step = {r[0]: r for r in rows}
    gaps_by = collections.defaultdict(lambda: {"gaps": 0, "ms": 0.0})
    host_late = collections.defaultdict(lambda: {"gaps": 0, "ms": 0.0})
    offset = None  # GPU start less host leaving, at its smallest: the clocks' offset
    timed = [(e["ts"] * 1000 - by_step[e["args"]["step"]][5], e) for e in ks
             if e["args"]["step"] in by_step and len(by_step[e["args"]["step"]]) > 5
             and by_step[e["args"]["step"]][5]]
    if timed:
        offset = min(d for d, _ in timed)
    after_host = {e["args"]["step"]: (d - offset) / 1000 for d, e in timed}
    largest = []
    end = None
    for e in ks:
        if end is not None:
            gap = max(0.0, e["ts"] - end)
            step = e["args"]["step"]
            kind = wait_kind(by_step.get(step))
            key = f"{phase_of(e['ts'])} {kind}"
            gaps_by[key]["gaps"] += 1
            gaps_by[key]["ms"] += gap / 1000
            if step in after_host:
                late = "host late" if after_host[step] < HOST_LATE_US else "waited on the GPU"
                host_late[f"{phase_of(e['ts'])} {late}"]["gaps"] += 1
                host_late[f"{phase_of(e['ts'])} {late}"]["ms"] += gap / 1000
            largest.append({"gap_ms": gap / 1000, "step": step, "at_ms": (e["ts"] - t0) / 1000,
                            "phase": phase_of(e["ts"]), "waits": kind, "kernel": e["name"][:70]})
        end = max(end or 0.0, e["ts"] + e["dur"])
    out["gaps_ms"] = sum(g["ms"] for g in gaps_by.values())
    out["gaps_by_wait"] = dict(sorted(gaps_by.items(), key=lambda kv: -kv[1]["ms"]))
    out["gaps_by_host"] = dict(sorted(host_late.items()))
    out["largest_gaps"] = sorted(largest, key=lambda g: -g["gap_ms"])[:20]
    host = sorted((r[0], r[4], r[5]) for r in rows
                  if len(r) > 5 and r[5] and out["first_step"] <= r[0] <= out["last_step"])
    out["launch_rows"] = len(host)
    if host:
        out["host_span_ms"] = (host[-1][2] - host[0][1]) / 1e6
        out["host_in_launch_path_ms"] = sum(b - a for _, a, b in host) / 1e6
    return out


def report(r):
    print(f"iteration {r['iteration']}: steps {r['first_step']}-{r['last_step']} on its busiest "
          f"stream ({r['steps']}), span {r['span_ms']:.1f} ms, kernels busy {r['kernels_busy_ms']:.1f} ms")
    print(f"copies out {r['copies_out']} busy {r['copies_out_busy_ms']:.1f} ms; copies in "
          f"{r['copies_in']} busy {r['copies_in_busy_ms']:.1f} ms; link busy "
          f"{r['link_busy_ms']:.1f} ms, idle {r['link_idle_ms']:.1f} ms")
    for name, p in r["phases"].items():
        print(f"  {name}: {p['span_ms']:.1f} ms, link idle {p['link_idle_ms']:.1f} ms, kernels "
              f"busy {p['kernels_busy_ms']:.1f} ms")
    print(f"  (fwd/bwd split at {r['split_ms']:.1f} ms: the first copy back after the first tenth)")
    print("link idle periods by length: periods, ms, kernel ms in them")
    for name, v in r["link_idle_by_length"].items():
        print(f"  {name:14s} {v['periods']:6d} {v['ms']:9.1f} {v['kernels_ms']:9.1f}")
    print(f"gaps between kernels: {r['gaps_ms']:.1f} ms; by phase and what the launch after the gap "
          f"waited for (gaps, ms):")
    for key, v in r["gaps_by_wait"].items():
        print(f"  {key:24s} {v['gaps']:6d} {v['ms']:9.1f}")
    if r["gaps_by_host"]:
        print(f"by whether the kernel started within {HOST_LATE_US:.0f} us of the host leaving its "
              f"launch path (gaps, ms):")
        for key, v in r["gaps_by_host"].items():
            print(f"  {key:24s} {v['gaps']:6d} {v['ms']:9.1f}")
    if "host_span_ms" in r:
        print(f"host: {r['launch_rows']} launches over {r['host_span_ms']:.1f} ms, "
              f"{r['host_in_launch_path_ms']:.1f} ms of it in umswap's launch path")
    else:
        print("host: the stats' launch_waits do not cover this iteration's launches")
    print("largest gaps (ms, step, at ms, phase, waits, kernel):")
    for g in r["largest_gaps"][:12]:
        print(f"  {g['gap_ms']:7.2f} {g['step']:8d} {g['at_ms']:9.2f} {g['phase']} {g['waits']:18s} "
              f"{g['kernel']}")


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("timeline", help="JSON from `umswap timeline` (may be gzipped)")
    ap.add_argument("stats", help="the same run's stats file (advisor.launch_waits)")
    ap.add_argument("--iteration", type=int, help="iteration number (default: the first drawn)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    a = ap.parse_args(argv)
    timeline = load_json(a.timeline, "timeline")
    events = timeline.get("traceEvents", []) if isinstance(timeline, dict) else timeline
    if not isinstance(events, list):
        fail(f"the timeline {a.timeline} has no list of events")
    stats = load_json(a.stats, "stats file")
    rows = (stats.get("advisor") or {}).get("launch_waits") if isinstance(stats, dict) else None
    if not rows:
        print(f"launch_gaps: {a.stats} has no advisor.launch_waits (no plan, or an older umswap): "
              "gaps are not attributed", file=sys.stderr)
        rows = []
    r = analyse(events, rows, a.iteration)
    report(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
