#!/usr/bin/env python3
"""Can umswap see every tensor inside PyTorch's default caching allocator? (issue 39, a probe)

    python3 bench/allocator_trace_probe.py [--steps 20] [--compile] [--out DIR]

PyTorch's default CUDA allocator hands out blocks of the segments it gets from cudaMalloc; umswap
sees only the segments. docs/lab/2026-11-30-default-allocator-hooks.md proposes PyTorch's own C++
trace tracker (c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker) as the way to see
each block's address, size, stream and lifetime. This probe checks that on a GPU, without umswap:

1. builds bench/allocator_trace_bridge.cpp against the installed PyTorch (its headers, libc10 and
   libc10_cuda; the C++ ABI flag PyTorch was built with) and prints TraceEntry's layout;
2. runs a training loop (a 6-layer transformer encoder, AdamW; at the middle step a tensor used on
   a side stream with record_stream, then empty_cache; with --compile, a few steps of a small MLP
   under torch.compile(mode="reduce-overhead"), whose blocks live in a CUDA graph pool) with the
   tracker attached after CUDA's initialization, and checks its events: every block inside a
   segment the tracker saw allocated, no free of a block not allocated, and the live blocks at
   the end equal to torch.cuda.memory._snapshot()'s, address and requested size;
3. runs the same loop without the tracker, and prints the step times side by side and the time
   spent inside the tracker.

Prints `verdict PASS` or `verdict FAIL: ...` and a `summary {...}` line. Exit 0: pass; 1: fail;
77: no torch, no GPU or no C++ compiler. Needs no umswap: run it as it is.
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BRIDGE = os.path.join(HERE, "allocator_trace_bridge.cpp")
ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE = 0, 1, 2, 3, 4
NAMES = {0: "alloc", 1: "free_requested", 2: "free_completed", 3: "segment_alloc",
         4: "segment_free", 5: "segment_map", 6: "segment_unmap", 9: "other"}
CAPACITY = 1 << 20  # events kept (64 MB)


class Event(ctypes.Structure):
    """bench/allocator_trace_bridge.cpp's Event: keep in step."""
    _fields_ = [("ns", ctypes.c_uint64), ("addr", ctypes.c_uint64), ("size", ctypes.c_uint64),
                ("stream", ctypes.c_uint64), ("pool0", ctypes.c_uint64),
                ("pool1", ctypes.c_uint64), ("action", ctypes.c_int32),
                ("device", ctypes.c_int32), ("thread", ctypes.c_int32),
                ("unused", ctypes.c_int32)]


def build_bridge(torch, out):
    """Compiles the bridge; (path, None) or (None, why)."""
    from torch.utils import cpp_extension
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        return None, "no C++ compiler (c++, g++ or $CXX)"
    try:
        includes = cpp_extension.include_paths(device_type="cuda")
    except TypeError:  # older signature
        includes = cpp_extension.include_paths(cuda=True)
    libs = cpp_extension.library_paths()
    so = os.path.join(out, "allocator_trace_bridge.so")
    abi = int(torch.compiled_with_cxx11_abi())
    cmd = [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           BRIDGE, "-o", so] + [f"-I{p}" for p in includes] + [f"-L{p}" for p in libs] + \
          [f"-Wl,-rpath,{p}" for p in libs] + ["-lc10_cuda", "-lc10"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        return None, "the bridge did not build:\n" + " ".join(cmd) + "\n" + p.stdout[-4000:]
    return so, None


def workload(torch, steps, compile_too):
    """The loop; returns each step's milliseconds."""
    nn = torch.nn
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 6), nn.Linear(768, 1000)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(16, 512, 768, device="cuda")
    y = torch.randint(0, 1000, (16, 512), device="cuda")
    times = []
    for step in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step == steps // 2:
            side = torch.cuda.Stream()
            z = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                z.add_(1)
            z.record_stream(side)
            del z
            torch.cuda.empty_cache()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    if compile_too:
        mlp = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
        f = torch.compile(mlp, mode="reduce-overhead")
        a = torch.randn(256, 1024, device="cuda")
        for _ in range(6):
            # reduce-overhead replays CUDA graphs whose outputs the next replay overwrites: each
            # training step begins with this mark (PyTorch's own advice for such loops).
            torch.compiler.cudagraph_mark_step_begin()
            mlp.zero_grad(set_to_none=True)  # gradients are graph outputs: not accumulated into
            f(a).sum().backward()
        torch.cuda.synchronize()
    return times


def snapshot_blocks(torch):
    """{address: requested size} of the blocks a snapshot says are in use (pending frees too)."""
    out = {}
    for seg in torch.cuda.memory._snapshot()["segments"]:
        addr = seg["address"]
        for b in seg["blocks"]:
            a = b.get("address", addr)
            if b["state"] in ("active_allocated", "active_pending_free"):
                out[a] = b.get("requested_size", b["size"])
            addr = a + b["size"]
    return out


