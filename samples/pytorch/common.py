"""What the timed PyTorch training scripts share: their common flags, the skip check, the timed
loop and the output it prints.

The output is an interface: `umswap compare`, scripts/bench_fit.py, scripts/bench_tracer.py and
tests/gpu/period_vs_marks.sh read it. Per iteration, timed between two torch.cuda.synchronize()
calls:

    iter <i> ms <float> loss <float>

then, once, one line of JSON:

    summary {"first_ms": ..., "steady_median_ms": ..., "peak_allocated_bytes": ...,
             "peak_reserved_bytes": ..., "iters": ..., "oom": ..., <the script's settings>}

With --deterministic the summary also has "checksum": the weights after the last step,
hashed bit for bit, so that two runs can be compared exactly (`umswap compare` then compares
checksums instead of losses; so does scripts/evict_copy_check.py).

steady_median_ms is the median of the iterations after the first two (null if there are none);
the peaks are torch.cuda.max_memory_allocated() and max_memory_reserved() over the loop. With
--offload the summary also has "offload_bytes_out_per_iteration" and
"offload_bytes_in_per_iteration": the bytes save_on_cpu copied to the host and back, over the
timed iterations, divided by their number (`umswap compare` shows them in its offload row). An
iteration that runs out of GPU memory prints `oom at iter <i>: OutOfMemoryError` and ends the
loop; the summary then has "oom": true and the script exits 1.

torch is imported by the scripts, not here, so that a machine without it can still print the
usage and the skip line.
"""

import contextlib
import hashlib
import json
import os
import statistics
import time

# Exit code of a script that cannot run here (no torch, no CUDA): ctest's SKIP_RETURN_CODE.
SKIP = 77


def add_memory_saving_args(p, checkpoint_help):
    """--offload and --checkpoint: PyTorch's own ways to save GPU memory, to compare umswap with.
    `umswap compare --baselines` appends them to the command, so every script spells them so."""
    p.add_argument("--offload", action="store_true",
                   help="keep saved activations in pinned host memory "
                        "(torch.autograd.graph.save_on_cpu)")
    p.add_argument("--checkpoint", action="store_true", help=checkpoint_help)


