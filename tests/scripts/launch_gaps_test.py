#!/usr/bin/env python3
"""CPU test of scripts/launch_gaps.py on a hand-made timeline and stats file."""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "launch_gaps.py")


def kernel(step, ts, dur, iteration=4, tid=10):
    return {"ph": "X", "pid": 1, "tid": tid, "name": f"k{step}", "cat": "kernel", "ts": ts,
            "dur": dur, "args": {"step": step, "iteration": iteration, "buffers": []}}


def copy(direction, ts, dur):
    return {"ph": "X", "pid": 1, "tid": 2 if direction == "in" else 3,
            "name": f"umswap copy {direction}", "cat": "transfer", "ts": ts, "dur": dur,
            "args": {"bytes": 1 << 20}}


# Iteration 4 on stream 10, times in us: kernels 100 at 0-10, 101 at 30-40 (gap 20, populate and
# room wait), 102 at 100-110 (gap 60, copy-back word), 103 at 2000-2010 (gap 1890, no wait;
# the host left its launch path 5 us before: host late). Copies out 0-25 and 40-90, copies in
# 1000-1900: the link idles 25-40 (15 us, a kernel 30-40 inside) and 90-1000 and 1900-2010.
# A kernel of another stream and one of iteration 5 must be left out.
EVENTS = [
    kernel(100, 0, 10), kernel(101, 30, 10), kernel(102, 100, 10), kernel(103, 2000, 10),
    kernel(900, 5, 1, tid=11), kernel(200, 5000, 10, iteration=5),
    copy("out", 0, 25), copy("out", 40, 50), copy("in", 1000, 900),
]
# [launch, restore value, progress value, populates, host entered ns, host left ns]; the GPU
# clock runs 1,000,000 ns ahead of the host's. Each kernel starts this long after its launch
# left the host: 100 0.5 us (the smallest: taken as the offset), 101 40.5, 102 50, 103 5 (4.5 us
# past the offset: host late);
# setUp puts the entries 1-2 us before the exits.
OFFSET = 1_000_000
ROWS = [
    [100, 0, 0, 0, 0, -OFFSET - 500],
    [101, 0, 2 * 90, 1, 0, 30_000 - OFFSET - 40_500],
    [102, 95, 2 * 95 + 1, 0, 0, 100_000 - OFFSET - 50_000],
    [103, 0, 0, 0, 0, 2_000_000 - OFFSET - 5_000],
]


class LaunchGaps(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.timeline = os.path.join(self.dir.name, "t.json.gz")
        with gzip.open(self.timeline, "wt") as f:
            json.dump({"traceEvents": EVENTS}, f)
        self.stats = os.path.join(self.dir.name, "s.json")
        rows = [list(r) for r in ROWS]
        rows[0][4] = rows[0][5] - 1000
        for r in rows[1:]:
            r[4] = r[5] - 2000
        with open(self.stats, "w") as f:
            json.dump({"advisor": {"launch_waits": rows}}, f)

    def tearDown(self):
        self.dir.cleanup()

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)

    def test_figures(self):
        out = os.path.join(self.dir.name, "r.json")
        p = self.run_script(self.timeline, self.stats, "--iteration", "4", "--json", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out) as f:
            r = json.load(f)
        self.assertEqual(r["steps"], 4)
        self.assertEqual((r["first_step"], r["last_step"]), (100, 103))
        self.assertAlmostEqual(r["span_ms"], 2.010)
        self.assertAlmostEqual(r["kernels_busy_ms"], 0.040)
        self.assertEqual((r["copies_out"], r["copies_in"]), (2, 1))
        self.assertAlmostEqual(r["copies_out_busy_ms"], 0.075)
        self.assertAlmostEqual(r["link_busy_ms"], 0.975)
        self.assertAlmostEqual(r["link_idle_ms"], 1.035)
        self.assertAlmostEqual(r["split_ms"], 1.0)  # the copy back at 1000 us
        self.assertAlmostEqual(r["phases"]["fwd"]["link_idle_ms"], 0.925)
        self.assertAlmostEqual(r["phases"]["bwd"]["kernels_busy_ms"], 0.010)
        idle = r["link_idle_by_length"]
        self.assertEqual(idle["under 0.1 ms"]["periods"], 1)
        self.assertAlmostEqual(idle["under 0.1 ms"]["kernels_ms"], 0.010)
        self.assertEqual(idle["0.1-1 ms"]["periods"], 2)
        self.assertAlmostEqual(r["gaps_ms"], 1.970)
        waits = r["gaps_by_wait"]
        self.assertAlmostEqual(waits["fwd populate+room"]["ms"], 0.020)
        self.assertAlmostEqual(waits["fwd restore+actions"]["ms"], 0.060)
        self.assertAlmostEqual(waits["bwd none"]["ms"], 1.890)
        host = r["gaps_by_host"]
        self.assertEqual(host["bwd host late"]["gaps"], 1)
        self.assertEqual(host["fwd waited on the GPU"]["gaps"], 2)
        self.assertEqual(r["largest_gaps"][0]["step"], 103)
        self.assertEqual(r["launch_rows"], 4)
        self.assertIn("launch path", p.stdout)

    def test_default_iteration_is_the_first_drawn(self):
        p = self.run_script(self.timeline, self.stats)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("iteration 4:", p.stdout)

    def test_bad_input(self):
        p = self.run_script(self.timeline, self.stats, "--iteration", "7")
        self.assertEqual(p.returncode, 2)
        self.assertIn("iteration 7 is not in the timeline (it has [4, 5])", p.stderr)
        p = self.run_script(os.path.join(self.dir.name, "none.json"), self.stats)
        self.assertEqual(p.returncode, 2)
        self.assertIn("cannot read the timeline", p.stderr)
        bad = os.path.join(self.dir.name, "bad.json")
        with open(bad, "w") as f:
            f.write("{not json")
        p = self.run_script(self.timeline, bad)
        self.assertEqual(p.returncode, 2)
        self.assertIn("is not JSON", p.stderr)

    def test_stats_without_launch_waits(self):
        with open(self.stats, "w") as f:
            json.dump({"advisor": {}}, f)
        p = self.run_script(self.timeline, self.stats)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("no advisor.launch_waits", p.stderr)
        self.assertIn("do not cover", p.stdout)


if __name__ == "__main__":
    unittest.main()
