#!/usr/bin/env python3
"""bench/gpu_used_sampler.py without a GPU: the peaks it reports from a stand-in reader, and its
errors for bad arguments and for a machine without NVML; bench/nvml_managed_probe.py's exit
without a driver."""
import importlib.util
import os
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "gpu_used_sampler.py")
spec = importlib.util.spec_from_file_location("gpu_used_sampler", SCRIPT)
sampler = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sampler)


class Sampler(unittest.TestCase):
    def test_peaks_over_the_run_and_its_tail(self):
        start = time.monotonic()

        def used():  # high in the first 0.2 s of a 0.6 s command, low after
            return 900 if time.monotonic() - start < 0.2 else 100
        before, peak, late, n, rc = sampler.sample_while(["sleep", "0.6"], used, 2, 0.4)
        self.assertEqual(before, 900)
        self.assertEqual(peak, 900)
        self.assertEqual(late, 100)  # the last 40% is after the high part
        self.assertGreater(n, 10)
        self.assertEqual(rc, 0)

    def test_the_commands_exit_code_comes_back(self):
        self.assertEqual(sampler.sample_while(["false"], lambda: 0, 2, 1.0)[4], 1)

    def test_bad_arguments(self):
        for args in (["--tail", "0", "--", "true"], ["--"]):
            r = subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, r.stderr)

    def test_without_nvml_it_says_so(self):
        try:
            import ctypes
            ctypes.CDLL("libnvidia-ml.so.1")
            self.skipTest("this machine has NVML")
        except OSError:
            pass
        r = subprocess.run([sys.executable, SCRIPT, "--", "true"], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no NVML", r.stderr)
        self.assertNotIn("Traceback", r.stderr)


class ManagedProbe(unittest.TestCase):
    def test_without_a_driver_it_exits_77(self):
        import ctypes
        try:
            ctypes.CDLL("libcuda.so.1")
            ctypes.CDLL("libnvidia-ml.so.1")
            self.skipTest("this machine has a driver")
        except OSError:
            pass
        probe = os.path.join(HERE, "..", "..", "bench", "nvml_managed_probe.py")
        r = subprocess.run([sys.executable, probe, "--gib", "0.01"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 77, r.stderr)
        self.assertNotIn("Traceback", r.stderr)


if __name__ == "__main__":
    unittest.main()
