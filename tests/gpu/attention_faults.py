#!/usr/bin/env python3
"""cuDNN's fused attention with dropout, run on a freshly allocated output each time.

    python3 attention_faults.py [--trials N] [--pressure-mib M]

PyTorch's scaled_dot_product_attention on the cuDNN backend (PyTorch 2.11's default on an H200),
bf16 32 x 16 heads x 512 x 64, dropout 0.1 with the same seed each trial; before each trial
torch.cuda.empty_cache(), so the output comes from a new cudaMalloc. Prints `trial <i> <sha>` per
trial (the output's bits hashed). Natively every trial prints the same hash. On managed memory
whose pages a kernel populates by page faults (first touch), this kernel computes a different
output (measured on an H200 with cuDNN 9.19, 2026-11-29: 3% of the elements, off by up to 0.6),
which is why umswap populates new allocations before handing them out. With --pressure-mib M,
each trial first writes M MiB of other tensors (64 MiB each, allocated once), so that under
`umswap run --budget B` (B below M) the inputs are evicted between trials and must be back on the
GPU before the kernel runs. Exit 77
when torch, a GPU or the cuDNN backend is missing.
"""
import argparse
import hashlib
import sys

SKIP = 77


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--pressure-mib", type=int, default=0)
    a = p.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        print("attention_faults: no torch here", file=sys.stderr)
        return SKIP
    if not torch.cuda.is_available():
        print("attention_faults: no CUDA GPU", file=sys.stderr)
        return SKIP
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = [torch.randn(32, 16, 512, 64, device="cuda", dtype=torch.bfloat16, generator=g)
               for _ in range(3)]
    pressure = [torch.empty(64 << 20, device="cuda", dtype=torch.uint8)
                for _ in range(a.pressure_mib // 64)]
    for i in range(a.trials):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        for t in pressure:
            t.fill_(i % 251)
        torch.manual_seed(1)
        try:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                o = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
        except RuntimeError as e:
            print(f"attention_faults: no cuDNN attention: {str(e).splitlines()[0]}", file=sys.stderr)
            return SKIP
        digest = hashlib.sha256(o.view(torch.int16).cpu().numpy().tobytes()).hexdigest()[:16]
        print(f"trial {i} {digest}", flush=True)
        del o
    return 0


if __name__ == "__main__":
    sys.exit(main())
