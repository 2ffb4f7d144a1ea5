#!/usr/bin/env python3
"""Compares two correctness matrices (correctness_matrix.py --json) row by row: A against B.

  matrix_compare.py A.json B.json [--budgets 50,25] [--json OUT]

Rows are matched by model, allocator, determinism, budget, run (first, replay, vmm) and repeat;
only rows both matrices ran are compared (a NOT RUN row is not run). Prints:

- rows compared, and how many (and which) only one of the two ran;
- every row whose verdict changed (identical, within, OUTSIDE, ...);
- failed rows (ok false) in each;
- budgets held: rows with a plan whose every planned iteration stayed within the budget + 2%
  (planned_over_budget), in each, in all and by model;
- time: the geometric mean over rows that finished in both of A's median iteration over B's
  (umswap_ms), and how many rows were faster in A; then, over the rows whose natives have a
  median in both, the natives' own ratio (native_ms: umswap does not touch them, so it says how
  alike the two machines or loads were) and umswap's time over its row's native, A over B (the
  comparison that load cancels from);
- first runs' first plan: the mean iteration from which it was in force (plan_from_iteration),
  over rows that have one in both;
- rows whose waits the watchdog released (wait_stalls > 0) in each.

A benchmark of two binaries or two settings is only as fair as its two runs were alike: same
GPU, same --jobs and --limit, ideally one session. Exit 0, or 2 on bad input (a file that is not
a matrix's JSON, a row that is not an object, one row twice, a bad --budgets).
"""
import argparse
import collections
import json
import math
import sys


def key(row):
    return (row.get("model"), row.get("allocator"), row.get("deterministic"),
            row.get("budget_pct"), row.get("run") or "first", row.get("repeat", 1))


def load(path):
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{path}: not a correctness matrix's JSON (no rows)")
    rows = {}
    for r in data["rows"]:
        if not isinstance(r, dict):
            raise ValueError(f"{path}: a row that is not an object: {r!r:.80}")
        if r.get("verdict") == "NOT RUN":
            continue
        k = key(r)
        if k in rows:
            raise ValueError(f"{path}: row {' '.join(str(x) for x in k)} appears twice")
        rows[k] = r
    return rows


def held(row):
    """True/False for a row with a plan (budget held in every planned iteration), else None."""
    over = row.get("planned_over_budget")
    if not isinstance(over, list) or len(over) != 2 or not over[1]:
        return None
    return over[0] == 0


def median_ms(row):
    ms = row.get("umswap_ms")
    return ms if row.get("rc") == 0 and isinstance(ms, (int, float)) and ms > 0 else None


def positive(x):
    return x if isinstance(x, (int, float)) and x > 0 else None


def compare(a, b, budgets=None):
    def name(k):
        return tuple(str(x) for x in k)

    def chosen(k):
        return budgets is None or k[3] in budgets

    keys = sorted((k for k in a if k in b and chosen(k)), key=name)
    out = {"rows": len(keys),
           "only_in_a": [list(k) for k in sorted((k for k in a if k not in b and chosen(k)),
                                                 key=name)],
           "only_in_b": [list(k) for k in sorted((k for k in b if k not in a and chosen(k)),
                                                 key=name)],
           "verdicts_changed": [], "failed": [0, 0], "held": [0, 0],
           "with_plan": [0, 0], "by_model": {}, "stalled": [0, 0]}
    logs, native_logs, relative_logs, plan_from = [], [], [], [[], []]
    for k in keys:
        ra, rb = a[k], b[k]
        if ra.get("verdict") != rb.get("verdict"):
            out["verdicts_changed"].append({"row": list(k), "a": ra.get("verdict"),
                                            "b": rb.get("verdict")})
        model = out["by_model"].setdefault(k[0], {"held": [0, 0], "with_plan": [0, 0]})
        for i, r in enumerate((ra, rb)):
            out["failed"][i] += not r.get("ok", False)
            out["stalled"][i] += (r.get("wait_stalls") or 0) > 0
            h = held(r)
            if h is not None:
                out["with_plan"][i] += 1
                out["held"][i] += h
                model["with_plan"][i] += 1
                model["held"][i] += h
        ma, mb = median_ms(ra), median_ms(rb)
        if ma and mb:
            logs.append(math.log(ma / mb))
            na, nb = positive(ra.get("native_ms")), positive(rb.get("native_ms"))
            if na and nb:
                native_logs.append(math.log(na / nb))
                relative_logs.append(math.log((ma / na) / (mb / nb)))
        pa, pb = ra.get("plan_from_iteration"), rb.get("plan_from_iteration")
        if k[4] == "first" and isinstance(pa, int) and isinstance(pb, int):
            plan_from[0].append(pa)
            plan_from[1].append(pb)

    def geo(xs):
        return math.exp(sum(xs) / len(xs)) if xs else None

    out["timed_rows"] = len(logs)
    out["time_ratio"] = geo(logs)
    out["faster_in_a"] = sum(1 for x in logs if x < 0)
    out["native_rows"] = len(native_logs)
    out["native_ratio"] = geo(native_logs)
    out["time_over_native_ratio"] = geo(relative_logs)
    out["plan_from_rows"] = len(plan_from[0])
    out["plan_from_mean"] = ([sum(v) / len(v) for v in plan_from] if plan_from[0] else None)
    out["plan_from_earlier_in_a"] = sum(1 for x, y in zip(*plan_from) if x < y)
    out["plan_from_later_in_a"] = sum(1 for x, y in zip(*plan_from) if x > y)
    return out


