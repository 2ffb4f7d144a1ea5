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


def build(torch, torchvision, checkpoint, args):
    """The network, and its forward pass (checkpointed block by block with --checkpoint)."""
    model = torchvision.models.vgg16(weights=None, num_classes=1000).cuda()
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

    return model, forward


def main():
    return common.train_image_model(parse_args(), build)


if __name__ == "__main__":
    sys.exit(main())
