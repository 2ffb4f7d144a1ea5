#!/usr/bin/env python3
"""CPU test of bench/allocator_trace_probe.py's checks (no GPU, no torch): the events a trace
tracker reports against themselves and against a memory snapshot."""
import os
import subprocess
import sys
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "..", "..", "bench", "allocator_trace_probe.py")
sys.path.insert(0, os.path.dirname(PROBE))
import allocator_trace_probe as p  # noqa: E402

MiB = 1 << 20


def ev(action, addr, size=0):
    return p.Event(action=action, addr=addr, size=size)


class Check(unittest.TestCase):
    def events(self):
        return [ev(p.SEGMENT_ALLOC, 0x1000000, 20 * MiB),
                ev(p.ALLOC, 0x1000000, 4 * MiB), ev(p.ALLOC, 0x1400000, 1000),
                ev(p.FREE_REQUESTED, 0x1000000), ev(p.FREE_COMPLETED, 0x1000000),
                ev(p.FREE_REQUESTED, 0x1400000)]  # still pending at the end

    def test_a_consistent_run_passes(self):
        problems, counts, live = p.check(self.events(), {0x1400000: 1000})
        self.assertEqual(problems, [])
        self.assertEqual(live, 1)
        self.assertEqual(counts, {"segment_alloc": 1, "alloc": 2, "free_requested": 2,
                                  "free_completed": 1})

    def test_each_inconsistency_is_named(self):
        events = self.events() + [ev(p.ALLOC, 0x9000000, 10), ev(p.FREE_COMPLETED, 0x7000000),
                                  ev(p.ALLOC, 0x1400000, 1000)]
        problems, _, _ = p.check(events, {0x1400000: 1000, 0x2000000: 64})
        text = "; ".join(problems)
        self.assertIn("1 blocks outside every segment seen", text)
        self.assertIn("1 frees of blocks not seen allocated", text)
        self.assertIn("1 blocks allocated twice", text)
        self.assertIn("1 blocks not seen, 1 seen but not in it", text)

    def test_a_size_that_differs_from_the_snapshot(self):
        problems, _, _ = p.check(self.events(), {0x1400000: 1024})
        self.assertIn("1 of another size", "; ".join(problems))

    def test_a_freed_segment_holds_no_later_block(self):
        events = [ev(p.SEGMENT_ALLOC, 0x1000000, 2 * MiB), ev(p.SEGMENT_FREE, 0x1000000),
                  ev(p.ALLOC, 0x1000000, 512)]
        problems, _, _ = p.check(events, {0x1000000: 512})
        self.assertIn("1 blocks outside every segment seen", "; ".join(problems))


class Snapshot(unittest.TestCase):
    def test_blocks_in_use_with_and_without_their_address(self):
        snap = {"segments": [
            {"address": 0x1000, "blocks": [
                {"size": 512, "requested_size": 500, "state": "active_allocated"},
                {"size": 512, "requested_size": 0, "state": "inactive"},
                {"size": 1024, "requested_size": 1000, "state": "active_pending_free"}]},
            {"address": 0x8000, "blocks": [
                {"address": 0x8000, "size": 256, "requested_size": 200,
                 "state": "active_allocated"}]}]}
        torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
            memory=types.SimpleNamespace(_snapshot=lambda: snap)))
        self.assertEqual(p.snapshot_blocks(torch), {0x1000: 500, 0x1400: 1000, 0x8000: 200})


class Layout(unittest.TestCase):
    def test_the_event_is_the_bridges_64_bytes(self):
        import ctypes
        self.assertEqual(ctypes.sizeof(p.Event), 64)


class Skip(unittest.TestCase):
    def test_without_torch_it_skips(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "no-torch-here"))
        r = subprocess.run([sys.executable, "-S", PROBE], stdout=subprocess.PIPE, text=True,
                           env=env)
        try:
            import torch  # noqa: F401
            self.skipTest("torch is importable here")
        except ImportError:
            pass
        self.assertEqual(r.returncode, 77, r.stdout)
        self.assertIn("skip: no torch", r.stdout)


if __name__ == "__main__":
    unittest.main()
