#!/usr/bin/env python3
"""Does NVML's used memory (what bench/gpu_used_sampler.py reads) follow managed memory as the
driver moves it? Allocates SIZE of managed memory (no umswap), prefetches it to the GPU, to the
host and back, synchronizing after each, and prints NVML's used MiB and cuMemGetInfo's free MiB at
each point. Exits 77 without a driver or a GPU.

    UMSWAP_MANAGED_LIMIT=... python3 bench/nvml_managed_probe.py [--gib 2]

Keep SIZE well below the GPU's free memory (plain managed memory: never oversubscribe a shared
GPU).
"""
import argparse
import ctypes
import sys


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

    def show(what):
        cu.cuCtxSynchronize()
        nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem))
        cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        print("%-28s NVML used %7.0f MiB   cuMemGetInfo free %7.0f MiB"
              % (what, mem.used / 2**20, free.value / 2**20), flush=True)

    show("before")
    if cu.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(size), 1):
        print("nvml_managed_probe: cuMemAllocManaged failed", file=sys.stderr)
        return 1
    show("allocated")
    steps = [("to the GPU", Location(1, dev.value)), ("to the host", Location(2, 0)),
             ("to the GPU again", Location(1, dev.value)), ("to the host again", Location(2, 0))]
    for what, where in steps:
        r = cu.cuMemPrefetchAsync_v2(ptr.value, size, where, 0, None)
        show("prefetched %s%s" % (what, "" if r == 0 else " (error %d)" % r))
    cu.cuMemFree_v2(ptr)
    show("freed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