def check(events, snapshot):
    """The tracker's events against themselves and the snapshot; (problems, counts)."""
    problems = []
    counts = {}
    segments = {}  # address -> size
    live = {}      # address -> requested size (until FREE_COMPLETED)
    outside = unmatched = double = 0
    for e in events:
        counts[NAMES.get(e.action, "other")] = counts.get(NAMES.get(e.action, "other"), 0) + 1
        if e.action == SEGMENT_ALLOC:
            segments[e.addr] = e.size
        elif e.action == SEGMENT_FREE:
            segments.pop(e.addr, None)
        elif e.action == ALLOC:
            if not any(s <= e.addr and e.addr + e.size <= s + n for s, n in segments.items()):
                outside += 1
            double += e.addr in live
            live[e.addr] = e.size
        elif e.action == FREE_COMPLETED:
            if live.pop(e.addr, None) is None:
                unmatched += 1
    if outside:
        problems.append(f"{outside} blocks outside every segment seen")
    if unmatched:
        problems.append(f"{unmatched} frees of blocks not seen allocated")
    if double:
        problems.append(f"{double} blocks allocated twice without a free between")
    missing = set(snapshot) - set(live)
    extra = set(live) - set(snapshot)
    sizes = sum(1 for a in set(live) & set(snapshot) if live[a] != snapshot[a])
    if missing or extra or sizes:
        problems.append(f"live set differs from the snapshot: {len(missing)} blocks not seen, "
                        f"{len(extra)} seen but not in it, {sizes} of another size")
    return problems, counts, len(live)


def child(a):
    import torch
    torch.cuda.init()  # the allocator knows its devices from here: a tracker is kept
    summary = {}
    if a.child == "attach":
        lib = ctypes.CDLL(a.bridge)
        lib.umswap_probe_attach.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        lib.umswap_probe_count.restype = ctypes.c_uint64
        lib.umswap_probe_inside_ns.restype = ctypes.c_uint64
        layout = ctypes.create_string_buffer(512)
        lib.umswap_probe_layout(layout, ctypes.c_uint64(512))
        print("layout", layout.value.decode(), flush=True)
        buf = (Event * CAPACITY)()
        rc = lib.umswap_probe_attach(ctypes.addressof(buf), CAPACITY)
        if rc != 0:
            print(f"verdict FAIL: attach returned {rc}")
            return 1
    times = workload(torch, a.steps, a.compile)
    summary["steady_ms"] = round(statistics.median(times[2:]), 3)
    summary["ms"] = [round(t, 3) for t in times]
    if a.child == "attach":
        n = lib.umswap_probe_count()
        kept = buf[:min(n, CAPACITY)]
        problems, counts, live = check(kept, snapshot_blocks(torch))
        if n > CAPACITY:
            problems.append(f"{n} events, {CAPACITY} kept: the check is of the first ones")
        summary.update(events=n, per_step=round(n / max(1, a.steps)), counts=counts,
                       live_blocks=live, threads=lib.umswap_probe_threads(),
                       inside_ms=round(lib.umswap_probe_inside_ns() / 1e6, 3),
                       pools=sorted({(e.pool0, e.pool1) for e in kept if e.pool0 or e.pool1}),
                       streams=len({e.stream for e in kept}))
        summary["problems"] = problems
    print("summary " + json.dumps(summary), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compile", action="store_true",
                    help="also a few steps under torch.compile(mode='reduce-overhead')")
    ap.add_argument("--out", help="folder for the bridge (default: a temporary one)")
    ap.add_argument("--child", choices=["attach", "none"], help=argparse.SUPPRESS)
    ap.add_argument("--bridge", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.steps < 4:
        ap.error("--steps: at least 4")
    if a.child:
        return child(a)
    try:
        import torch
    except ImportError:
        print("skip: no torch")
        return 77
    if not torch.cuda.is_available():
        print("skip: no CUDA GPU")
        return 77
    out = a.out or tempfile.mkdtemp(prefix="umswap-alloc-probe-")
    os.makedirs(out, exist_ok=True)
    print(f"torch {torch.__version__} ({torch.version.git_version}), CUDA {torch.version.cuda}, "
          f"allocator backend {torch.cuda.get_allocator_backend()}", flush=True)
    so, why = build_bridge(torch, out)
    if not so:
        print(f"skip: {why}" if why.startswith("no C++") else f"verdict FAIL: {why}")
        return 77 if why.startswith("no C++") else 1
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # the default allocator is the point
    env.pop("PYTORCH_ALLOC_CONF", None)
    results = {}
    for mode in ("none", "attach"):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--bridge", so,
               "--steps", str(a.steps)] + (["--compile"] if a.compile else [])
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        sys.stdout.write(p.stdout if p.returncode else "".join(
            line + "\n" for line in p.stdout.splitlines() if line.startswith("layout")))
        line = next((x for x in p.stdout.splitlines() if x.startswith("summary ")), None)
        if p.returncode != 0 or not line:
            print(f"verdict FAIL: the {mode} run exited {p.returncode}")
            return 1
        results[mode] = json.loads(line[len("summary "):])
    on, off = results["attach"], results["none"]
    summary = dict(on, steady_ms_without=off["steady_ms"],
                   overhead=round(on["steady_ms"] / off["steady_ms"] - 1, 4))
    print("summary " + json.dumps(summary))
    problems = on["problems"]
    print("verdict " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
