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
    model = torchvision.models.resnet152(weights=None, num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, device="cuda")
    y = torch.randint(0, 1000, (args.batch,), device="cuda")

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
