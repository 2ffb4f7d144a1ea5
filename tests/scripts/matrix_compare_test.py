#!/usr/bin/env python3
"""CPU test of tests/gpu/matrix_compare.py: two small matrices written here, compared."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
import matrix_compare as mc  # noqa: E402


def row(model, budget, verdict="identical", over=(0, 10), ms=100.0, run="first", stalls=0, rc=0,
        **extra):
    r = {"model": model, "allocator": "async", "deterministic": "off", "budget_pct": budget,
         "run": run, "verdict": verdict, "ok": verdict in ("identical", "within"), "rc": rc,
         "umswap_ms": ms, "planned_over_budget": list(over) if over else None,
         "wait_stalls": stalls}
    r.update(extra)
    return r


class Compare(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def write(self, name, rows):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            json.dump({"rows": rows, "natives": []}, f)
        return path

    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                rc = mc.main(list(args))
            except SystemExit as e:  # argparse's errors
                rc = e.code
        return rc, out.getvalue(), err.getvalue()

    def test_held_time_verdicts_and_stalls(self):
        a = self.write("a.json", [
            row("cnn", 50, ms=200.0), row("cnn", 25, over=(0, 12), ms=400.0, stalls=1),
            row("lstm", 50, verdict="OUTSIDE", over=(3, 13), ms=50.0),
            row("moe", 50, over=None, ms=100.0),
            row("cnn", 100, verdict="NOT RUN", over=None, ms=None),  # not run: never compared
            row("only-in-a", 50)])
        b = self.write("b.json", [
            row("cnn", 50, over=(2, 12), ms=100.0), row("cnn", 25, ms=100.0),
            row("lstm", 50, verdict="within", over=(0, 13), ms=50.0, stalls=2),
            row("moe", 50, verdict="FAILED", over=None, ms=100.0, rc=1),  # not timed
            row("cnn", 100, over=(0, 10))])
        rc, out, _ = self.run_main(a, b, "--json", os.path.join(self.dir, "c.json"))
        self.assertEqual(rc, 0)
        with open(os.path.join(self.dir, "c.json")) as f:
            c = json.load(f)
        self.assertEqual(c["rows"], 4)
        self.assertEqual(c["held"], [2, 2])
        self.assertEqual(c["with_plan"], [3, 3])
        self.assertEqual(c["by_model"]["cnn"]["held"], [2, 1])
        self.assertEqual(c["by_model"]["lstm"]["held"], [0, 1])
        self.assertEqual(c["failed"], [1, 1])  # A's OUTSIDE, B's FAILED
        self.assertEqual(c["stalled"], [1, 1])
        # Timed: cnn 50 (2x), cnn 25 (4x), lstm 50 (1x): geometric mean 2x; none faster in A.
        self.assertEqual(c["timed_rows"], 3)
        self.assertAlmostEqual(c["time_ratio"], 2.0)
        self.assertEqual(c["faster_in_a"], 0)
        self.assertEqual(len(c["verdicts_changed"]), 2)  # the LSTM's and the MoE's
        self.assertIn("verdict changed: lstm async off 50 first 1: A OUTSIDE, B within", out)
        self.assertIn("verdict changed: moe async off 50 first 1: A identical, B FAILED", out)
        self.assertIn("budget held in every planned iteration: A 2 of 3, B 2 of 3", out)
        self.assertIn("time, A over B: 2.000x (geometric mean of 3 rows; 0 faster in A; 1 "
                      "without a median in both)", out)
        self.assertEqual(c["only_in_a"], [["only-in-a", "async", "off", 50, "first", 1]])
        self.assertEqual(c["only_in_b"], [["cnn", "async", "off", 100, "first", 1]])
        self.assertIn("only in A (1): only-in-a async off 50 first 1", out)
        self.assertIn("only in B (1): cnn async off 100 first 1", out)

    def test_natives_and_first_plans(self):
        # B's machine ran everything twice as slowly: its natives too. Against their natives,
        # A's first row is 2x slower (umswap 200 on native 50, B 200 on native 100), the second
        # as fast (400 on 100, 800 on 200): 1.414x. Replays have no first plan to compare.
        a = self.write("a.json", [
            row("cnn", 50, ms=200.0, native_ms=50.0, plan_from_iteration=4),
            row("lstm", 50, ms=400.0, native_ms=100.0, plan_from_iteration=5),
            row("lstm", 50, ms=400.0, run="replay", plan_from_iteration=1),
            row("mlm", 50, ms=100.0, plan_from_iteration=6)])  # no native: time only
        b = self.write("b.json", [
            row("cnn", 50, ms=200.0, native_ms=100.0, plan_from_iteration=5),
            row("lstm", 50, ms=800.0, native_ms=200.0, plan_from_iteration=5),
            row("lstm", 50, ms=400.0, run="replay", plan_from_iteration=1),
            row("mlm", 50, ms=100.0, plan_from_iteration=None)])
        rc, out, _ = self.run_main(a, b, "--json", os.path.join(self.dir, "c.json"))
        self.assertEqual(rc, 0)
        with open(os.path.join(self.dir, "c.json")) as f:
            c = json.load(f)
        self.assertEqual(c["native_rows"], 2)
        self.assertAlmostEqual(c["native_ratio"], 0.5)
        self.assertAlmostEqual(c["time_over_native_ratio"], 2 ** 0.5)
        self.assertEqual(c["plan_from_rows"], 2)
        self.assertEqual(c["plan_from_mean"], [4.5, 5.0])
        self.assertEqual(c["plan_from_earlier_in_a"], 1)
        self.assertEqual(c["plan_from_later_in_a"], 0)
        self.assertIn("natives, A over B: 0.500x; umswap over its native, A over B: 1.414x "
                      "(2 rows)", out)
        self.assertIn("first plan in force from iteration (first runs, mean): A 4.50, B 5.00 "
                      "(2 rows; 1 earlier in A, 0 later)", out)

    def test_budgets_filter_and_repeats_are_rows_of_their_own(self):
        a = self.write("a.json", [row("cnn", 50, ms=100.0), row("cnn", 25, ms=300.0),
                                  row("cnn", 50, ms=400.0, repeat=2)])
        b = self.write("b.json", [row("cnn", 50, ms=100.0), row("cnn", 25, ms=100.0),
                                  row("cnn", 50, ms=100.0, repeat=2)])
        rc, out, _ = self.run_main(a, b, "--budgets", "50")
        self.assertEqual(rc, 0)
        self.assertIn("rows compared: 2", out)
        self.assertIn("time, A over B: 2.000x", out)  # 1x and 4x

    def test_bad_input_is_refused_with_a_message(self):
        good = self.write("good.json", [row("cnn", 50)])
        bad = self.write("bad.json", [])
        with open(bad, "w") as f:
            f.write("[1, 2]")
        rc, _, err = self.run_main(bad, good)
        self.assertEqual(rc, 2)
        self.assertIn("not a correctness matrix's JSON", err)
        rc, _, err = self.run_main(os.path.join(self.dir, "missing.json"), good)
        self.assertEqual(rc, 2)
        self.assertIn("matrix_compare:", err)
        rc, _, err = self.run_main(good, good, "--budgets", "0,x")
        self.assertEqual(rc, 2)
        self.assertIn("bad --budgets", err)
        rc, _, err = self.run_main(self.write("twice.json", [row("cnn", 50), row("cnn", 50)]),
                                   good)
        self.assertEqual(rc, 2)
        self.assertIn("row cnn async off 50 first 1 appears twice", err)
        rc, _, err = self.run_main(self.write("odd.json", [row("cnn", 50), 7]), good)
        self.assertEqual(rc, 2)
        self.assertIn("a row that is not an object", err)
        rc, out, _ = self.run_main(good, self.write("empty.json", []))
        self.assertEqual(rc, 0)
        self.assertIn("rows compared: 0", out)
        self.assertIn("time: no row finished in both", out)


if __name__ == "__main__":
    unittest.main()
