#!/usr/bin/env python3
"""Time ResNet-152 training iterations: many small activations, deep, with batch norm.

torchvision's ResNet-152 (random weights, 1000 classes; nothing is downloaded) trains with SGD on
one random batch from a fixed seed. Each iteration is timed between two torch.cuda.synchronize()
calls, and the output is that of vgg16.py (common.py says more):

    iter <i> ms <float> loss <float>
    summary {"first_ms": ..., "steady_median_ms": ..., "peak_allocated_bytes": ...,
             "peak_reserved_bytes": ..., ...}            (one line of JSON)

--offload and --checkpoint are PyTorch's own ways to save GPU memory, to compare umswap with.
If an iteration runs out of GPU memory the script prints `oom at iter <i>: OutOfMemoryError`,
then the summary with "oom": true, and exits 1.
Exit: 0 done, 1 out of memory, 2 bad arguments, 77 skipped (no torch, torchvision or CUDA).
"""

import sys

import common


def parse_args():
    return common.parse_image_model_args(
        __doc__, "ResNet", 64,
        "recompute each bottleneck block of layer1..layer4 in backward "
        "(torch.utils.checkpoint)")


def build(torch, torchvision, checkpoint, args):
    """The network, and its forward pass (checkpointed block by block with --checkpoint)."""
    model = torchvision.models.resnet152(weights=None, num_classes=1000).cuda()
    # The 50 bottleneck blocks of the four stages; checkpointing one keeps only its input and
    # recomputes the rest during backward. The stem (conv1 .. maxpool) and the head stay as they
    # are. A recomputed block updates batch norm's running statistics a second time, which does
    # not change the loss in training mode (batch statistics are used).
    blocks = [b for stage in (model.layer1, model.layer2, model.layer3, model.layer4)
              for b in stage]

    def forward(inp):
        if not args.checkpoint:
            return model(inp)
        h = model.maxpool(model.relu(model.bn1(model.conv1(inp))))
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False)
        h = torch.flatten(model.avgpool(h), 1)
        return model.fc(h)

    return model, forward


def main():
    return common.train_image_model(parse_args(), build)


if __name__ == "__main__":
    sys.exit(main())
