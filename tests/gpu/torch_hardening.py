#!/usr/bin/env python3
"""PyTorch programs for umswap's hardening tests on a GPU (torch_hardening.sh runs them).

    profiler     train a small MLP with torch.profiler recording CUDA activity from before the
                 first CUDA call (--profile-from 0), or from step N on (the tracer and the advisor
                 are running by then), and print how many CUDA events the profiler recorded
    dataloader   train from a DataLoader with 2 forked workers, and fork one more child that
                 exits normally (Python finalization and C exit handlers run in it)
    graph        capture one training step of a small MLP in a CUDA graph
                 (torch.cuda.graphs), then replay it on new data
    compile      train a small MLP compiled with torch.compile(mode="reduce-overhead") (Inductor's
                 Triton kernels, replayed through CUDA graphs)

Each prints its losses as float.hex() ("step <i> loss <hex>"), so a native run and a run under
umswap can be diffed exactly, then "done". Exit: 0 done, 1 failed, 77 skipped (no torch/CUDA).
"""

import argparse
import os
import sys

# cuBLAS needs a fixed workspace configuration to be deterministic; read when cuBLAS starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def import_torch():
    try:
        import torch
    except ImportError as e:
        print(f"skip: torch is not importable ({e})")
        sys.exit(77)
    return torch


def require_cuda(torch):
    if not torch.cuda.is_available():
        print("skip: torch sees no CUDA device")
        sys.exit(77)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)


def mlp(torch, width=256):
    from torch import nn
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10)).cuda()


def batches(torch, steps, batch=128, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        yield torch.randn(batch, 64, generator=g), torch.randint(0, 10, (batch,), generator=g)


def train_step(torch, model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def run_profiler(args):
    torch = import_torch()
    from torch.profiler import ProfilerActivity, profile
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    if args.profile_from == 0:
        prof.start()  # before anything touches CUDA
    require_cuda(torch)
    model = mlp(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for i, (x, y) in enumerate(batches(torch, args.steps)):
        if i == args.profile_from and i > 0:
            torch.cuda.synchronize()
            prof.start()
        loss = train_step(torch, model, opt, x.cuda(), y.cuda())
        print(f"step {i} loss {loss.item().hex()}", flush=True)
    torch.cuda.synchronize()
    prof.stop()
    kernels = sum(1 for e in prof.events() if getattr(e, "device_type", None) is not None
                  and "CUDA" in str(e.device_type))
    print(f"profiler: {kernels} CUDA events", file=sys.stderr, flush=True)
    print("done")
    return 0


class Pids(object):
    """A dataset whose items carry the pid of the process that made them."""

    def __init__(self, torch, n):
        g = torch.Generator().manual_seed(3)
        self.x = torch.randn(n, 64, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i], os.getpid()


def run_dataloader(args):
    torch = import_torch()
    require_cuda(torch)
    from torch.utils.data import DataLoader
    model = mlp(torch)  # CUDA is in use before the workers fork, as in any training script
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(Pids(torch, args.steps * 64), batch_size=64, num_workers=2,
                        multiprocessing_context="fork", persistent_workers=False)
    worker_pids = set()
    step = 0
    for epoch in range(2):  # workers are forked again for the second epoch
        for x, y, pids in loader:
            worker_pids.update(int(p) for p in pids)
            loss = train_step(torch, model, opt, x.cuda(), y.cuda())
            print(f"step {step} loss {loss.item().hex()}", flush=True)
            step += 1
    sys.stdout.flush()
    child = os.fork()
    if child == 0:
        # Not os._exit: interpreter finalization and the C library's exit handlers run, as in a
        # subprocess that ends normally.
        sys.exit(0)
    _, status = os.waitpid(child, 0)
    print(f"pid {os.getpid()}", flush=True)
    print(f"workers {' '.join(str(p) for p in sorted(worker_pids))}", flush=True)
    print(f"child {child} exit {os.waitstatus_to_exitcode(status)}", flush=True)
    if len(worker_pids) < 2 or os.getpid() in worker_pids:
        print(f"FAIL: expected batches from at least 2 worker processes, got {worker_pids}")
        return 1
    print("done")
    return 0


def train_static(torch, args, model, static_x, static_y, step):
    """Copies each batch into the static inputs, runs step() (returns the loss), prints the losses,
    then the weights' sum and "done"."""
    for i, (x, y) in enumerate(batches(torch, args.steps)):
        static_x.copy_(x)
        static_y.copy_(y)
        print(f"step {i} loss {step().item().hex()}", flush=True)
    weights = sum(float(p.double().sum()) for p in model.parameters())
    print(f"weights {weights.hex()}")
    print("done")
    return 0


def run_graph(args):
    torch = import_torch()
    require_cuda(torch)
    model = mlp(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    static_x = torch.zeros(128, 64, device="cuda")
    static_y = torch.zeros(128, dtype=torch.long, device="cuda")
    # Warm-up on a side stream (as torch.cuda.graphs documents), then capture one whole step.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x, y in batches(torch, 3, seed=2):
            static_x.copy_(x)
            static_y.copy_(y)
            train_step(torch, model, opt, static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = torch.nn.functional.cross_entropy(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    def step():
        graph.replay()
        return static_loss

    return train_static(torch, args, model, static_x, static_y, step)


def run_eager(args):
    torch = import_torch()
    require_cuda(torch)
    model = mlp(torch, width=1024)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    static_x = torch.zeros(128, 64, device="cuda")
    static_y = torch.zeros(128, dtype=torch.long, device="cuda")
    return train_static(torch, args, model, static_x, static_y,
                        lambda: train_step(torch, model, opt, static_x, static_y))


def run_compile(args):
    torch = import_torch()
    require_cuda(torch)
    model = mlp(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def forward_loss(x, y):
        return torch.nn.functional.cross_entropy(model(x), y)

    # The forward (and its backward) compiled; the optimizer step stays eager. Inputs are
    # copied into static tensors, as CUDA-graph replay wants.
    compiled = torch.compile(forward_loss, mode="reduce-overhead")
    static_x = torch.zeros(128, 64, device="cuda")
    static_y = torch.zeros(128, dtype=torch.long, device="cuda")
    def step():
        opt.zero_grad(set_to_none=True)
        loss = compiled(static_x, static_y)
        loss.backward()
        opt.step()
        return loss

    return train_static(torch, args, model, static_x, static_y, step)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=["profiler", "dataloader", "graph", "compile", "eager"])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--profile-from", type=int, default=0,
                   help="profiler: the step it starts at (0: before the first CUDA call)")
    args = p.parse_args()
    return {"profiler": run_profiler, "dataloader": run_dataloader, "graph": run_graph,
            "compile": run_compile, "eager": run_eager}[args.case](args)


if __name__ == "__main__":
    sys.exit(main())
