#!/usr/bin/env python3
"""CPU test of scripts/evict_copy_check.py: its parsing, and whole runs against a stand-in for
umswap and a stand-in training script (no GPU, no torch)."""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "evict_copy_check.py")
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import evict_copy_check as ecc  # noqa: E402

# Prints 4 iterations; under UMSWAP_EVICT_COPY=1 (pages discarded) and FAKE_SPIKE set, iteration
# 2's loss is off. With FAKE_WEIGHTS set the summary has a checksum, different under
# UMSWAP_DEBUG=keep-pages. FAKE_LOG gets each run's setting: 1, 0, keep or None (native).
TRAIN = textwrap.dedent("""\
    import json, os
    losses = [10.5, 10.1, 9.9, 9.8]
    copy = os.environ.get("UMSWAP_EVICT_COPY")
    if copy == "1" and "keep-pages" in os.environ.get("UMSWAP_DEBUG", ""):
        copy = "keep"
    if copy and os.environ.get("FAKE_SLOW"):
        __import__("time").sleep(float(os.environ["FAKE_SLOW"]))
    spike = copy == "1" and os.environ.get("FAKE_SPIKE")
    for i, x in enumerate(losses):
        print(f"iter {i} ms {100 + i:.3f} loss {x + (2.0 if spike and i == 2 else 0.0):.6f}")
    summary = {"steady_median_ms": 101.0, "peak_allocated_bytes": 1 << 30}
    if os.environ.get("FAKE_WEIGHTS"):
        summary["checksum"] = "bad" if copy == "keep" else "abc"
    with open(os.environ.get("FAKE_LOG", os.devnull), "a") as f:
        f.write(f"{copy}\\n")
    print("summary " + json.dumps(summary))
    """)
# `umswap run --limit L --budget B --stats F -- cmd...`: records its arguments, writes stats.
UMSWAP = textwrap.dedent("""\
    #!/usr/bin/env python3
    import json, subprocess, sys
    a = sys.argv[1:]
    assert a[0] == "run", a
    stats = a[a.index("--stats") + 1]
    with open(stats + ".args", "w") as f:
        env = __import__("os").environ
        json.dump({"args": a, "copy": env.get("UMSWAP_EVICT_COPY"),
                   "debug": env.get("UMSWAP_DEBUG")}, f)
    rc = subprocess.call(a[a.index("--") + 1:])
    json.dump({"iterations": [{"gpu_page_faults": 0, "wall_ms": 20.4, "copy_out_busy_ms": 9.6,
                               "copy_in_busy_ms": 8.2, "copy_both_busy_ms": 1.0}] * 4,
               "copy_check": {"copies": 10, "pages_checked": 5, "clashes": 1, "harmful": 1,
                              "idle": {"iteration": 3, "gaps": [
                                  {"at_ms": 12.25, "ms": 4.5, "steps_busy_ms": 4.0,
                                   "first_step": 90, "kernel": "ampere_sgemm"}]},
                              "first": [{"step": 7, "kernel": "k", "page": "0x200000",
                                         "kind": "discarded", "ns_into_span": 3}]},
               "advisor": {"opaque_calls": 3, "first_opaque_call": "a host function",
                           "evict_copy": {"guard_hits": 2, "rescued_bytes": 4096, "rescues": 0,
                                          "path": "kernel", "kernel_copies": 12,
                                          "engine_copies": 0, "kernel_off": "",
                                          "guard_kernels": ["launch 9 (ln): 4.00 KiB"]}}},
              open(stats, "w"))
    sys.exit(rc)
    """)


class Parsing(unittest.TestCase):
    def test_iterations_and_summary(self):
        text = "warmup\niter 0 ms 12.5 loss 3.25\niter 1 ms 11.0 loss nan\nsummary {\"a\": 1}\n"
        its = ecc.parse_iterations(text)
        self.assertEqual(its[0], (12.5, 3.25))
        self.assertNotEqual(its[1][1], its[1][1])  # nan
        self.assertEqual(ecc.parse_summary(text), {"a": 1})
        self.assertIsNone(ecc.parse_summary("summary {broken"))

    def test_budget(self):
        self.assertEqual(ecc.budget_bytes("29%", 1000), 290)
        self.assertEqual(ecc.budget_bytes("1.5G", None), 3 << 29)
        self.assertEqual(ecc.budget_bytes("4096", None), 4096)
        for bad in ("12Q", "-1G", "", "0%", "0G"):
            with self.assertRaises(ValueError):
                ecc.budget_bytes(bad, 1000)
        with self.assertRaises(ValueError):
            ecc.budget_bytes("50%", None)

    def test_worst_difference(self):
        native = {0: (1, 10.0), 1: (1, 9.0), 2: (1, 8.0)}
        self.assertEqual(ecc.worst_difference(native, {0: (1, 10.0), 1: (1, 9.5), 2: (1, 8.1)})[0], 1)
        self.assertEqual(ecc.worst_difference(native, {2: (1, float("nan"))}), (2, float("inf")))
        self.assertEqual(ecc.worst_difference(native, {}), (None, None))


