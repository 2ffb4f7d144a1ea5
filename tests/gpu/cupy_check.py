#!/usr/bin/env python3
"""CuPy smoke test: a CuPy program allocates through its memory pool (cudaMalloc underneath),
so under umswap its arrays are managed memory; the results must still be exact.

Prints `cupy OK <sum>` and exits 0; `cupy FAIL: <why>` and exit 1 on a wrong result;
`skip: <reason>` and exit 77 where CuPy or a GPU is missing.
"""

import sys


def main():
    try:
        import cupy as cp
    except ImportError as e:
        print(f"skip: cupy is not importable ({e})")
        return 77
    try:
        devices = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError (no driver, no device) or a missing CUDA library
        print(f"skip: cupy cannot reach a GPU ({type(e).__name__}: {e})")
        return 77
    if devices == 0:
        print("skip: no GPU")
        return 77

    # Every value below is an integer well under 2**53, so float64 results are exact and the
    # expected values hold bit for bit whatever the reduction order.
    n = 1 << 20
    a = cp.arange(n, dtype=cp.float64)
    b = cp.full(n, 2.0)
    c = a * b + 1.0  # 2i + 1, summing to n**2
    total = int(c.sum())
    if total != n * n:
        print(f"cupy FAIL: sum of 2i+1 for i < {n} is {total}, expected {n * n}")
        return 1

    m = cp.eye(64) * 3.0 @ cp.full((64, 64), 2.0)  # every entry 3 * 2
    if not bool((m == 6.0).all()):
        print("cupy FAIL: 3I @ 2 is not 6 everywhere")
        return 1

    host = cp.asnumpy(c[-3:]).tolist()  # a device-to-host copy
    if host != [2.0 * i + 1.0 for i in range(n - 3, n)]:
        print(f"cupy FAIL: last elements copied back are {host}")
        return 1

    del a, b, c, m
    cp.get_default_memory_pool().free_all_blocks()  # hand the memory back through cudaFree
    cp.cuda.Device().synchronize()
    print(f"cupy OK {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
