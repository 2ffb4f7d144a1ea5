#!/usr/bin/env python3
"""A chain of identical layers, each with its own weights, and nothing else in an iteration: the
loop whose kernels repeat with one layer's period while its data repeat with the whole chain's
(issue 39). 24 layers of an 8192 x 8192 fp32 matmul and tanh, forward only, through CuPy's memory
pool; about 6.3 GiB of weights and two 256 MiB activations.

    python3 cupy_chain.py [--iterations N] [--layers L]

Prints `iter <i> ms <float>` per iteration (synchronized) and `checksum <hex>` (the last output's
bits hashed: cuBLAS's GEMM is deterministic for a fixed shape). Exit 77 where CuPy or a GPU is
missing.
"""
import argparse
import hashlib
import sys
import time

WIDTH = 8192


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=16)
    p.add_argument("--layers", type=int, default=24)
    a = p.parse_args()
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no GPU")
    except Exception as e:  # ImportError, CUDARuntimeError
        print(f"skip: {e}")
        return 77
    rng = cp.random.default_rng(0)
    weights = [(rng.standard_normal((WIDTH, WIDTH), dtype=cp.float32) / WIDTH ** 0.5)
               for _ in range(a.layers)]
    x0 = rng.standard_normal((WIDTH, WIDTH), dtype=cp.float32)
    a_buf = cp.empty_like(x0)
    b_buf = cp.empty_like(x0)
    cp.cuda.Device().synchronize()
    for i in range(a.iterations):
        start = time.perf_counter()
        x = x0
        for l, w in enumerate(weights):
            out = a_buf if l % 2 == 0 else b_buf
            cp.matmul(x, w, out=out)
            cp.tanh(out, out=out)
            x = out
        cp.cuda.Device().synchronize()
        print(f"iter {i} ms {(time.perf_counter() - start) * 1e3:.3f}", flush=True)
    print("checksum " + hashlib.sha256(cp.asnumpy(x).tobytes()).hexdigest()[:16])
    return 0


if __name__ == "__main__":
    sys.exit(main())
