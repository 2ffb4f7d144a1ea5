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

    def test_natives_agreeing_without_deterministic_algorithms_agreed_by_chance(self):
        n = run([10.0, 9.0, 8.0])
        n["summary"]["deterministic"] = False
        self.assertEqual(cm.judge(n, n, run([10.0, 9.0, 8.0]))[0], "identical")
        # The spread rule with no spread: half a percent of the natives' loss.
        self.assertEqual(cm.judge(n, n, run([10.0, 9.0, 8.03]))[0], "within")
        self.assertEqual(cm.judge(n, n, run([10.0, 9.0, 8.05]))[0], "OUTSIDE")

    def test_a_model_whose_deterministic_natives_differ_in_a_row_promises_no_bits(self):
        same = run([10.0, 9.0, 8.0], "abc")
        other = run([10.0, 9.0, 8.0001], "abd")
        cut = run([10.0, 9.0], rc=124)
        natives = {("decoder", "async", "on", 1): same, ("decoder", "async", "on", 2): same,
                   ("decoder", "default", "on", 1): same, ("decoder", "default", "on", 2): other,
                   # Bits per allocator, other bits on the other: still a promise in each row.
                   ("cnn", "async", "on", 1): same, ("cnn", "async", "on", 2): same,
                   ("cnn", "default", "on", 1): other, ("cnn", "default", "on", 2): other,
                   # A crashed, a cut and a native never started say nothing.
                   ("mlm", "async", "on", 1): same, ("mlm", "async", "on", 2): cut,
                   ("mlm", "default", "on", 1): run([10.0], rc=1), ("mlm", "default", "on", 2): None,
                   ("lstm", "async", "off", 1): same, ("lstm", "async", "off", 2): other}
        self.assertEqual(cm.bitwise_models(natives), {"cnn", "mlm"})
        # The decoder's async natives agreed by chance: the spread rule judges its run.
        u = run([10.0, 9.0, 8.001], "abe")
        self.assertEqual(cm.judge(same, same, u, bitwise=True)[0], "DIFFERS")
        self.assertEqual(cm.judge(same, same, u, bitwise=False)[0], "within")
        self.assertEqual(cm.judge(same, same, run([10.0, 9.0, 8.1]), bitwise=False)[0], "OUTSIDE")
        self.assertEqual(cm.judge(same, same, run([10.0, 9.0], rc=124), bitwise=False)[0],
                         "TIMEOUT, 2 of 3 within")

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
        # Rows that also replay (50%) start with the 25% rows of their model.
        self.assertEqual(cm.longest_first(keys, twice={50}), [
            ("decoder", "default", "on", 25, 1), ("decoder", "default", "on", 50, 1),
            ("decoder", "async", "off", 25, 1), ("lstm", "default", "off", 25, 1),
            ("cnn", "default", "off", 25, 1), ("cnn", "async", "off", 100, 1)])
        # --repeat: every row's first run before any row's second (the sixth field).
        repeated = [("cnn", "async", "off", 25, 1, 2), ("decoder", "async", "off", 50, 1, 2),
                    ("cnn", "async", "off", 25, 1, 1), ("decoder", "async", "off", 50, 1, 1)]
        self.assertEqual(cm.longest_first(repeated), [
            ("cnn", "async", "off", 25, 1, 1), ("decoder", "async", "off", 50, 1, 1),
            ("cnn", "async", "off", 25, 1, 2), ("decoder", "async", "off", 50, 1, 2)])

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


