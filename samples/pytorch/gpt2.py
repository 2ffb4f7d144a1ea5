#!/usr/bin/env python3
"""Time GPT-2 style training iterations (transformers, built from a config: nothing downloaded).

Defaults are GPT-2 medium: 24 layers, 1024 wide, 16 heads, batch 16, sequence 1024, bf16 autocast,
AdamW. Each iteration is timed between two torch.cuda.synchronize() calls:

    iter <i> ms <float> loss <float>
    summary {"first_ms": ..., "steady_median_ms": ..., "peak_allocated_bytes": ..., ...}

--offload and --checkpoint are PyTorch's own ways to save GPU memory, to compare umswap with.
Exit: 0 done, 1 out of memory, 2 bad arguments, 77 skipped (no torch, transformers or CUDA).
"""
import argparse
import contextlib
import json
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    p.add_argument("--offload", action="store_true",
                   help="saved activations in pinned host memory (save_on_cpu)")
    p.add_argument("--checkpoint", action="store_true", help="gradient checkpointing")
    p.add_argument("--nvtx-mark", metavar="NAME",
                   help="emit an NVTX mark NAME at the start of each iteration")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if min(a.layers, a.width, a.heads, a.batch, a.seq, a.steps) < 1 or a.width % a.heads:
        p.error("sizes must be positive and --width a multiple of --heads")
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        print(f"skip: torch or transformers is not importable ({e})")
        return 77
    if not torch.cuda.is_available():
        print("skip: torch sees no CUDA device")
        return 77
    torch.manual_seed(a.seed)
    config = GPT2Config(n_layer=a.layers, n_embd=a.width, n_head=a.heads, n_positions=a.seq,
                        vocab_size=50257)
    model = GPT2LMHeadModel(config).cuda()
    if a.checkpoint:
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, config.vocab_size, (a.batch, a.seq), device="cuda")
    oom_error = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError

    def iteration():
        offload = (torch.autograd.graph.save_on_cpu(pin_memory=True) if a.offload
                   else contextlib.nullcontext())
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if a.precision == "bf16"
                    else contextlib.nullcontext())
        with offload, autocast:
            loss = model(tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times, oom = [], False
    torch.cuda.reset_peak_memory_stats()
    for i in range(a.steps):
        torch.cuda.synchronize()
        if a.nvtx_mark:
            torch.cuda.nvtx.mark(a.nvtx_mark)
        start = time.perf_counter()
        try:
            loss = iteration()
            torch.cuda.synchronize()
        except oom_error as e:
            print(f"oom at iter {i}: {type(e).__name__}", flush=True)
            oom = True
            break
        ms = (time.perf_counter() - start) * 1e3
        times.append(ms)
        print(f"iter {i} ms {ms:.3f} loss {loss.item():.6f}", flush=True)
    steady = times[2:]
    print("summary " + json.dumps({
        "first_ms": round(times[0], 3) if times else None,
        "steady_median_ms": round(statistics.median(steady), 3) if steady else None,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "iters": len(times), "oom": oom, "layers": a.layers, "width": a.width,
        "batch": a.batch, "seq": a.seq, "precision": a.precision,
        "offload": a.offload, "checkpoint": a.checkpoint,
    }), flush=True)
    return 1 if oom else 0


if __name__ == "__main__":
    sys.exit(main())
