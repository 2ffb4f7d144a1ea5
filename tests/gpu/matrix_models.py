#!/usr/bin/env python3
"""The training loops of umswap's correctness matrix (correctness_matrix.py runs them).

    python3 matrix_models.py MODEL [--steps N] [--deterministic] [--scale S] [--attn eager]
                            [--step-sums]

MODEL is one of: cnn (torchvision ResNet-50, SGD with momentum), mlm (transformers'
BertForMaskedLM: tied input and output embeddings, AdamW, bf16 autocast), decoder (a Llama-style
causal LM from transformers, AdamW, bf16 autocast), lstm (a 4-layer nn.LSTM language model through
cuDNN, Adam), embbag (nn.EmbeddingBag tables with sparse gradients, SparseAdam, and a dense MLP
with Adam), moe (a mixture-of-experts MLP: top-2 routing by argsort, index_select, index_add_,
AdamW), varlen (the decoder on batches whose sequence length changes every step, 256 to 512
tokens, as a text loader that pads to each batch's longest gives: not in the matrix's default
models, since umswap does not plan it yet: docs/advisor.md), bert-issue (the BertForMaskedLM
of issue 36: 1024 wide, 24 layers, batch 32, sequence 512, about 25 GiB).

Each prints `iter <i> ms <float> loss <repr>` per step (timed between two synchronizes; the loss
printed with every digit of its float), then one line `summary {json}` with
"peak_reserved_bytes", "peak_allocated_bytes" and, with --deterministic, "checksum": the weights
after the last step, hashed bit for bit. Inputs are random and fixed by the seed (0); the same
command gives the same losses natively up to the run-to-run spread of non-deterministic kernels,
and with --deterministic (torch.use_deterministic_algorithms, CUBLAS_WORKSPACE_CONFIG) bit for
bit. Exit 77 when torch (or a model's library) or a GPU is missing.

--attn eager gives the BERT models transformers' eager attention (SDPA's fused attention has a
backward pass that is not deterministic even under --deterministic). --step-sums adds
` wsum <int>` to each `iter` line: the integer sum of the weights' bits after that step (exact and
order-free, so equal runs print equal sums).
"""
import argparse
import hashlib
import json
import os
import sys
import time

SKIP = 77
MODELS = ("cnn", "mlm", "decoder", "lstm", "embbag", "moe", "varlen", "bert-issue")


