#!/usr/bin/env python3
"""A CuPy training loop for umswap's correctness matrix: 24 dense tanh layers (4096 wide, batch
4096, fp32), forward keeping every activation, backward reading them in reverse, plain SGD on
the weights; 12 iterations. Everything goes through CuPy's memory pool (cudaMalloc underneath).

Prints `iter <i> ms <float> loss <repr>` per iteration, `footprint <bytes>` (weights, activations
and gradients held at the peak) and `checksum <hex>`: the weights after the last iteration, hashed
bit for bit (cuBLAS's GEMMs are deterministic for a fixed shape, so two native runs agree).
Exit 77 where CuPy or a GPU is missing.
"""
import hashlib
import sys
import time

LAYERS, WIDTH, BATCH, ITERATIONS = 24, 4096, 4096, 12


def footprint():
    """Bytes held at the peak: the weights, every activation, the target and two gradients."""
    return (LAYERS * WIDTH * WIDTH + (LAYERS + 3) * BATCH * WIDTH) * 4


def main():
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() == 0:
            raise RuntimeError("no GPU")
    except Exception as e:  # ImportError, CUDARuntimeError
        print(f"skip: {e}")
        return 77
    layers, width, batch, iterations = LAYERS, WIDTH, BATCH, ITERATIONS
    rng = cp.random.RandomState(7)
    w = [rng.standard_normal((width, width), dtype=cp.float32) * (1.0 / width ** 0.5)
         for _ in range(layers)]
    x = rng.standard_normal((batch, width), dtype=cp.float32)
    target = rng.standard_normal((batch, width), dtype=cp.float32)
    print(f"footprint {footprint()}", flush=True)
    for it in range(iterations):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        acts = [x]
        for k in range(layers):
            acts.append(cp.tanh(acts[-1] @ w[k]))
        diff = acts[-1] - target
        loss = float((diff * diff).mean())
        grad = diff * (2.0 / diff.size)
        for k in reversed(range(layers)):
            grad = grad * (1.0 - acts[k + 1] * acts[k + 1])
            update = acts[k].T @ grad
            grad = grad @ w[k].T
            w[k] -= 0.5 * update
            del update
        del acts, grad, diff
        cp.cuda.Device().synchronize()
        print(f"iter {it} ms {(time.perf_counter() - t0) * 1e3:.3f} loss {loss!r}", flush=True)
    h = hashlib.sha256()
    for m in w:
        h.update(cp.asnumpy(m).tobytes())
    print(f"checksum {h.hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
