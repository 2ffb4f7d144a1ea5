#!/usr/bin/env python3
"""CPU test of tests/gpu/correctness_matrix.py's verdicts (judge()): no GPU, no torch."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
import correctness_matrix as cm  # noqa: E402


def run(losses, checksum=None, rc=0):
    return {"rc": rc, "losses": losses, "summary": {"checksum": checksum} if checksum else {}}


class Judge(unittest.TestCase):
    def test_identical_natives_demand_identical_runs(self):
        n = run([10.5, 10.1, 9.9], "abc")
        self.assertEqual(cm.judge(n, n, run([10.5, 10.1, 9.9], "abc"))[0], "identical")
        self.assertEqual(cm.judge(n, n, run([10.5, 10.1, 9.9], "abd"))[0], "DIFFERS")
        self.assertEqual(cm.judge(n, n, run([10.5, 10.1, 9.900001], "abc"))[0], "DIFFERS")

    def test_spread_allows_four_times_the_natives_difference_or_half_a_percent(self):
        a, b = run([10.0, 9.0, 8.0]), run([10.0, 9.01, 8.02])
        # Step 2's mean is 8.01, its running spread 0.02: 0.08 allowed (0.5% is 0.04).
        self.assertEqual(cm.judge(a, b, run([10.0, 9.0, 8.08]))[0], "within")
        verdict, worst = cm.judge(a, b, run([10.0, 9.0, 8.2]))
        self.assertEqual(verdict, "OUTSIDE")
        self.assertGreater(worst, 1.0)
        # A jump at a step where the natives still agreed, beyond 0.5% of the loss.
        self.assertEqual(cm.judge(a, b, run([10.1, 9.0, 8.01]))[0], "OUTSIDE")
        self.assertEqual(cm.judge(a, b, run([10.04, 9.0, 8.01]))[0], "within")

    def test_nan_crash_or_short_run_fail(self):
        a, b = run([10.0, 9.0]), run([10.0, 9.01])
        self.assertEqual(cm.judge(a, b, run([10.0, float("nan")]))[0], "OUTSIDE")
        self.assertEqual(cm.judge(a, b, run([10.0, 9.0], rc=1))[0], "FAILED")
        self.assertEqual(cm.judge(a, b, run([10.0]))[0], "FAILED")

    def test_a_timeout_is_judged_on_the_steps_it_finished(self):
        n = run([10.5, 10.1, 9.9, 9.7], "abc")
        self.assertEqual(cm.judge(n, n, run([10.5, 10.1], rc=124)),
                         ("TIMEOUT, 2 of 4 identical", 0.0))
        self.assertEqual(cm.judge(n, n, run([10.5, 10.2], rc=124))[0], "TIMEOUT, 2 of 4 DIFFERS")
        self.assertEqual(cm.judge(n, n, run([], rc=124)), ("TIMEOUT", None))
        a, b = run([10.0, 9.0, 8.0]), run([10.0, 9.01, 8.02])
        self.assertEqual(cm.judge(a, b, run([10.0, 9.0], rc=124))[0], "TIMEOUT, 2 of 3 within")
        self.assertEqual(cm.judge(a, b, run([10.0, 9.5], rc=124))[0], "TIMEOUT, 2 of 3 OUTSIDE")
        # A complete run still needs the natives' checksum where they have one.
        self.assertEqual(cm.judge(n, n, run([10.5, 10.1, 9.9, 9.7]))[0], "DIFFERS")


class Schedule(unittest.TestCase):
    def test_lowest_budgets_and_slowest_models_start_first(self):
        keys = [("cnn", "async", "off", 100, 1), ("decoder", "default", "on", 50, 1),
                ("cnn", "default", "off", 25, 1), ("decoder", "async", "off", 25, 1),
                ("decoder", "default", "on", 25, 1), ("lstm", "default", "off", 25, 1)]
        self.assertEqual(cm.longest_first(keys), [
            ("decoder", "default", "on", 25, 1), ("decoder", "async", "off", 25, 1),
            ("lstm", "default", "off", 25, 1), ("cnn", "default", "off", 25, 1),
            ("decoder", "default", "on", 50, 1), ("cnn", "async", "off", 100, 1)])

    def test_a_run_past_the_deadline_does_not_start_and_one_near_it_is_cut(self):
        import tempfile
        import time
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "x.log")
            self.assertIsNone(cm.run(["true"], dict(os.environ), log, 60, time.time() + 5))
            self.assertFalse(os.path.exists(log))
            t0 = time.time()
            r = cm.run(["sleep", "30"], dict(os.environ), log, 60, time.time() + 12)
            self.assertLess(time.time() - t0, 20)
            self.assertEqual(r["rc"], 124)
            r = cm.run(["sh", "-c", "echo 'iter 0 ms 1.0 loss 2.5'"], dict(os.environ), log, 60,
                       None)
            self.assertEqual((r["rc"], r["losses"]), (0, [2.5]))


if __name__ == "__main__":
    unittest.main()
