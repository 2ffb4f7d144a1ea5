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
import sys

import common


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    common.add_memory_saving_args(p, "gradient checkpointing of every transformer block")
    common.add_nvtx_arg(p)
    common.add_determinism_arg(p)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if min(a.layers, a.width, a.heads, a.batch, a.seq, a.steps) < 1 or a.width % a.heads:
        p.error("sizes must be positive and --width a multiple of --heads")
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        print(f"skip: torch or transformers is not importable ({e})")
        return common.SKIP
    if (skip := common.cuda_or_skip(torch)) is not None:
        return skip
    if a.deterministic:
        common.make_deterministic(torch)
    torch.manual_seed(a.seed)
    config = GPT2Config(n_layer=a.layers, n_embd=a.width, n_head=a.heads, n_positions=a.seq,
                        vocab_size=50257)
    model = GPT2LMHeadModel(config).cuda()
    if a.checkpoint:
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, config.vocab_size, (a.batch, a.seq), device="cuda")

    def iteration():
        with common.forward_context(torch, a.precision, a.offload):
            loss = model(tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times, oom = common.timed_loop(torch, a.steps, iteration, a.nvtx_mark)
    settings = {
        "layers": a.layers, "width": a.width, "batch": a.batch, "seq": a.seq,
        "precision": a.precision, "offload": a.offload, "checkpoint": a.checkpoint,
    }
    if a.deterministic:
        settings["checksum"] = common.param_checksum(torch, model.parameters())
    return common.print_summary(torch, times, oom, settings)


if __name__ == "__main__":
    sys.exit(main())