class WholeRuns(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.train = os.path.join(self.dir, "train.py")
        with open(self.train, "w") as f:
            f.write(TRAIN)
        self.umswap = os.path.join(self.dir, "umswap")
        with open(self.umswap, "w") as f:
            f.write(UMSWAP)
        os.chmod(self.umswap, os.stat(self.umswap).st_mode | stat.S_IEXEC)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_check(self, env_extra, *args):
        out = os.path.join(self.dir, "out")
        cmd = [sys.executable, SCRIPT, "--umswap", self.umswap, "--limit", "4G", "--budget", "50%",
               "--out", out, "--json", os.path.join(self.dir, "r.json"), *args, "--", self.train]
        p = subprocess.run(cmd, env=dict(os.environ, **env_extra), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        return p, out

    def test_matching_runs_pass_and_each_variant_gets_its_setting(self):
        p, out = self.run_check({})
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn("all runs matched native", p.stdout)
        self.assertIn("copy_check: 1 harmful of 1 clashes", p.stdout)
        self.assertIn("caught launch 9 (ln)", p.stdout)
        self.assertIn("stream callbacks: 3 (first: a host function)", p.stdout)
        for name, setting in (("copy1", ("1", None)), ("keep1", ("1", "keep-pages"))):
            with open(os.path.join(out, name + ".json.args")) as f:
                seen = json.load(f)
            self.assertEqual((seen["copy"], seen["debug"]), setting)
            a = seen["args"]
            self.assertEqual(a[a.index("--budget") + 1], str((1 << 30) // 2))
            self.assertEqual(a[a.index("--limit") + 1], "4G")

    def test_a_one_iteration_spike_fails_the_run_and_names_the_iteration(self):
        p, _ = self.run_check({"FAKE_SPIKE": "1"}, "--variants", "copy,keep")
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("copy1 (UMSWAP_EVICT_COPY=1)", p.stdout)
        self.assertIn("keep1 (UMSWAP_EVICT_COPY=1 UMSWAP_DEBUG=keep-pages)", p.stdout)
        self.assertIn("at iteration 2: DIFFERS", p.stdout)
        with open(os.path.join(self.dir, "r.json")) as f:
            r = json.load(f)
        same = {x["name"]: x["same"] for x in r["runs"]}
        self.assertEqual(same, {"copy1": False, "keep1": True})

    def test_native_and_off_variants_and_the_weights_checksum(self):
        log = os.path.join(self.dir, "runs.log")
        p, out = self.run_check({"FAKE_WEIGHTS": "1", "FAKE_LOG": log},
                                "--variants", "native,off,keep")
        self.assertEqual(p.returncode, 1, p.stdout)
        # native twice (the reference, then the variant) without umswap, then off and keep under it
        with open(log) as f:
            self.assertEqual(f.read().split(), ["None", "None", "0", "keep"])
        self.assertIn("native1 (without umswap)", p.stdout)
        self.assertIn("off1 (UMSWAP_EVICT_COPY=0)", p.stdout)
        self.assertIn("final weights DIFFER", p.stdout)
        self.assertFalse(os.path.exists(os.path.join(out, "native1.json.args")))
        with open(os.path.join(self.dir, "r.json")) as f:
            r = json.load(f)
        got = {x["name"]: (x["same"], x["weights"]) for x in r["runs"]}
        self.assertEqual(got, {"native1": (True, "same"), "off1": (True, "same"),
                               "keep1": (False, "DIFFER")})

    def test_a_run_past_the_timeout_is_said_to_be_killed(self):
        p, _ = self.run_check({"FAKE_SLOW": "3"}, "--variants", "copy", "--timeout", "1")
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("(killed at --timeout)", p.stdout)

    def test_the_copy_variant_says_what_made_the_copies(self):
        p, out = self.run_check({}, "--variants", "copy")
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertIn("copy1 (UMSWAP_EVICT_COPY=1)", p.stdout)
        self.assertIn("copy path kernel: 12 kernel copies, 0 copy-engine copies", p.stdout)
        self.assertIn("copies busy per iteration, out/in/both ms of wall: 10/8/1 of 20 10/8/1",
                      p.stdout)
        self.assertIn("no copy either way, iteration 3", p.stdout)
        self.assertIn("    12.2: 4.5, 4.0, ampere_sgemm", p.stdout)
        with open(os.path.join(out, "copy1.json.args")) as f:
            seen = json.load(f)
        self.assertEqual((seen["copy"], seen["debug"]), ("1", None))

    def test_bad_arguments(self):
        # kernel: a variant until the copy kernel became the only copy path (issue 37)
        for bad in ("fast", "kernel"):
            p, _ = self.run_check({}, "--variants", bad)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn("--variants", p.stdout)


if __name__ == "__main__":
    unittest.main()
