#!/usr/bin/env python3
"""A probe (not a test): does PyTorch's attention compute the same on managed memory? No umswap.

    python3 attention_managed_probe.py LIBRARY [--trials N]

LIBRARY is build/lib/torch_managed_alloc.so (built from bench/), a PyTorch pluggable
allocator. The probe runs scaled_dot_product_attention (bf16, 32 x 16 heads x 512 x 64, the shapes of
BERT-large at sequence 512) on each backend (flash, efficient, cudnn, math), without dropout and
with dropout 0.1 under a fixed seed, N times, in three processes whose every tensor is its own
allocation: on device memory, on managed memory populated by page faults, and on managed memory
populated before use. Natively each configuration gives one output; the probe prints, per
configuration, how many of the trials differ from device memory's and by how much.
Measured on an H200 (2026-11-29, cuDNN 9.19, PyTorch 2.11) with this probe's first version: only
cuDNN with dropout differs, and only when its pages fault (docs/RELIABILITY.md, "Kernels that a
page fault changes").
Exit 77 when torch or a GPU is missing.
"""
import argparse
import os
import subprocess
import sys
import tempfile

SKIP = 77
SHAPE = (32, 16, 512, 64)


def child(library, out_dir, trials):
    import torch
    torch.cuda.memory.change_current_allocator(torch.cuda.memory.CUDAPluggableAllocator(
        library, "torch_managed_malloc", "torch_managed_free"))
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = [torch.randn(*SHAPE, device="cuda", dtype=torch.bfloat16, generator=g)
               for _ in range(3)]
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    for name, backend in backends.items():
        for p in (0.0, 0.1):
            for trial in range(trials):
                torch.manual_seed(1)
                try:
                    with sdpa_kernel([backend]):
                        o = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
                except RuntimeError:
                    break
                torch.save(o.cpu(), os.path.join(out_dir, f"{name}-{p}-{trial}.pt"))
                del o


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library")
    ap.add_argument("--trials", type=int, default=4)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("attention_managed_probe: no torch here", file=sys.stderr)
        return SKIP
    if not torch.cuda.is_available():
        print("attention_managed_probe: no CUDA GPU", file=sys.stderr)
        return SKIP
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}")
    with tempfile.TemporaryDirectory() as work:
        for memory in ("device", "managed", "populated"):
            os.makedirs(os.path.join(work, memory))
            subprocess.run([sys.executable, __file__, "--child", os.path.abspath(a.library),
                            os.path.join(work, memory), str(a.trials)], check=True,
                           env=dict(os.environ, TORCH_MANAGED_ALLOC=memory))
        print("backend dropout memory: trials differing from device memory's first (largest "
              "difference, elements differing of the worst)")
        for name in sorted(f for f in os.listdir(os.path.join(work, "device")) if f.endswith("-0.pt")):
            config = name[:-len("-0.pt")]
            ref = torch.load(os.path.join(work, "device", name)).float()
            for memory in ("device", "managed", "populated"):
                differ, worst, count = 0, 0.0, 0
                for trial in range(a.trials):
                    path = os.path.join(work, memory, f"{config}-{trial}.pt")
                    if not os.path.exists(path):
                        continue
                    d = (torch.load(path).float() - ref).abs()
                    if bool((d > 0).any()):
                        differ += 1
                        if float(d.max()) > worst:
                            worst, count = float(d.max()), int((d > 0).sum())
                print(f"{config.replace('-', ' ')} {memory}: {differ} of {a.trials}"
                      + (f" (up to {worst:.3g}, {count} of {ref.numel()})" if differ else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
