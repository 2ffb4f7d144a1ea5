#!/usr/bin/env python3
"""Measures the bytes that cross the GPU's PCIe link each way while a command runs, from NVML's
PCIe throughput counters: a check on umswap's counts of bytes moved, which come from CUPTI's
records, by a source that does not.

    python3 bench/link_sampler.py [--gpu 0] -- command [args...]

nvmlDeviceGetPcieThroughput gives the link's rate one way over a 20 ms window; the sampler reads
the two ways in turn, back to back, and counts each reading for the time since that way's last
one, so each way is measured half the time and the totals are estimates (calibrate them with a
command that moves known bytes: bench/nvml_managed_probe.py moves 6 GiB each way at --gib 2).
Device-wide: everything on the GPU's link counts, so run it on an otherwise idle GPU. Prints one
line: GB to the host (the GPU sends), GB to the GPU (it receives), seconds, readings, exit code.
Why not the GPU's used memory: managed memory leaving the GPU does not lower it (NVML's used
memory and cuMemGetInfo stayed put, bench/nvml_managed_probe.py on an H200, 2026-11-30).
"""
import argparse
import ctypes
import subprocess
import sys
import threading
import time

TX, RX = 0, 1  # nvmlPcieUtilCounter_t: bytes the GPU sends (to the host), receives (to the GPU)


def nvml_rate_reader(index):
    """A function of the counter that returns its bytes per second over NVML's window."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        raise SystemExit("link_sampler: no NVML (libnvidia-ml.so.1): no NVIDIA driver here")
    if nvml.nvmlInit_v2() != 0:
        raise SystemExit("link_sampler: nvmlInit failed")
    handle = ctypes.c_void_p()
    if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0:
        raise SystemExit("link_sampler: no GPU %d" % index)
    value = ctypes.c_uint()

    def rate(counter):
        r = nvml.nvmlDeviceGetPcieThroughput(handle, counter, ctypes.byref(value))
        if r != 0:
            raise SystemExit("link_sampler: nvmlDeviceGetPcieThroughput failed (%d): this GPU "
                             "does not report its PCIe throughput" % r)
        return value.value * 1024.0  # KB/s
    rate(TX)
    return rate


def sample_while(cmd, rate):
    """Runs cmd, reading rate(TX) and rate(RX) in turn meanwhile. Returns (bytes to the host,
    bytes to the GPU, seconds, readings, the command's exit code)."""
    totals, last, readings = [0.0, 0.0], [None, None], [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            for counter in (TX, RX):
                value = rate(counter)
                now = time.monotonic()
                if last[counter] is not None:
                    totals[counter] += value * (now - last[counter])
                last[counter] = now
                readings[0] += 1
    start = time.monotonic()
    last[TX] = last[RX] = start
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    rc = subprocess.call(cmd)
    stop.set()
    t.join()
    return totals[TX], totals[RX], time.monotonic() - start, readings[0], rc


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("no command")
    out, into, seconds, n, rc = sample_while(cmd, nvml_rate_reader(a.gpu))
    print("link_sampler: %.2f GB to the host, %.2f GB to the GPU over %.1f s (%d readings), rc %d"
          % (out / 1e9, into / 1e9, seconds, n, rc), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