class PlannedIterations(unittest.TestCase):
    def stats(self, first_plan=None, plan=None):
        its = [{"index": i, "first_step": 100 * i, "peak_resident_bytes": p}
               for i, p in enumerate([9000, 8000, 1000, 1100, 1050])]
        adv = {}
        if first_plan is not None:
            adv["first_plan_applied_from_launch"] = first_plan
        if plan is not None:
            adv["plan"] = {"applied_from_launch": plan}
        return {"advisor": adv, "iterations": its}

    def test_the_peak_after_the_iteration_the_first_plan_began_in(self):
        # The plan from launch 150: iteration 2 (first step 200) is the first under it; the peak
        # is of iterations 3 and 4, as umswap compare takes them.
        self.assertEqual(cm.planned_iterations(self.stats(first_plan=150)), (2, 1100))
        # The first plan wins over the one in force at the end (a relearned plan).
        self.assertEqual(cm.planned_iterations(self.stats(first_plan=150, plan=350)), (2, 1100))
        self.assertEqual(cm.planned_iterations(self.stats(plan=300)), (3, 1050))

    def test_iterations_under_the_plan_over_the_budget_by_more_than_two_percent(self):
        s = self.stats(first_plan=150)
        s["advisor"]["budget_bytes"] = 1060  # 1081.2 with the 2%: 1100 is over, 1050 is not
        self.assertEqual(cm.planned_over_budget(s), [1, 2])
        s["advisor"]["budget_bytes"] = 1000
        self.assertEqual(cm.planned_over_budget(s), [2, 2])
        self.assertIsNone(cm.planned_over_budget(self.stats()))  # no plan
        self.assertIsNone(cm.planned_over_budget(self.stats(first_plan=150)))  # no budget

    def test_records_short_when_more_came_in_than_could_have_left(self):
        s = self.stats()
        s["allocator"] = {"managed_bytes_peak": 1000}
        for it, (i, o) in zip(s["iterations"], [(900, 0), (800, 300), (700, 200), (0, 0), (0, 0)]):
            it["bytes_htod"], it["bytes_dtoh"] = i, o
        self.assertEqual(cm.records_short(s), 900)  # 2400 in, 500 out, 1000 managed
        s["allocator"]["managed_bytes_peak"] = 1900
        self.assertEqual(cm.records_short(s), 0)
        self.assertIsNone(cm.records_short(self.stats()))  # no allocator figures

    def test_no_plan_or_no_iteration_after_it(self):
        self.assertEqual(cm.planned_iterations(self.stats()), (None, None))
        self.assertEqual(cm.planned_iterations(self.stats(first_plan=400)), (4, None))
        self.assertEqual(cm.planned_iterations(self.stats(first_plan=900)), (None, None))
        self.assertEqual(cm.planned_iterations({}), (None, None))


class RelearnedOverBudget(unittest.TestCase):
    def stats(self, first, last, peaks, budget=100):
        return {"advisor": {"first_plan_applied_from_launch": first, "budget_bytes": budget,
                            "plan": {"applied_from_launch": last}},
                "iterations": [{"first_step": 100 * i, "peak_resident_bytes": p}
                               for i, p in enumerate(peaks)]}

    def test_counts_the_iterations_after_the_one_the_relearned_plan_began_in(self):
        # First plan from iteration 1, relearned from iteration 3: iterations 4 and 5 count.
        s = self.stats(100, 300, [150, 150, 130, 130, 100, 103])
        self.assertEqual(cm.relearned_over_budget(s), [1, 2])

    def test_none_without_a_relearned_plan_or_an_iteration_after_it(self):
        self.assertIsNone(cm.relearned_over_budget(self.stats(100, 100, [150, 100, 100])))
        self.assertIsNone(cm.relearned_over_budget(self.stats(100, 500, [150, 100, 100])))
        self.assertIsNone(cm.relearned_over_budget(self.stats(100, 200, [150, 100, 100])))
        self.assertIsNone(cm.relearned_over_budget(self.stats(None, 200, [150, 100, 100])))
        self.assertIsNone(cm.relearned_over_budget({}))


class StatsOf(unittest.TestCase):
    def test_a_row_carries_what_could_explain_a_changed_result(self):
        import json
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.json")
            with open(path, "w") as f:
                json.dump({"advisor": {"stale_actions": 88, "plans": 2,
                                       "drop_order": {"pages_kept": 5, "pages_left_out": 7,
                                                      "stopped": False}},
                           "allocator": {"async_slabs": {"discarded_bytes": 1000}},
                           "torch_blocks": {"discarded_bytes": 24}}, f)
            row = cm.stats_of(path)
            self.assertEqual((row["discarded_bytes"], row["stale_actions"], row["plans"]),
                             (1024, 88, 2))
            self.assertEqual((row["drops_kept"], row["moves_left_out"], row["drops_stopped"]),
                             (5, 7, False))
            with open(path, "w") as f:  # engine vmm or PyTorch's default allocator: none there
                json.dump({"advisor": {}, "torch_blocks": {"discarded_bytes": None}}, f)
            row = cm.stats_of(path)
            self.assertEqual((row["discarded_bytes"], row["stale_actions"], row["plans"]),
                             (None, None, None))
            self.assertIsNone(row["drops_kept"])


