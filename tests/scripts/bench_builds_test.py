#!/usr/bin/env python3
"""CPU test of scripts/bench_builds.py with stand-ins: a workload printing iteration lines and two
fake `umswap` commands (one slower, one failing on request) that run it and write a stats file."""
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "bench_builds.py")

# Prints six iterations: 10 ms each times FACTOR (2 ms of host each), the last three steady.
WORKLOAD = """import os
f = float(os.environ.get("FACTOR", "1"))
for i, ms in enumerate([50, 40, 30, 10, 10, 10]):
    print(f"iter {i} wall {ms * f:.1f} host {ms * f / 5:.1f} loss 1.0")
"""

# `umswap run [options] --stats F -- cmd...`: runs cmd with FACTOR set, writes a stats file.
FAKE_UMSWAP = """#!{python}
import json, os, subprocess, sys
args = sys.argv[1:]
assert args[0] == "run", args
stats = args[args.index("--stats") + 1]
cmd = args[args.index("--") + 1:]
if "--fail" in args:
    sys.exit(3)
json.dump({{"vmm": {{"allocate_ms": {alloc}, "free_ms": 5.0, "driver_calls":
          {{"cuEventQuery": {{"calls": 100, "ms": 1.5}}, "cuMemMap": {{"calls": 2, "ms": 2.5}},
            "cuMemCreate": {{"calls": 3, "ms": 50.0}},
            "cuMemCreate (host)": {{"calls": 1, "ms": 40.0}}}}}}}},
          open(stats, "w"))
sys.exit(subprocess.run(cmd, env=dict(os.environ, FACTOR="{factor}")).returncode)
"""


class BenchBuildsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.workload = os.path.join(self.dir, "work.py")
        with open(self.workload, "w") as f:
            f.write(WORKLOAD)
        self.fast = self.fake("fast", factor=2, alloc=20)
        self.slow = self.fake("slow", factor=3, alloc=40)

    def fake(self, name, factor, alloc):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(FAKE_UMSWAP.format(python=sys.executable, factor=factor, alloc=alloc))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return path

    def bench(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args, "--", sys.executable,
                               self.workload], capture_output=True, text=True)

    def test_table_of_native_and_two_builds(self):
        out = os.path.join(self.dir, "out.json")
        p = self.bench("--native", "--build", f"A={self.slow}", "--build", f"B={self.fast}",
                       "--run-args", "--engine vmm --limit 1G", "--rounds", "2",
                       "--json", out, "--out", os.path.join(self.dir, "logs"))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        # Steady = median of the last three: 10 ms natively, 30 and 20 under the fakes.
        self.assertIn("| native | 10.0, 10.0 | 10.0 | 1.00 | 0.33 | 2.0 |", p.stdout)
        self.assertIn("| A | 30.0, 30.0 | 30.0 | 3.00 | 1.00 | 6.0 | 40 / 5 | 54 | 100 |",
                      p.stdout)
        self.assertIn("| B | 20.0, 20.0 | 20.0 | 2.00 | 0.67 | 4.0 | 20 / 5 | 54 | 100 |",
                      p.stdout)
        # Round 2 runs the entries in reverse order.
        rounds = [l.split(":")[0] for l in p.stdout.splitlines() if l.startswith("round ")]
        self.assertEqual(rounds, ["round 1 native", "round 1 A", "round 1 B",
                                  "round 2 B", "round 2 A", "round 2 native"])
        with open(out) as f:
            result = json.load(f)
        self.assertEqual(result["entries"]["B"]["median_ms"], 20.0)
        self.assertEqual(result["entries"]["A"]["failed_runs"], 0)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "logs", "r2_A.json")))

    def test_a_failing_run_fails_the_benchmark(self):
        p = self.bench("--build", f"A={self.fast}", "--run-args=--fail", "--rounds", "1")
        self.assertEqual(p.returncode, 1)
        self.assertIn("failed or printed no iterations", p.stderr)
        self.assertIn("| A | - | - |", p.stdout)

    def test_bad_arguments(self):
        for args in (["--rounds", "1"],  # no build
                     ["--build", "A"], ["--build", "A=x", "--build", "A=y"],
                     ["--build", "native=x"], ["--build", "A=x", "--rounds", "0"]):
            p = self.bench(*args)
            self.assertEqual(p.returncode, 2, args)
        p = subprocess.run([sys.executable, SCRIPT, "--build", "A=x"], capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("after --", p.stderr)


if __name__ == "__main__":
    unittest.main()
