#!/usr/bin/env python3
"""A probe (not a test): do SparseAdam's coalesce and step work on memory that page-faults? No umswap.

    python3 sparse_fault_probe.py LIBRARY [--steps N] [--memories LIST]

Why: the correctness matrix's EmbeddingBag model (sparse gradients, SparseAdam) stopped twice
under umswap with `merge_sort: failed to synchronize: cudaErrorInvalidAddressSpace` in
`grad.coalesce()` (2026-11-30, runs 111 and 116), 2 of 46 such runs, at random iterations. If a
kernel of that path cannot take page faults on pages that must migrate back from the host, it
would fail only when umswap happened to leave one of its buffers on the host: rare and timing
dependent, as seen. This probe asks that without umswap.

LIBRARY is build/lib/torch_managed_alloc.so (built from bench/), a PyTorch pluggable allocator.
The probe builds the matrix model's tables (8 EmbeddingBag tables of 200,000 x 128, sparse
gradients, batch 4096 x 20 lookups), and runs N steps of forward, backward, coalesce and
SparseAdam in four processes whose every tensor is its own allocation: device memory; managed
memory populated by first-touch faults; managed memory populated before use; and managed memory
prefetched to the host at allocation, so that every GPU access to a new tensor migrates its pages
back by a fault ("host"); and managed memory whose pieces a thread keeps moving to the host and
back while the kernels run ("churn": umswap's evictions racing the program's accesses, as when a
plan is wrong; not in the default list). Each process prints its steps' checksums (the coalesced
gradient's indices and values and the weights, bit for bit) or the error that stopped it; the
probe prints, per memory, the steps that ran, whether they match device memory's bit for bit, and
any error.
About 3 GiB in all (weights and SparseAdam's two moments), far below the GPU's memory.
Exit 77 when torch or a GPU is missing.
"""
import argparse
import hashlib
import os
import subprocess
import sys

SKIP = 77
MEMORIES = ("device", "managed", "populated", "host", "churn")
TABLES, ROWS, DIM, BATCH, PER = 8, 200_000, 128, 4096, 20


def digest(*tensors):
    """The tensors' bits, hashed."""
    import torch
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def child(library, steps):
    import torch
    from torch import nn
    torch.cuda.memory.change_current_allocator(torch.cuda.memory.CUDAPluggableAllocator(
        library, "torch_managed_malloc", "torch_managed_free"))
    torch.manual_seed(0)
    g = torch.Generator(device="cuda").manual_seed(0)
    bags = nn.ModuleList(nn.EmbeddingBag(ROWS, DIM, mode="sum", sparse=True)
                         for _ in range(TABLES)).cuda()
    idx = [torch.randint(0, ROWS, (BATCH * PER,), device="cuda", generator=g)
           for _ in range(TABLES)]
    off = torch.arange(0, BATCH * PER, PER, device="cuda")
    opt = torch.optim.SparseAdam(list(bags.parameters()), lr=1e-2)
    for step in range(steps):
        try:
            opt.zero_grad(set_to_none=True)
            z = torch.cat([b(idx[k], off) for k, b in enumerate(bags)], dim=1)
            z.square().mean().backward()
            grad = bags[0].weight.grad.coalesce()
            opt.step()
            torch.cuda.synchronize()
            print(f"step {step} {digest(grad.indices(), grad.values())} "
                  f"{digest(*[b.weight for b in bags])}", flush=True)
        except RuntimeError as e:
            print(f"error {step} {str(e).splitlines()[0]}", flush=True)
            return 3
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], int(sys.argv[3]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library")
    ap.add_argument("--steps", type=int, default=20, help="steps per process (default 20)")
    ap.add_argument("--memories", default=",".join(MEMORIES[:4]),
                    help=f"which of {','.join(MEMORIES)} (default all but churn)")
    a = ap.parse_args()
    memories = [m for m in a.memories.split(",") if m]
    if not memories or any(m not in MEMORIES for m in memories):
        ap.error(f"--memories: a comma-separated subset of {','.join(MEMORIES)}")
    if a.steps < 1:
        ap.error("--steps: at least 1")
    if not os.path.isfile(a.library):
        ap.error(f"{a.library}: no such file (build the bench targets: torch_managed_alloc)")
    try:
        import torch
    except ImportError:
        print("sparse_fault_probe: no torch here", file=sys.stderr)
        return SKIP
    if not torch.cuda.is_available():
        print("sparse_fault_probe: no CUDA GPU", file=sys.stderr)
        return SKIP
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    runs = {}
    for memory in memories:
        try:
            p = subprocess.run([sys.executable, __file__, "--child", os.path.abspath(a.library),
                                str(a.steps)], capture_output=True, text=True,
                               env=dict(os.environ, TORCH_MANAGED_ALLOC=memory),
                               timeout=60 + 10 * a.steps)
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            out = out.decode(errors="replace") if isinstance(out, bytes) else out
            err, rc = "timed out", 124
        steps = [l.split()[2:] for l in out.splitlines() if l.startswith("step ")]
        errors = [l for l in out.splitlines() if l.startswith("error ")]
        churned = [l for l in err.splitlines() if l.startswith("churn: ")]
        if rc not in (0, 3) and not errors:
            rest = [l for l in err.strip().splitlines() if not l.startswith("churn: ")]
            errors = [f"exit {rc}: {(rest or ['(no output)'])[-1]}"]
        runs[memory] = (steps, errors + churned)
    ref = runs.get("device", (None, None))[0]
    print("memory: steps run of N; against device memory's, bit for bit; error")
    for memory in memories:
        steps, errors = runs[memory]
        same = "-"
        if ref is not None and memory != "device":
            first = next((i for i, (x, y) in enumerate(zip(steps, ref)) if x != y), None)
            same = "same" if first is None else f"differs from step {first}"
        print(f"{memory}: {len(steps)} of {a.steps}; {same}; {'; '.join(errors) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