class Report(unittest.TestCase):
    def test_a_row_shows_the_peak_under_the_plan_and_the_iteration_it_began(self):
        self.row(None)

    def test_a_row_counts_the_planned_iterations_over_the_budget(self):
        self.row(1060)

    def test_a_row_whose_waits_the_watchdog_released_is_marked(self):
        self.row(1060, stalls=2)

    def test_a_row_whose_plan_has_launches_over_the_budget_is_marked(self):
        self.row(1060, unfit=3)

    def test_a_row_with_a_relearned_plan_counts_the_iterations_under_it(self):
        self.row(1060, relearned=True)

    def row(self, budget, stalls=0, unfit=0, relearned=False):
        import argparse
        import io
        import json
        import tempfile
        from contextlib import redirect_stdout
        with tempfile.TemporaryDirectory() as d:
            stats = os.path.join(d, "s.json")
            with open(stats, "w") as f:
                s = PlannedIterations().stats(first_plan=150) | {"peak_resident_bytes": 9000}
                if budget is not None:
                    s["advisor"]["budget_bytes"] = budget
                s["advisor"]["wait_stalls"] = stalls
                if unfit:
                    s["advisor"]["plan"] = {"unfit_steps": unfit}
                if relearned:  # relearned in iteration 3: iteration 4 (1050 bytes) counts
                    s["advisor"]["plan"] = {"applied_from_launch": 250}
                json.dump(s, f)
            n = {"rc": 0, "losses": [1.0, 0.9, 0.8], "ms": [5, 4, 4], "summary": {}}
            u = dict(n, ms=[9, 8, 8], seconds=1.0)
            a = argparse.Namespace(models="cnn", allocators="async", determinism="off",
                                   budgets="50", markdown=os.path.join(d, "m.md"),
                                   json=os.path.join(d, "m.json"))
            natives = {("cnn", "async", "off", 1): n, ("cnn", "async", "off", 2): n}
            results = [(("cnn", "async", "off", 50, 1024, stats), u)]
            with redirect_stdout(io.StringIO()):
                self.assertEqual(cm.report(a, natives, results, 0.0, d), 0)
            row = open(a.markdown).read().splitlines()[2]
            # 9000 and 1100 bytes in GiB; the plan began in iteration 2.
            if budget is None:  # no budget in the stats: no count
                self.assertIn("| 0.00 (0.00) / 0.00 | 2 |", row)
            elif stalls:  # the same, and the watchdog turned the waits off
                self.assertIn("| 0.00 (0.00; 1 of 2; †) / 0.00 | 2 |", row)
            elif unfit:  # the same, and the plan's launches over the budget on their own
                self.assertIn("| 0.00 (0.00; 1 of 2; ‡) / 0.00 | 2 |", row)
            elif relearned:  # the same, and none of the one iteration under the relearned plan
                self.assertIn("| 0.00 (0.00; 1 of 2 → 0 of 1) / 0.00 | 2 |", row)
            else:  # iterations 3 and 4 under the plan, 1100 over 1060 by more than 2%
                self.assertIn("| 0.00 (0.00; 1 of 2) / 0.00 | 2 |", row)
            rows = json.load(open(a.json))["rows"]
            self.assertEqual(rows[0]["wait_stalls"], stalls)
            self.assertEqual(rows[0]["unfit_steps"], unfit or None)
            self.assertEqual(rows[0]["relearned_over_budget"], [0, 1] if relearned else None)
            self.assertEqual((rows[0]["peak_planned"], rows[0]["plan_from_iteration"]), (1100, 2))


