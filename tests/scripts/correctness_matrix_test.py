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


if __name__ == "__main__":
    unittest.main()
