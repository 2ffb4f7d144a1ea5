#!/usr/bin/env python3
"""Samples the GPU's used memory through NVML (device-wide, what the driver holds, managed pages
resident on the GPU included) while a command runs, and prints its peak.

Why: umswap's "peak GPU-resident" is counted from CUPTI's transfer records; this is the driver's
own figure, to check that count against. Device-wide: run it on an otherwise idle GPU.

    python3 bench/gpu_used_sampler.py [--interval-ms 2] [--tail 0.4] -- command [args...]

Prints one line: the used MiB before the command started, the peak over the whole run, and the
peak over its last --tail share of wall time (to leave out start-up and learning).
"""
import argparse
import ctypes
import subprocess
import sys
import threading
import time


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def nvml_used_reader(index):
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        raise SystemExit("gpu_used_sampler: no NVML (libnvidia-ml.so.1): no NVIDIA driver here")
    if nvml.nvmlInit_v2() != 0:
        raise SystemExit("gpu_used_sampler: nvmlInit failed")
    handle = ctypes.c_void_p()
    if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
        raise SystemExit("gpu_used_sampler: no GPU %d" % index)
    mem = Memory()

    def used():
        nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem))
        return mem.used
    return used


def sample_while(cmd, used, interval_ms, tail):
    """Runs cmd, calling used() every interval_ms meanwhile. Returns (used before it, peak, peak
    over the last `tail` share of its wall time, samples taken, its exit code)."""
    before = used()
    samples = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            samples.append((time.monotonic(), used()))
            time.sleep(interval_ms / 1000.0)
    t = threading.Thread(target=sample, daemon=True)
    start = time.monotonic()
    t.start()
    rc = subprocess.call(cmd)
    stop.set()
    t.join()
    end = time.monotonic()
    peak = max((u for _, u in samples), default=0)
    late = max((u for s, u in samples if s >= end - tail * (end - start)), default=0)
    return before, peak, late, len(samples), rc


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--interval-ms", type=float, default=2.0)
    p.add_argument("--tail", type=float, default=0.4, help="share of the run at its end (0-1]")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("no command")
    if not 0 < a.tail <= 1:
        p.error("--tail must be in (0, 1]")
    before, peak, late, n, rc = sample_while(cmd, nvml_used_reader(a.gpu), a.interval_ms, a.tail)
    mib = 1024.0 * 1024.0
    print("gpu_used_sampler: before %.0f MiB, peak %.0f MiB, peak in the last %.0f%% %.0f MiB, "
          "%d samples, rc %d" % (before / mib, peak / mib, a.tail * 100, late / mib, n, rc),
          flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
