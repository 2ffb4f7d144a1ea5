"""Sharded training for the multi-GPU test (sharded_check.sh): a small convolutional network
trained over NCCL, one process per GPU, under torchrun, either replicated with
torch.nn.parallel.DistributedDataParallel (--shard ddp) or sharded with FSDP2's fully_shard, each
layer and then the whole model (--shard fsdp). A world of one (--nproc-per-node 1) runs the same
logic on one GPU.

Each rank trains on its own synthetic batches (seeded by rank) and writes to OUT/rank<r>.txt
(one file per rank: the ranks share torchrun's stdout, where their lines interleave), exactly:

    rank <r> device <d> step <i> loss <float.hex()>

and at the end a checksum of the weights (all-reduced under DDP, gathered whole under FSDP2, so
identical on every rank):

    weights <sum of |w| as float.hex()>

On stdout each rank prints what `umswap compare` reads: `iter <i> ms <float> loss <float>` per
step, then `checksum <weights as float.hex()>` and `summary {"peak_allocated_bytes": N}`.

Each step's time goes to OUT/rank<r>.ms, one "step <i> ms <float>" line each (apart, so that the
loss files of two runs can be diffed), then "peak_reserved <bytes>" (PyTorch's peak reserved
memory on the rank's GPU). --offload gives FSDP2 its own CPUOffloadPolicy (parameters,
gradients and the optimizer step on the host): the baseline umswap is measured against.

Deterministic (cuDNN and cuBLAS fixed), so a native run and a run under umswap can be diffed.
Exit: 0 done, 1 failed, 77 skipped (no torch, fewer GPUs than ranks, no NCCL, no FSDP2).
"""

import argparse
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=128, help="channels of the convolutions")
    p.add_argument("--image", type=int, default=64)
    p.add_argument("--shard", choices=("ddp", "fsdp"), default="ddp")
    p.add_argument("--offload", action="store_true",
                   help="FSDP2 with CPUOffloadPolicy (needs --shard fsdp)")
    p.add_argument("--out", required=True, help="directory for the per-rank output files")
    args = p.parse_args()
    if args.offload and args.shard != "fsdp":
        p.error("--offload needs --shard fsdp")
    try:
        import torch
        import torch.distributed as dist
        from torch import nn
    except ImportError as e:
        print(f"skip: torch is not importable ({e})")
        return 77
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if torch.cuda.device_count() < world or not dist.is_nccl_available():
        print(f"skip: needs {world} GPUs and NCCL")
        return 77
    if args.shard == "fsdp":
        try:
            from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard
        except ImportError:
            print("skip: this PyTorch has no FSDP2 (torch.distributed.fsdp.fully_shard)")
            return 77
    rank = int(os.environ["RANK"])
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    # CPUOffloadPolicy keeps the shards on the host: gathering them whole at the end (full_tensor)
    # is a collective on CPU tensors, which needs a CPU backend beside NCCL.
    backend = "cpu:gloo,cuda:nccl" if args.offload else "nccl"
    dist.init_process_group(backend, device_id=torch.device("cuda", local))
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts them)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    w = args.width
    model = nn.Sequential(
        nn.Conv2d(3, w, 3, padding=1), nn.ReLU(), nn.Conv2d(w, w, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(),
        nn.Conv2d(2 * w, 2 * w, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(2 * w, 10)).cuda()
    if args.shard == "fsdp":
        policy = {"offload_policy": CPUOffloadPolicy()} if args.offload else {}
        for layer in model:
            if any(True for _ in layer.parameters()):
                fully_shard(layer, **policy)
        net = fully_shard(model, **policy)
    else:
        net = nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    out = open(os.path.join(args.out, f"rank{rank}.txt"), "w")
    times = open(os.path.join(args.out, f"rank{rank}.ms"), "w")
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(args.steps):
        start.record()
        x = torch.randn(args.batch, 3, args.image, args.image, generator=g).cuda()
        y = torch.randint(0, 10, (args.batch,), generator=g).cuda()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        stop.record()
        print(f"rank {rank} device {torch.cuda.current_device()} step {i} loss "
              f"{loss.item().hex()}", file=out, flush=True)
        ms = start.elapsed_time(stop)
        print(f"step {i} ms {ms:.3f}", file=times, flush=True)
        # What `umswap compare` reads, on stdout (under torchrun with each rank's prefix).
        print(f"iter {i} ms {ms:.3f} loss {loss.item()!r}", flush=True)
    # FSDP2's parameters are DTensors, each rank holding a shard: gather each whole.
    whole = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
    total = sum(p.detach().abs().sum().double() for p in whole)
    print(f"weights {total.item().hex()}", file=out, flush=True)
    print(f"peak_reserved {torch.cuda.max_memory_reserved()}", file=times, flush=True)
    print(f"checksum {total.item().hex()}", flush=True)
    print('summary {"peak_allocated_bytes": %d}' % torch.cuda.max_memory_allocated(), flush=True)
    out.close()
    times.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
