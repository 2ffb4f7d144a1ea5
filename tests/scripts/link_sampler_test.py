#!/usr/bin/env python3
"""bench/link_sampler.py without a GPU: the bytes it adds up from a stand-in reader, and its
errors for bad arguments and for a machine without NVML; bench/nvml_managed_probe.py's exit
without a driver."""
import importlib.util
import os
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "link_sampler.py")
spec = importlib.util.spec_from_file_location("link_sampler", SCRIPT)
sampler = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sampler)


class Sampler(unittest.TestCase):
    def test_totals_are_rates_times_time(self):
        def rate(counter):  # 1 GB/s to the host, 3 GB/s to the GPU, each reading 20 ms
            time.sleep(0.02)
            return 1e9 if counter == sampler.TX else 3e9
        out, into, seconds, n, rc = sampler.sample_while(["sleep", "0.5"], rate)
        self.assertEqual(rc, 0)
        self.assertGreater(n, 10)
        # Each way counts the time from the start to its last reading, within one reading of
        # the command's 0.5 s.
        self.assertAlmostEqual(out / 1e9, seconds, delta=0.1)
        self.assertAlmostEqual(into / 3e9, seconds, delta=0.1)

    def test_the_commands_exit_code_comes_back(self):
        def rate(counter):
            time.sleep(0.01)
            return 0.0
        self.assertEqual(sampler.sample_while(["false"], rate)[4], 1)

    def test_bad_arguments(self):
        r = subprocess.run([sys.executable, SCRIPT, "--"], capture_output=True, text=True)
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
