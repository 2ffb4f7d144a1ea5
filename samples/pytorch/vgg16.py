#!/usr/bin/env python3
"""Time VGG-16 training iterations: the memory-hungry workload umswap is measured on.

torchvision's VGG-16 (random weights, 1000 classes) trains with SGD on one random batch from a
fixed seed. Each iteration is timed between two torch.cuda.synchronize() calls:

    iter <i> ms <float> loss <float>
    summary {"first_ms": ..., "steady_median_ms": ..., "peak_allocated_bytes": ...,
             "peak_reserved_bytes": ..., ...}            (one line of JSON)

steady_median_ms is the median of the iterations after the first two (null if there are none);
common.py says more.
--offload and --checkpoint are PyTorch's own ways to save GPU memory, to compare umswap with.
If an iteration runs out of GPU memory the script prints `oom at iter <i>: OutOfMemoryError`,
then the summary with "oom": true, and exits 1.
Exit: 0 done, 1 out of memory, 2 bad arguments, 77 skipped (no torch, torchvision or CUDA).
"""

import sys

import common


def parse_args():
    return common.parse_image_model_args(
        __doc__, "VGG-16", 256,
        "recompute each feature block in backward (torch.utils.checkpoint)")


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
        import torchvision
        from torch.utils.checkpoint import checkpoint
    except ImportError as e:
        print(f"skip: torch or torchvision is not importable ({e})")
        return common.SKIP
    if (skip := common.cuda_or_skip(torch)) is not None:
        return skip

    torch.manual_seed(args.seed)
    model = torchvision.models.vgg16(weights=None, num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, device="cuda")
    y = torch.randint(0, 1000, (args.batch,), device="cuda")

    # VGG-16's features are five conv blocks, each ending in a max-pool; checkpointing a block
    # keeps only its input and recomputes the rest during backward.
    blocks, block = [], []
    for layer in model.features:
        block.append(layer)
        if isinstance(layer, torch.nn.MaxPool2d):
            blocks.append(torch.nn.Sequential(*block))
            block = []

    def forward(inp):
        if not args.checkpoint:
            return model(inp)
        h = inp
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False)
        h = torch.flatten(model.avgpool(h), 1)
        return model.classifier(h)

    def iteration():
        with common.forward_context(torch, args.precision, args.offload):
            loss = F.cross_entropy(forward(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    times, oom = common.timed_loop(torch, args.steps, iteration, args.nvtx_mark)
    return common.print_summary(torch, times, oom, common.image_model_settings(torch, args))


if __name__ == "__main__":
    sys.exit(main())
