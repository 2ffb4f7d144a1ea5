#!/usr/bin/env python3
"""Does NVML's used memory (what bench/gpu_used_sampler.py reads) follow managed memory as the
driver moves it, and do evictions of PyTorch-block-like pieces move it? Allocates SIZE of managed
memory (no umswap), prefetches it to the GPU, to the host and back, then evicts it in pieces of
1 MiB + 512 bytes at 512-byte offsets (as PyTorch's caching allocator lays out blocks), and at each
point prints NVML's used MiB, cuMemGetInfo's free MiB, and how long a GPU memset of the whole
range takes (fast when it is on the GPU, slow when its pages fault in). Exits 77 without a driver
or a GPU.

    UMSWAP_MANAGED_LIMIT=... python3 bench/nvml_managed_probe.py [--gib 2]

Keep SIZE well below the GPU's free memory (plain managed memory: never oversubscribe a shared
GPU).
"""
import argparse
import ctypes
import sys
import time


class Location(ctypes.Structure):  # CUmemLocation
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=2.0)
    a = p.parse_args()
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        print("nvml_managed_probe: %s" % e, file=sys.stderr)
        return 77
    size = int(a.gib * (1 << 30))
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_ulonglong()
    handle, mem = ctypes.c_void_p(), NvmlMemory()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    if (cu.cuInit(0) or cu.cuDeviceGet(ctypes.byref(dev), 0)
            or cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) or cu.cuCtxSetCurrent(ctx)):
        print("nvml_managed_probe: no GPU", file=sys.stderr)
        return 77
    nvml.nvmlInit_v2()
    nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
    cu.cuMemPrefetchAsync_v2.argtypes = [ctypes.c_ulonglong, ctypes.c_size_t, Location,
                                         ctypes.c_uint, ctypes.c_void_p]

    def show(what, memset=False):
        cu.cuCtxSynchronize()
        nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem))
        cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        line = "%-34s NVML used %7.0f MiB   cuMemGetInfo free %7.0f MiB" % (
            what, mem.used / 2**20, free.value / 2**20)
        if memset:  # after the readings: it brings the range to the GPU
            t0 = time.perf_counter()
            cu.cuMemsetD8_v2(ptr, 1, ctypes.c_size_t(size))
            cu.cuCtxSynchronize()
            line += "   memset %.2f ms" % ((time.perf_counter() - t0) * 1e3)
        print(line, flush=True)

    show("before")
    if cu.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(size), 1):
        print("nvml_managed_probe: cuMemAllocManaged failed", file=sys.stderr)
        return 1
    show("allocated")
    steps = [("to the GPU", Location(1, dev.value)), ("to the host", Location(2, 0)),
             ("to the GPU again", Location(1, dev.value)), ("to the host again", Location(2, 0))]
    for what, where in steps:
        r = cu.cuMemPrefetchAsync_v2(ptr.value, size, where, 0, None)
        show("prefetched %s%s" % (what, "" if r == 0 else " (error %d)" % r), memset=True)
    # On the GPU (the memset above), then out in block-like pieces: 1 MiB + 512 B every 1 MiB +
    # 1 KiB, so each piece starts 512-byte aligned and most do not start on a 4 KiB page.
    show("on the GPU before the pieces")
    piece, stride, errors, at = (1 << 20) + 512, (1 << 20) + 1024, 0, 0
    while at + piece <= size:
        errors += cu.cuMemPrefetchAsync_v2(ptr.value + at, piece, Location(2, 0), 0, None) != 0
        at += stride
    show("evicted in %d pieces (%d errors)" % (at // stride, errors), memset=True)
    cu.cuMemFree_v2(ptr)
    show("freed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