def render(c):
    lines = [f"rows compared: {c['rows']}"]
    for side in ("a", "b"):
        only = c[f"only_in_{side}"]
        if only:
            lines.append(f"  only in {side.upper()} ({len(only)}): " +
                         "; ".join(" ".join(str(x) for x in k) for k in only[:8]) +
                         ("; ..." if len(only) > 8 else ""))
    for v in c["verdicts_changed"]:
        lines.append(f"  verdict changed: {' '.join(str(x) for x in v['row'])}: "
                     f"A {v['a']}, B {v['b']}")
    lines.append(f"failed: A {c['failed'][0]}, B {c['failed'][1]}")
    lines.append(f"budget held in every planned iteration: A {c['held'][0]} of "
                 f"{c['with_plan'][0]}, B {c['held'][1]} of {c['with_plan'][1]}")
    for m, v in sorted(c["by_model"].items()):
        if v["with_plan"][0] or v["with_plan"][1]:
            lines.append(f"  {m}: A {v['held'][0]} of {v['with_plan'][0]}, "
                         f"B {v['held'][1]} of {v['with_plan'][1]}")
    if c["time_ratio"] is None:
        lines.append("time: no row finished in both")
    else:
        lines.append(f"time, A over B: {c['time_ratio']:.3f}x (geometric mean of "
                     f"{c['timed_rows']} rows; {c['faster_in_a']} faster in A; "
                     f"{c['rows'] - c['timed_rows']} without a median in both)")
    if c["native_ratio"] is not None:
        lines.append(f"  natives, A over B: {c['native_ratio']:.3f}x; umswap over its native, "
                     f"A over B: {c['time_over_native_ratio']:.3f}x ({c['native_rows']} rows)")
    if c["plan_from_mean"] is not None:
        lines.append(f"first plan in force from iteration (first runs, mean): "
                     f"A {c['plan_from_mean'][0]:.2f}, B {c['plan_from_mean'][1]:.2f} "
                     f"({c['plan_from_rows']} rows; {c['plan_from_earlier_in_a']} earlier in A, "
                     f"{c['plan_from_later_in_a']} later)")
    lines.append(f"waits released by the watchdog: A {c['stalled'][0]} rows, "
                 f"B {c['stalled'][1]} rows")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--budgets", help="only these budgets (percents, comma-separated)")
    ap.add_argument("--json", help="write the comparison here too")
    args = ap.parse_args(argv)
    budgets = None
    if args.budgets is not None:
        try:
            budgets = {int(x) for x in args.budgets.split(",") if x}
        except ValueError:
            budgets = set()
        if not budgets or any(not 0 < x <= 100 for x in budgets):
            ap.error("bad --budgets: percents in (0, 100], comma-separated")
    try:
        a, b = load(args.a), load(args.b)
    except (OSError, ValueError) as e:
        print(f"matrix_compare: {e}", file=sys.stderr)
        return 2
    c = compare(a, b, budgets)
    print(render(c))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(c, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
