"""A few deterministic training steps of a model umswap was not tuned on, to run natively and under
umswap and diff: each step's loss as float.hex() and its time, the peak reserved bytes at the end.

usage: python3 bench/torch_steps.py resnet50|gpt2 [STEPS]
  resnet50  torchvision ResNet-50, 100 classes, batch 48 at 224x224 (about 5 GiB reserved)
  gpt2      transformers GPT-2 small, random weights, batch 8 x 512 tokens (about 9 GiB reserved)
AdamW, STEPS steps (8 by default). Needs torch (and torchvision or transformers) and a GPU.
"""
import os, sys, time
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
name = sys.argv[1]
dev = "cuda"
if name == "resnet50":
    import torchvision
    model = torchvision.models.resnet50(num_classes=100).to(dev)
    def batch(g):
        return (torch.randn(48, 3, 224, 224, generator=g).to(dev),
                torch.randint(0, 100, (48,), generator=g).to(dev))
    def loss_of(x, y):
        return torch.nn.functional.cross_entropy(model(x), y)
else:
    from transformers import GPT2Config, GPT2LMHeadModel
    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).to(dev)
    def batch(g):
        ids = torch.randint(0, 50257, (8, 512), generator=g).to(dev)
        return ids, ids
    def loss_of(x, y):
        return model(input_ids=x, labels=y).loss
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
g = torch.Generator().manual_seed(1)
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
for i in range(steps):
    x, y = batch(g)
    torch.cuda.synchronize(); t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = loss_of(x, y)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    print(f"step {i} loss {loss.item().hex()} ms {1000 * (time.perf_counter() - t):.1f}", flush=True)
print(f"peak_reserved {torch.cuda.max_memory_reserved()}", flush=True)
