#!/usr/bin/env python3
"""A few deterministic training steps of a small CNN, for bit-exact comparisons under umswap.

Two convolutions and two linear layers on random 32x32 images from a fixed seed. Every loss is
printed as float.hex() so a native run and a run under umswap can be diffed exactly:

    step <i> loss <hex>

--oom-check BYTES then asks for one tensor of BYTES bytes, expects torch.OutOfMemoryError
(umswap's limit must fail an allocation the way the GPU would, not hang or crash), and runs one
more step to show the program goes on:

    oom caught: OutOfMemoryError
    after-oom loss <hex>

Exit: 0 done, 1 the OOM check found no OOM, 2 bad arguments, 77 skipped (no torch or no CUDA).
"""

import argparse
import os
import sys

# cuBLAS needs a fixed workspace configuration to be deterministic; it is read when cuBLAS
# starts, so it must be in the environment before torch is imported.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_count(text):
    """A whole number of bytes, optionally with a binary suffix K, M, G or T (e.g. 200G)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    digits, suffix = (t[:-1], t[-1]) if t and t[-1] in _SUFFIXES else (t, "")
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive byte count (e.g. 200G)")
    return int(digits) * _SUFFIXES[suffix]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    p.add_argument("--batch", type=int, default=64, help="images per step (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data (default 0)")
    p.add_argument("--oom-check", type=byte_count, metavar="BYTES",
                   help="after training, allocate BYTES and expect an out-of-memory error")
    a = p.parse_args()
    if a.steps < 1 or a.batch < 1:
        p.error("--steps and --batch must be at least 1")
    return a


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch import nn
    except ImportError as e:
        print(f"skip: torch is not importable ({e})")
        return 77
    if not torch.cuda.is_available():
        print("skip: torch sees no CUDA device")
        return 77

    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)

    # Strided convolutions instead of pooling, and cross-entropy written out with a one-hot
    # target: only operations that have deterministic CUDA kernels.
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),   # 32x32 -> 16x16
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),  # 16x16 -> 8x8
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 128), nn.ReLU(),
        nn.Linear(128, 10),
    ).cuda()  # initialised on the CPU from the seed, so the same weights on any GPU
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(args.seed + 1)

    def train_step():
        x = torch.randn(args.batch, 3, 32, 32, generator=data).cuda()
        y = torch.randint(0, 10, (args.batch,), generator=data)
        target = F.one_hot(y, 10).float().cuda()
        loss = -(F.log_softmax(model(x), dim=1) * target).sum(dim=1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item().hex()

    for i in range(args.steps):
        print(f"step {i} loss {train_step()}", flush=True)

    if args.oom_check is None:
        return 0
    # torch.OutOfMemoryError since 2.5; torch.cuda.OutOfMemoryError before (the same class).
    oom_error = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    try:
        big = torch.empty(args.oom_check, dtype=torch.uint8, device="cuda")
    except oom_error as e:
        print(f"oom caught: {type(e).__name__}", flush=True)
    else:
        del big
        print("oom not raised", flush=True)
        return 1
    print(f"after-oom loss {train_step()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
