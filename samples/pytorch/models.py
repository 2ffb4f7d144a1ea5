#!/usr/bin/env python3
"""Time training iterations of models umswap was not tuned on (built from configs, nothing fetched).

    models.py --model vit|llama|bert|lstm|convnext [--batch N] [--steps N] [--offload]
              [--checkpoint] [--deterministic] [--seed S]

  vit       torchvision's ViT-L/16 at 224 px, 1000 classes, bf16 autocast, AdamW; batch 64
  llama     a Llama-style causal LM (transformers: 16 layers, 2048 wide, 16 heads, 5504 MLP,
            32,000 tokens, about 0.9 B parameters), sequence 1024, bf16 autocast, AdamW; batch 8
  bert      BERT-large masked LM (transformers: 24 layers, 1024 wide), sequence 512, bf16
            autocast, AdamW; batch 32
  lstm      a 4-layer LSTM language model through cuDNN (2048 wide, 32,000 tokens), sequence 256,
            fp32, Adam; batch 64
  convnext  torchvision's ConvNeXt-Base at 224 px, bf16 autocast, AdamW; batch 128

Each iteration is timed between two torch.cuda.synchronize() calls and printed as the other
samples print it (common.py says the format: `iter <i> ms <float> loss <float>`, then one
`summary {json}` line), so `umswap compare --baselines offload,checkpoint` runs them beside
PyTorch's own memory savers. --checkpoint checkpoints every transformer block (vit, llama, bert)
or stage (convnext); the LSTM has none (exit 2). Inputs are random, fixed by --seed.

Exit: 0 done, 1 out of memory, 2 bad arguments, 77 skipped (no torch, torchvision, transformers
or CUDA).
"""
import argparse
import sys

import common

MODELS = {"vit": 64, "llama": 8, "bert": 32, "lstm": 64, "convnext": 128}  # default batches


def build(name, torch, batch, use_checkpoint):
    """(model, optimizer, step() -> loss tensor, precision "bf16" or "fp32"): the model on the
    GPU, with every transformer block or ConvNeXt stage checkpointed if asked."""
    nn = torch.nn
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        """A block whose activations are recomputed in the backward pass."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return checkpoint(self.inner, x, use_reentrant=False)

    if name in ("vit", "convnext"):
        import torchvision
        if name == "vit":
            model = torchvision.models.vit_l_16(num_classes=1000)
            blocks = model.encoder.layers
        else:
            model = torchvision.models.convnext_base(num_classes=1000)
            blocks = model.features
        if use_checkpoint:
            for i, block in enumerate(blocks):
                blocks[i] = Checkpointed(block)
        model = model.cuda()
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            return nn.functional.cross_entropy(model(x), y)
        return model, opt, step, "bf16"
    if name in ("llama", "bert"):
        import transformers
        if name == "llama":
            cfg = transformers.LlamaConfig(hidden_size=2048, num_hidden_layers=16,
                                           num_attention_heads=16, intermediate_size=5504,
                                           vocab_size=32000, max_position_embeddings=1024)
            model = transformers.LlamaForCausalLM(cfg)
            seq = 1024
        else:
            cfg = transformers.BertConfig(hidden_size=1024, num_hidden_layers=24,
                                          num_attention_heads=16, intermediate_size=4096)
            model = transformers.BertForMaskedLM(cfg)
            seq = 512
        if use_checkpoint:
            model.gradient_checkpointing_enable()
        model = model.cuda()
        tokens = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            return model(input_ids=tokens, labels=tokens).loss
        return model, opt, step, "bf16"
    # lstm
    vocab, width, seq = 32000, 2048, 256

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.lstm = nn.LSTM(width, width, num_layers=4, batch_first=True)
            self.head = nn.Linear(width, vocab)

        def forward(self, t):
            out, _ = self.lstm(self.embed(t))
            return self.head(out)

    model = LM().cuda()
    tokens = torch.randint(0, vocab, (batch, seq + 1), device="cuda")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        logits = model(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
    return model, opt, step, "fp32"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), required=True)
    p.add_argument("--batch", type=int, help="per iteration (default: the model's, above)")
    p.add_argument("--steps", type=int, default=12, help="iterations (default 12)")
    common.add_memory_saving_args(p, "checkpoint every transformer block or ConvNeXt stage")
    common.add_determinism_arg(p)
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data (default 0)")
    a = p.parse_args()
    batch = a.batch if a.batch is not None else MODELS[a.model]
    if batch < 1 or a.steps < 1:
        p.error("--batch and --steps must be at least 1")
    if a.checkpoint and a.model == "lstm":
        p.error("--checkpoint: the LSTM model has no blocks to checkpoint")
    try:
        import torch
        if a.model in ("vit", "convnext"):
            import torchvision  # noqa: F401
        if a.model in ("llama", "bert"):
            import transformers  # noqa: F401
    except ImportError as e:
        print(f"skip: a library {a.model} needs is not importable ({e})")
        return common.SKIP
    if (skip := common.cuda_or_skip(torch)) is not None:
        return skip
    if a.deterministic:
        common.make_deterministic(torch)
    torch.manual_seed(a.seed)
    model, opt, step, precision = build(a.model, torch, batch, a.checkpoint)
    model.train()

    def iteration():
        with common.forward_context(torch, precision, a.offload):
            loss = step()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    times, oom = common.timed_loop(torch, a.steps, iteration)
    settings = {"model": a.model, "batch": batch, "precision": precision, "offload": a.offload,
                "checkpoint": a.checkpoint, "device": torch.cuda.get_device_name()}
    if a.deterministic:
        settings["checksum"] = common.param_checksum(torch, model.parameters())
    return common.print_summary(torch, times, oom, settings)


if __name__ == "__main__":
    sys.exit(main())
