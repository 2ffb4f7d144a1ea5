#!/usr/bin/env python3
"""GPT-2 small training, timed two ways: per iteration the wall time and the host's time to enqueue
it (until the iteration's calls returned, before the synchronize). Where the two are equal the host
is the bound, as it is under engine vmm fitting (docs/lab/2026-12-02-vmm-stream-order-and-polls.md).

    python3 bench/gpt2_host_share.py [STEPS]            natively (12 steps by default)
    umswap run --engine vmm --limit 40G --budget 40G -- python3 bench/gpt2_host_share.py 12

The model is samples/pytorch/gpt2.py's at 12 layers, 768 wide, 12 heads, batch 8, sequence 1024,
bf16 autocast, AdamW. Prints `iter <i> wall <ms> host <ms> loss <loss>` per iteration, then the
medians of the last half. Needs torch and transformers (exit 77 without them or a GPU).
"""
import statistics
import sys
import time


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    if steps < 1:
        print("STEPS must be at least 1", file=sys.stderr)
        return 2
    try:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        print(f"skip: torch or transformers is not importable ({e})")
        return 77
    if not torch.cuda.is_available():
        print("skip: no CUDA device")
        return 77
    torch.manual_seed(0)
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(config).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, config.vocab_size, (8, 1024), device="cuda")
    walls, hosts = [], []
    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        walls.append((t2 - t0) * 1e3)
        hosts.append((t1 - t0) * 1e3)
        print(f"iter {i} wall {walls[-1]:.1f} host {hosts[-1]:.1f} loss {loss.item():.6f}",
              flush=True)
    k = max(1, steps // 2)
    print(f"median_last{k} wall {statistics.median(walls[-k:]):.1f} "
          f"host {statistics.median(hosts[-k:]):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