def parse_image_model_args(doc, model, default_batch, checkpoint_help):
    """The flags of the image-classifier scripts (vgg16.py, resnet152.py), parsed and checked:
    --batch, --steps, --precision, --image-size, --offload, --checkpoint, --seed, --nvtx-mark.
    `doc` is the script's docstring (its first line describes the script), `model` its network's
    name for the error messages."""
    import argparse
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--batch", type=int, default=default_batch,
                   help=f"images per iteration (default {default_batch})")
    p.add_argument("--steps", type=int, default=10, help="iterations (default 10)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="fp32, or bf16 through torch.autocast (default fp32)")
    p.add_argument("--image-size", type=int, default=224, help="image side (default 224)")
    add_memory_saving_args(p, checkpoint_help)
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data (default 0)")
    add_nvtx_arg(p)
    a = p.parse_args()
    if a.batch < 1 or a.steps < 1:
        p.error("--batch and --steps must be at least 1")
    if a.image_size < 32:
        p.error(f"--image-size must be at least 32 ({model} halves it five times)")
    return a


def train_image_model(args, build):
    """The image-classifier scripts' whole run: imports (or the skip line), the seed, the model
    from build(torch, torchvision, checkpoint, args) -> (model, forward), SGD on one random
    1000-class batch, the timed loop and the summary. Returns the script's exit code."""
    try:
        import torch
        import torch.nn.functional as F
        import torchvision
        from torch.utils.checkpoint import checkpoint
    except ImportError as e:
        print(f"skip: torch or torchvision is not importable ({e})")
        return SKIP
    if (skip := cuda_or_skip(torch)) is not None:
        return skip

    torch.manual_seed(args.seed)
    model, forward = build(torch, torchvision, checkpoint, args)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, device="cuda")
    y = torch.randint(0, 1000, (args.batch,), device="cuda")

    def iteration():
        with forward_context(torch, args.precision, args.offload):
            loss = F.cross_entropy(forward(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    times, oom = timed_loop(torch, args.steps, iteration, args.nvtx_mark)
    return print_summary(torch, times, oom, {
        "batch": args.batch,
        "image_size": args.image_size,
        "precision": args.precision,
        "offload": args.offload,
        "checkpoint": args.checkpoint,
        "device": torch.cuda.get_device_name(),
    })


def add_determinism_arg(p):
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic kernels only (torch.use_deterministic_algorithms: an "
                        "operation without one stops the run with PyTorch's error) and the final "
                        "weights' checksum in the summary, so that two runs compare bit for bit")


def make_deterministic(torch):
    """Deterministic kernels from here on. Call before the first CUDA operation: cuBLAS reads
    CUBLAS_WORKSPACE_CONFIG when it starts."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # Strict: with warn_only, cuDNN's attention backward keeps its non-deterministic algorithm.
    torch.use_deterministic_algorithms(True)
    # Determinism also fills every new tensor (torch.empty) by default; a correct program never
    # reads one unwritten, and the fill made save_on_cpu's pinned copies (--offload) 1.5x slower
    # (GPT-2 medium on an H200, 2026-11-26: 2,778 ms against 1,862 without --deterministic).
    torch.utils.deterministic.fill_uninitialized_memory = False


def param_checksum(torch, params):
    """A hex digest of the parameters' bits. Each tensor's bits are summed as integers on the GPU
    (exact, in any order), plainly and weighted by position, so a changed or moved value shows."""
    h = hashlib.sha256()
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    with torch.no_grad():
        for p in params:
            bits = p.detach().contiguous().view(ints[p.element_size()]).reshape(-1).long()
            weight = torch.arange(bits.numel(), device=bits.device) % 65521 + 1
            h.update(f"{tuple(p.shape)}:{int(bits.sum())}:{int((bits * weight).sum())};".encode())
    return h.hexdigest()[:16]


def add_nvtx_arg(p):
    p.add_argument("--nvtx-mark", metavar="NAME",
                   help="emit an NVTX mark NAME at the start of each iteration "
                        "(for `umswap record --marker NAME`)")


def cuda_or_skip(torch):
    """None when torch sees a GPU; else prints the skip line and returns SKIP."""
    if torch.cuda.is_available():
        return None
    print("skip: torch sees no CUDA device")
    return SKIP


# Bytes save_on_cpu copied to the host ("out") and back ("in") (forward_context with offload),
# counted from the start of the timed loop.
_offloaded = {"out": 0, "in": 0, "counting": False}


def forward_context(torch, precision, offload):
    """The context a forward pass runs in: bf16 autocast and/or save_on_cpu, as asked. With
    offload, the bytes of every tensor save_on_cpu packs and unpacks are counted (its own hooks
    do the work; the count adds one addition per saved tensor each way)."""
    ctx = contextlib.ExitStack()
    if precision == "bf16":
        ctx.enter_context(torch.autocast("cuda", dtype=torch.bfloat16))
    if offload:
        saver = torch.autograd.graph.save_on_cpu(pin_memory=True)

        def counted(hook, direction):
            def call(value):
                result = hook(value)
                if _offloaded["counting"]:
                    tensor = value if direction == "out" else result
                    _offloaded[direction] += tensor.numel() * tensor.element_size()
                return result
            return call

        saver.pack_hook = counted(saver.pack_hook, "out")
        saver.unpack_hook = counted(saver.unpack_hook, "in")
        ctx.enter_context(saver)
    return ctx


def timed_loop(torch, steps, iteration, nvtx_mark=None):
    """Runs iteration() `steps` times, printing an `iter` line for each; returns (times in ms,
    whether it ran out of memory). iteration() returns the loss tensor."""
    # torch.OutOfMemoryError since 2.5; torch.cuda.OutOfMemoryError before (the same class).
    oom_error = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    times = []
    torch.cuda.reset_peak_memory_stats()
    _offloaded.update({"out": 0, "in": 0, "counting": True})
    for i in range(steps):
        torch.cuda.synchronize()
        if nvtx_mark:
            torch.cuda.nvtx.mark(nvtx_mark)
        start = time.perf_counter()
        try:
            loss = iteration()
            torch.cuda.synchronize()
        except oom_error as e:
            print(f"oom at iter {i}: {type(e).__name__}", flush=True)
            return times, True
        ms = (time.perf_counter() - start) * 1e3
        times.append(ms)
        print(f"iter {i} ms {ms:.3f} loss {loss.item():.6f}", flush=True)
    return times, False


def print_summary(torch, times, oom, settings):
    """Prints the summary line (the loop's figures, then `settings` in their order); returns the
    script's exit code: 1 after an out-of-memory, else 0."""
    steady = times[2:]
    summary = {
        "first_ms": round(times[0], 3) if times else None,
        "steady_median_ms": round(statistics.median(steady), 3) if steady else None,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "iters": len(times),
        "oom": oom,
    }
    if _offloaded["out"] and times and not oom:
        summary["offload_bytes_out_per_iteration"] = _offloaded["out"] // len(times)
        summary["offload_bytes_in_per_iteration"] = _offloaded["in"] // len(times)
    summary.update(settings)
    print("summary " + json.dumps(summary), flush=True)
    return 1 if oom else 0
