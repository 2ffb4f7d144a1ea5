#!/usr/bin/env python3
"""A launch-bound PyTorch loop: many tiny kernels per iteration, to measure per-launch overhead.

Each iteration launches exactly --ops elementwise kernels (torch.add with out=, one kernel each)
on small tensors, so its time is almost all launch cost. Prints per iteration
    iter <i> ms <float>
then `summary {json}` with first_ms, steady_median_ms and launches_per_iteration.
Exit: 0 done, 2 bad arguments, 77 skipped (no torch or CUDA).
"""
import argparse
import json
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=2000, help="kernels per iteration (default 2000)")
    p.add_argument("--steps", type=int, default=20, help="iterations (default 20)")
    p.add_argument("--size", type=int, default=1024, help="elements per tensor (default 1024)")
    a = p.parse_args()
    if a.ops < 1 or a.steps < 1 or a.size < 1:
        p.error("--ops, --steps and --size must be at least 1")
    try:
        import torch
    except ImportError as e:
        print(f"skip: torch is not importable ({e})")
        return 77
    if not torch.cuda.is_available():
        print("skip: torch sees no CUDA device")
        return 77
    torch.manual_seed(0)
    xs = [torch.rand(a.size, device="cuda") for _ in range(8)]
    out = torch.empty(a.size, device="cuda")
    times = []
    for i in range(a.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for k in range(a.ops):
            torch.add(xs[k % 8], xs[(k + 3) % 8], out=out)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3
        times.append(ms)
        print(f"iter {i} ms {ms:.3f}", flush=True)
    steady = times[2:] if len(times) > 2 else []
    print("summary " + json.dumps({
        "first_ms": times[0],
        "steady_median_ms": statistics.median(steady) if steady else None,
        "launches_per_iteration": a.ops,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