def build(name, torch, scale, attn=None):
    """(model, optimizers, step(i) -> loss tensor, autocast dtype or None)."""
    nn = torch.nn
    g = torch.Generator(device="cuda").manual_seed(1234)
    dev = "cuda"

    if name == "cnn":
        import torchvision
        model = torchvision.models.resnet50(num_classes=100).to(dev)
        batch = int(48 * scale)
        x = torch.randn(batch, 3, 160, 160, device=dev, generator=g)
        y = torch.randint(0, 100, (batch,), device=dev, generator=g)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def step(i):
            return nn.functional.cross_entropy(model(x), y)
        return model, [opt], step, None

    if name in ("mlm", "bert-issue"):
        from transformers import BertConfig, BertForMaskedLM
        if name == "mlm":
            cfg = BertConfig(hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                             intermediate_size=2048, vocab_size=30522)
            batch, seq = int(16 * scale), 256
        else:
            cfg = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                             intermediate_size=4096)
            batch, seq = 32, 512
        if attn:
            cfg._attn_implementation = attn
        model = BertForMaskedLM(cfg).to(dev)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev, generator=g)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(i):
            return model(input_ids=ids, labels=ids).loss
        return model, [opt], step, torch.bfloat16

    if name in ("decoder", "varlen"):
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                          num_attention_heads=8, num_key_value_heads=4, vocab_size=32000,
                          max_position_embeddings=1024)
        model = LlamaForCausalLM(cfg).to(dev)
        batch, seq = int(12 * scale), 512
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev, generator=g)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        # varlen: step i's length, fixed by the seed (a CPU generator: no GPU work of its own).
        lengths = torch.randint(256, seq + 1, (100000,),
                                generator=torch.Generator().manual_seed(1234)).tolist()

        def step(i):
            t = ids if name == "decoder" else ids[:, :lengths[i % len(lengths)]]
            return model(input_ids=t, labels=t).loss
        return model, [opt], step, torch.bfloat16

    if name == "lstm":
        vocab, width = 10000, 512

        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(vocab, width)
                self.rnn = nn.LSTM(width, width, num_layers=4, batch_first=True)
                self.out = nn.Linear(width, vocab)

            def forward(self, t):
                h, _ = self.rnn(self.emb(t))
                return self.out(h)
        model = LM().to(dev)
        batch, seq = int(32 * scale), 256
        ids = torch.randint(0, vocab, (batch, seq + 1), device=dev, generator=g)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def step(i):
            logits = model(ids[:, :-1])
            return nn.functional.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
        return model, [opt], step, None

    if name == "embbag":
        tables, rows, dim = 8, 200000, 128

        class Rec(nn.Module):
            def __init__(self):
                super().__init__()
                self.bags = nn.ModuleList(
                    nn.EmbeddingBag(rows, dim, mode="sum", sparse=True) for _ in range(tables))
                self.mlp = nn.Sequential(nn.Linear(tables * dim, 2048), nn.ReLU(),
                                         nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1))

            def forward(self, idx, off):
                z = torch.cat([b(idx[k], off) for k, b in enumerate(self.bags)], dim=1)
                return self.mlp(z).squeeze(1)
        model = Rec().to(dev)
        batch, per = int(4096 * scale), 20
        idx = [torch.randint(0, rows, (batch * per,), device=dev, generator=g)
               for _ in range(tables)]
        off = torch.arange(0, batch * per, per, device=dev)
        y = torch.rand(batch, device=dev, generator=g)
        sparse = [p for m in model.bags for p in m.parameters()]
        dense = list(model.mlp.parameters())
        opts = [torch.optim.SparseAdam(sparse, lr=1e-2), torch.optim.Adam(dense, lr=1e-3)]

        def step(i):
            return nn.functional.binary_cross_entropy_with_logits(model(idx, off), y)
        return model, opts, step, None

    if name == "moe":
        width, hidden, experts, tokens = 1024, 4096, 16, int(8192 * scale)

        class MoE(nn.Module):
            def __init__(self):
                super().__init__()
                self.router = nn.Linear(width, experts)
                self.w1 = nn.Parameter(torch.randn(experts, width, hidden, device=dev) * 0.02)
                self.w2 = nn.Parameter(torch.randn(experts, hidden, width, device=dev) * 0.02)
                self.head = nn.Linear(width, 1000)

            def forward(self, x):
                gates = self.router(x).softmax(-1)
                top, which = gates.topk(2, dim=-1)
                flat = which.reshape(-1)  # the expert of each routed slot, two per token
                order = flat.argsort(stable=True)
                counts = torch.bincount(flat, minlength=experts).tolist()
                weights = top.reshape(-1)
                out = torch.zeros_like(x)
                start = 0
                for e in range(experts):
                    n = counts[e]
                    if n == 0:
                        continue
                    slots = order[start:start + n]
                    rows = slots // 2
                    h = torch.relu(x.index_select(0, rows) @ self.w1[e]) @ self.w2[e]
                    h = h * weights[slots].unsqueeze(1).to(h.dtype)
                    out.index_add_(0, rows, h.to(out.dtype))
                    start += n
                return self.head(out + x)
        model = MoE().to(dev)
        x = torch.randn(tokens, width, device=dev, generator=g)
        y = torch.randint(0, 1000, (tokens,), device=dev, generator=g)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(i):
            return nn.functional.cross_entropy(model(x), y)
        return model, [opt], step, torch.bfloat16

    raise SystemExit(f"matrix_models: unknown model {name!r} (one of {', '.join(MODELS)})")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", choices=MODELS)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--scale", type=float, default=1.0, help="batch scale (default 1)")
    p.add_argument("--attn", choices=("eager",), help="attention of the BERT models")
    p.add_argument("--step-sums", action="store_true", help="weights' bit sum after each step")
    a = p.parse_args()
    if a.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    try:
        import torch
    except ImportError:
        print("matrix_models: no torch here", file=sys.stderr)
        return SKIP
    if not torch.cuda.is_available():
        print("matrix_models: no CUDA GPU", file=sys.stderr)
        return SKIP
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    if a.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        model, opts, step, dtype = build(a.model, torch, a.scale, a.attn)
    except ImportError as e:
        print(f"matrix_models: {e}", file=sys.stderr)
        return SKIP
    def weight_sum():
        total = 0
        with torch.no_grad():
            for t in model.parameters():
                bits = t.detach().contiguous().view(-1).view(torch.int32 if t.element_size() == 4
                                                             else torch.int16)
                total += int(bits.sum(dtype=torch.int64))
        return total

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for i in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for o in opts:
            o.zero_grad(set_to_none=True)
        if dtype is not None:
            with torch.autocast("cuda", dtype=dtype):
                loss = step(i)
        else:
            loss = step(i)
        loss.backward()
        for o in opts:
            o.step()
        value = loss.item()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        sums = f" wsum {weight_sum()}" if a.step_sums else ""
        print(f"iter {i} ms {ms:.3f} loss {value!r}{sums}", flush=True)
    summary = {"model": a.model, "steps": a.steps, "deterministic": a.deterministic,
               "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
               "peak_allocated_bytes": torch.cuda.max_memory_allocated()}
    if a.deterministic:
        h = hashlib.sha256()
        for name, t in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().reshape(-1).contiguous().view(torch.uint8).cpu().numpy().tobytes())
        summary["checksum"] = h.hexdigest()[:16]
    print("summary " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