class Replays(unittest.TestCase):
    """A command's second run, replaying what its first cached (--replays)."""

    def report(self, d, modes, replays="50", logs=None):
        import argparse
        import io
        import json
        from contextlib import redirect_stdout
        n = {"rc": 0, "losses": [1.0, 0.9, 0.8], "ms": [5, 4, 4], "summary": {}}
        results = []
        for name, mode in modes.items():
            stats = os.path.join(d, name + ".json")
            with open(stats, "w") as f:
                json.dump({"advisor": {"mode": mode}, "iterations": []}, f)
            log = os.path.join(d, name + ".log")
            if logs and name in logs:
                with open(log, "w") as f:
                    f.write(logs[name])
            u = dict(n, ms=[9, 8, 8], seconds=1.0, log=log)
            results.append((("cnn", "async", "off", 50, 1024, stats), u))
        a = argparse.Namespace(models="cnn", allocators="async", determinism="off",
                               budgets="50", replays=replays, markdown=os.path.join(d, "m.md"),
                               json=os.path.join(d, "m.json"))
        natives = {("cnn", "async", "off", 1): n, ("cnn", "async", "off", 2): n}
        with redirect_stdout(io.StringIO()):
            rc = cm.report(a, natives, results, 0.0, d)
        return rc, json.load(open(a.json))["rows"], open(a.markdown).read()

    def test_a_second_run_that_replayed_passes_and_says_so(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            rc, rows, md = self.report(d, {"cnn-async-detoff-b50": "online",
                                           "cnn-async-detoff-b50-replay": "replay"})
            self.assertEqual(rc, 0)
            self.assertEqual([(r["run"], r["verdict"]) for r in rows],
                             [("first", "identical"), ("replay", "identical")])
            self.assertIn("| 50% (0.00 GiB), replayed | identical |", md)

    def test_a_second_run_that_learned_fails(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            rc, rows, _ = self.report(d, {"cnn-async-detoff-b50": "online",
                                          "cnn-async-detoff-b50-replay": "online"})
            self.assertEqual(rc, 1)
            self.assertEqual(rows[1]["verdict"], "NOT REPLAYED")

    def test_a_second_run_after_a_first_that_cached_fails_unless_it_replayed(self):
        import tempfile
        cached = "umswap: plan cached for the next run of this command (key 1)\n"
        with tempfile.TemporaryDirectory() as d:
            rc, rows, _ = self.report(d, {"cnn-async-detoff-b50": "online",
                                          "cnn-async-detoff-b50-replay": "online"},
                                      logs={"cnn-async-detoff-b50": cached})
            self.assertEqual((rc, rows[1]["verdict"]), (1, "NOT REPLAYED"))

    def test_a_second_run_after_a_first_that_cached_nothing_is_judged_as_a_first(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            rc, rows, md = self.report(d, {"cnn-async-detoff-b50": "online",
                                           "cnn-async-detoff-b50-replay": "online"},
                                       logs={"cnn-async-detoff-b50": "umswap: 0 iterations\n"})
            self.assertEqual(rc, 0)
            self.assertEqual(rows[1]["verdict"], "identical, nothing cached")
            self.assertIn("replayed | identical, nothing cached |", md)

    def test_a_missing_second_run_is_not_run(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            rc, rows, _ = self.report(d, {"cnn-async-detoff-b50": "online"})
            self.assertEqual(rc, 1)
            self.assertEqual((rows[1]["run"], rows[1]["verdict"]), ("replay", "NOT RUN"))
            rc, rows, _ = self.report(d, {"cnn-async-detoff-b50": "online"}, replays="")
            self.assertEqual((rc, len(rows)), (0, 1))

    def test_the_second_run_starts_only_after_the_first(self):
        order = []
        self.assertEqual(cm.run_twice(lambda: order.append(1) or "a",
                                      lambda: order.append(2) or "b"), ["a", "b"])
        self.assertEqual(order, [1, 2])
        self.assertEqual(cm.run_twice(lambda: None, lambda: order.append(3) or "c"),
                         [None, None])
        self.assertEqual(order, [1, 2])

    def test_rejudge_reads_the_second_runs_logs(self):
        import argparse
        import io
        import json
        import tempfile
        from contextlib import redirect_stdout
        with tempfile.TemporaryDirectory() as d:
            native = "iter 0 ms 5 loss 1.0\niter 1 ms 4 loss 0.9\n" + \
                'summary {"peak_reserved_bytes": 2048}\n[matrix: exit 0 after 1.0 s]\n'
            for k in (1, 2):
                open(os.path.join(d, f"cnn-async-detoff-native{k}.log"), "w").write(native)
            for name, mode in (("b50", "online"), ("b50-replay", "replay")):
                open(os.path.join(d, f"cnn-async-detoff-{name}.log"), "w").write(native)
                json.dump({"advisor": {"mode": mode}},
                          open(os.path.join(d, f"cnn-async-detoff-{name}.json"), "w"))
            a = argparse.Namespace(models="cnn", allocators="async", determinism="off",
                                   budgets="50", replays="50", rejudge=d, markdown=None,
                                   json=os.path.join(d, "m.json"))
            with redirect_stdout(io.StringIO()):
                self.assertEqual(cm.rejudge(a), 0)
            rows = json.load(open(a.json))["rows"]
            self.assertEqual([(r["run"], r["verdict"], r["budget_bytes"]) for r in rows],
                             [("first", "identical", 1024), ("replay", "identical", 1024)])
            # With vmm rows asked for: the one left is NOT RUN; once its log is there, judged.
            a.engines = "um,vmm"
            with redirect_stdout(io.StringIO()):
                self.assertEqual(cm.rejudge(a), 1)
            rows = json.load(open(a.json))["rows"]
            self.assertEqual([(r["run"], r["verdict"]) for r in rows][2], ("vmm", "NOT RUN"))
            open(os.path.join(d, "cnn-async-detoff-b50-vmm.log"), "w").write(native)
            json.dump({"engine": "vmm", "vmm": {"gpu_and_program_bytes_peak": 512}},
                      open(os.path.join(d, "cnn-async-detoff-b50-vmm.json"), "w"))
            with redirect_stdout(io.StringIO()):
                self.assertEqual(cm.rejudge(a), 0)
            rows = json.load(open(a.json))["rows"]
            self.assertEqual([(r["run"], r["verdict"], r["peak_resident"]) for r in rows][2],
                             ("vmm", "identical", 512))

    def test_rejudge_takes_no_bits_from_natives_that_agreed_by_chance(self):
        import argparse
        import io
        import json
        import tempfile
        from contextlib import redirect_stdout

        def log(last, checksum):
            return (f"iter 0 ms 5 loss 1.0\niter 1 ms 4 loss {last}\n"
                    f'summary {{"deterministic": true, "peak_reserved_bytes": 2048, '
                    f'"checksum": "{checksum}"}}\n[matrix: exit 0 after 1.0 s]\n')
        with tempfile.TemporaryDirectory() as d:
            natives = {"async": (log(0.9, "aa"), log(0.9, "aa")),
                       "default": (log(0.9, "aa"), log(0.9001, "bb"))}
            for al, pair in natives.items():
                for k, text in enumerate(pair, 1):
                    open(os.path.join(d, f"decoder-{al}-deton-native{k}.log"), "w").write(text)
                open(os.path.join(d, f"decoder-{al}-deton-b50.log"), "w").write(
                    log(0.9002, "cc"))
                json.dump({"advisor": {"mode": "online"}},
                          open(os.path.join(d, f"decoder-{al}-deton-b50.json"), "w"))
            a = argparse.Namespace(models="decoder", allocators="async,default",
                                   determinism="on", budgets="50", replays="", rejudge=d,
                                   markdown=None, json=os.path.join(d, "m.json"))
            with redirect_stdout(io.StringIO()):
                self.assertEqual(cm.rejudge(a), 0)
            rows = json.load(open(a.json))["rows"]
            self.assertEqual([(r["allocator"], r["verdict"]) for r in rows],
                             [("async", "within"), ("default", "within")])
            # With the default pair agreeing too, the model promises bits: DIFFERS.
            open(os.path.join(d, "decoder-default-deton-native2.log"), "w").write(log(0.9, "aa"))
            with redirect_stdout(io.StringIO()):
                self.assertEqual(cm.rejudge(a), 1)
            rows = json.load(open(a.json))["rows"]
            self.assertEqual([r["verdict"] for r in rows], ["DIFFERS", "DIFFERS"])

    engines = "um"
    repeat = 1

    def test_main_with_vmm_rows_too(self):
        self.engines = "um,vmm"
        self.test_main_runs_each_second_run_after_its_first_with_its_own_cache()

    def test_main_repeats_every_row_with_a_cache_of_its_own(self):
        self.repeat = 2
        self.test_main_runs_each_second_run_after_its_first_with_its_own_cache()

    def test_main_runs_each_second_run_after_its_first_with_its_own_cache(self):
        """main() end to end with stand-ins: a model script, a umswap that 'caches' into
        XDG_CACHE_HOME (a file) and reports mode replay when it finds one, and a torch module."""
        import json
        import tempfile
        import textwrap
        import types
        from contextlib import redirect_stdout
        import io
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "model.py")
            with open(model, "w") as f:
                f.write(textwrap.dedent("""\
                    import sys
                    for i in range(3):
                        print(f"iter {i} ms 1.0 loss {1.0 - i / 10}")
                    print('summary {"peak_reserved_bytes": 4096}')
                    """))
            umswap = os.path.join(d, "umswap")
            with open(umswap, "w") as f:
                f.write(textwrap.dedent(f"""\
                    #!{sys.executable}
                    import json, os, subprocess, sys
                    a = sys.argv[1:]
                    assert a[0] == "run" and "--no-cache" not in a, a
                    stats = a[a.index("--stats") + 1]
                    if a[1:3] == ["--engine", "vmm"]:  # no advisor, no cache
                        rc = subprocess.call(a[a.index("--") + 1:])
                        json.dump({{"engine": "vmm", "vmm": {{"gpu_and_program_bytes_peak": 777}}}},
                                  open(stats, "w"))
                        sys.exit(rc)
                    cache = os.environ["XDG_CACHE_HOME"]
                    os.makedirs(cache, exist_ok=True)
                    plan = os.path.join(cache, "plan")
                    mode = "replay" if os.path.exists(plan) else "online"
                    open(plan, "a").write(a[a.index("--budget") + 1] + "\\n")
                    rc = subprocess.call(a[a.index("--") + 1:])
                    json.dump({{"advisor": {{"mode": mode}}}}, open(stats, "w"))
                    sys.exit(rc)
                    """))
            os.chmod(umswap, 0o755)
            out = os.path.join(d, "out")
            torch = types.ModuleType("torch")
            torch.cuda = types.SimpleNamespace(is_available=lambda: True)
            saved = (cm.MODELS, sys.argv, sys.modules.get("torch"))
            cm.MODELS = model
            sys.argv = ["correctness_matrix.py", "--umswap", umswap, "--models", "cnn,mlm",
                        "--allocators", "async", "--determinism", "off", "--budgets", "100,50",
                        "--no-cupy", "--jobs", "4", "--out", out, "--engines", self.engines,
                        "--json", os.path.join(d, "m.json"), "--repeat", str(self.repeat),
                        "--markdown", os.path.join(d, "m.md")]
            sys.modules["torch"] = torch
            try:
                with redirect_stdout(io.StringIO()):
                    self.assertEqual(cm.main(), 0)
            finally:
                cm.MODELS, sys.argv = saved[0], saved[1]
                if saved[2] is None:
                    del sys.modules["torch"]
                else:
                    sys.modules["torch"] = saved[2]
            rows = json.load(open(os.path.join(d, "m.json")))["rows"]
            expected = [("cnn", 50, "first", "online"), ("cnn", 50, "replay", "replay"),
                        ("cnn", 100, "first", "online"), ("mlm", 50, "first", "online"),
                        ("mlm", 50, "replay", "replay"), ("mlm", 100, "first", "online")]
            if "vmm" in self.engines:
                expected += [(m, b, "vmm", None) for m in ("cnn", "mlm") for b in (50, 100)]
            self.assertEqual(sorted(((r["model"], r["budget_pct"], r["run"], r["advisor_mode"])
                                     for r in rows), key=str),
                             sorted(expected * self.repeat, key=str))
            self.assertEqual(sorted(r.get("repeat", 1) for r in rows),
                             sorted(list(range(1, self.repeat + 1)) * len(expected)))
            if self.repeat > 1:
                self.assertIn("50% (0.00 GiB), replayed, repeat 2 |",
                              open(os.path.join(d, "m.md")).read())
            for r in rows:
                self.assertEqual(r["peak_resident"], 777 if r["run"] == "vmm" else None)
            # Each row's cache is its own: two runs in the 50% rows' caches, one in the others'.
            caches = {n: len(open(os.path.join(out, "cache", n, "plan")).read().split())
                      for n in os.listdir(os.path.join(out, "cache"))}
            want = {"cnn-async-detoff-b50": 2, "cnn-async-detoff-b100": 1,
                    "mlm-async-detoff-b50": 2, "mlm-async-detoff-b100": 1}
            for k in range(2, self.repeat + 1):
                want.update({f"{n}-r{k}": v for n, v in list(want.items()) if "-r" not in n})
            self.assertEqual(caches, want)


if __name__ == "__main__":
    unittest.main()
