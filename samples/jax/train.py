"""JAX training loops for umswap: a jitted model trained with SGD on fixed random data.

One jitted step (forward, backward, update) an iteration. `--model mlp`: a multi-layer perceptron
(tanh); `--model transformer`: a decoder-only language model (pre-norm, causal attention written
with jnp, GELU MLP, tied embeddings) on random tokens.

JAX is the sample for programs that are not PyTorch (docs/jax.md): by default XLA maps its
memory with cuMemCreate/cuMemMap, which umswap cannot manage, and `umswap run` selects XLA's
stream-ordered allocator instead. It prints in the format of samples/pytorch/common.py's scripts,
which `umswap compare` reads:

    iter <i> ms <float> loss <float>
    summary {"first_ms": ..., "steady_median_ms": ..., "peak_allocated_bytes": ..., "iters": ...,
             "oom": false, "checksum": "<hex>", <the settings>}

Each iteration is timed until its loss is on the host. The checksum hashes the weights after the
last step bit for bit; XLA's GPU kernels are asked to be deterministic
(--xla_gpu_deterministic_ops), so two runs of the same build agree.
peak_allocated_bytes is JAX's own peak_bytes_in_use. Exits 77 without JAX or a GPU.

Memory (JAX's peak_bytes_in_use, H200, JAX 0.11.2, 2026-12-02): the MLP at its defaults (16
layers of 8192 x 8192, batch 8192) 9.70 GB; the transformer at its defaults (12 layers of width
1024, 8 sequences of 1024 tokens, a vocabulary of 32,000) 24.88 GB.
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
import time

SKIP = 77


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("mlp", "transformer"), default="mlp")
    p.add_argument("--layers", type=int, default=None,
                   help="layers (default 16 for the MLP, 12 for the transformer)")
    p.add_argument("--width", type=int, default=None,
                   help="units a layer (default 8192 for the MLP, 1024 for the transformer)")
    p.add_argument("--batch", type=int, default=None,
                   help="rows (MLP, default 8192) or sequences (transformer, default 8) an "
                        "iteration")
    p.add_argument("--seq", type=int, default=1024, help="transformer: tokens a sequence")
    p.add_argument("--heads", type=int, default=16, help="transformer: attention heads")
    p.add_argument("--vocab", type=int, default=32000, help="transformer: vocabulary")
    p.add_argument("--steps", type=int, default=10, help="iterations (default 10)")
    p.add_argument("--lr", type=float, default=1e-3, help="SGD step (default 1e-3)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    mlp = args.model == "mlp"
    if args.layers is None:
        args.layers = 16 if mlp else 12
    if args.width is None:
        args.width = 8192 if mlp else 1024
    if args.batch is None:
        args.batch = 8192 if mlp else 8
    for name in ("layers", "width", "batch", "steps", "seq", "heads", "vocab"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if not mlp and args.width % args.heads:
        p.error("--width must be a multiple of --heads")

    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_deterministic_ops" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_gpu_deterministic_ops=true").strip()
    try:
        import jax
        import jax.numpy as jnp
        import numpy as np
    except ImportError as e:
        print(f"skip: jax is not importable ({e})")
        return SKIP
    try:
        device = jax.devices("gpu")[0]
    except RuntimeError as e:
        print(f"skip: jax sees no GPU ({e})")
        return SKIP

    key = jax.random.PRNGKey(args.seed)
    if mlp:
        params, batch, loss_fn = mlp_model(jax, jnp, np, args, key)
    else:
        params, batch, loss_fn = transformer_model(jax, jnp, np, args, key)
    params = jax.device_put(params, device)
    batch = jax.device_put(batch, device)

    def step(ps, batch):
        loss, grads = jax.value_and_grad(loss_fn)(ps, batch)
        return jax.tree_util.tree_map(lambda w, g: w - args.lr * g, ps, grads), loss

    step = jax.jit(step, donate_argnums=(0,))

    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        params, loss = step(params, batch)
        loss = float(loss)  # waits for the step
        ms = (time.perf_counter() - t0) * 1e3
        times.append(ms)
        print(f"iter {i} ms {ms:.3f} loss {loss:.6f}", flush=True)

    digest = hashlib.sha256()
    for w in jax.tree_util.tree_leaves(params):
        digest.update(np.asarray(jax.device_get(w)).tobytes())
    stats = device.memory_stats() or {}
    summary = {
        "first_ms": times[0],
        "steady_median_ms": statistics.median(times[2:]) if len(times) > 2 else None,
        "peak_allocated_bytes": stats.get("peak_bytes_in_use"),
        "iters": len(times),
        "oom": False,
        "checksum": digest.hexdigest()[:16],
        "model": args.model,
        "layers": args.layers,
        "width": args.width,
        "batch": args.batch,
        "seq": None if mlp else args.seq,
    }
    print("summary " + json.dumps(summary), flush=True)
    return 0


def mlp_model(jax, jnp, np, args, key):
    keys = jax.random.split(key, args.layers + 2)
    scale = 1.0 / np.sqrt(args.width)
    params = [jax.random.normal(k, (args.width, args.width), jnp.float32) * scale
              for k in keys[:args.layers]]
    x = jax.random.normal(keys[-2], (args.batch, args.width), jnp.float32)
    y = jax.random.normal(keys[-1], (args.batch, args.width), jnp.float32)

    def loss_fn(ws, batch):
        h, target = batch
        for w in ws:
            h = jnp.tanh(h @ w)
        return jnp.mean((h - target) ** 2)

    return params, (x, y), loss_fn


def transformer_model(jax, jnp, np, args, key):
    d, heads, seq = args.width, args.heads, args.seq
    keys = iter(jax.random.split(key, 4 * args.layers + 3))

    def dense(k, n_in, n_out):
        return jax.random.normal(k, (n_in, n_out), jnp.float32) / np.sqrt(n_in)

    layers = [{
        "norm1": jnp.ones((d,), jnp.float32), "norm2": jnp.ones((d,), jnp.float32),
        "qkv": dense(next(keys), d, 3 * d), "out": dense(next(keys), d, d),
        "up": dense(next(keys), d, 4 * d), "down": dense(next(keys), 4 * d, d),
    } for _ in range(args.layers)]
    params = {"embed": jax.random.normal(next(keys), (args.vocab, d), jnp.float32) * 0.02,
              "pos": jax.random.normal(next(keys), (seq, d), jnp.float32) * 0.02,
              "layers": layers}
    tokens = jax.random.randint(next(keys), (args.batch, seq + 1), 0, args.vocab)

    def norm(x, g):
        x = x - x.mean(-1, keepdims=True)
        return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g

    mask = jnp.tril(jnp.ones((seq, seq), bool))

    def loss_fn(ps, tokens):
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        h = ps["embed"][inputs] + ps["pos"]
        b = h.shape[0]
        for layer in ps["layers"]:
            q, k, v = jnp.split(norm(h, layer["norm1"]) @ layer["qkv"], 3, axis=-1)
            q, k, v = (t.reshape(b, seq, heads, d // heads).transpose(0, 2, 1, 3)
                       for t in (q, k, v))
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads)
            attention = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1) @ v
            h = h + attention.transpose(0, 2, 1, 3).reshape(b, seq, d) @ layer["out"]
            h = h + jax.nn.gelu(norm(h, layer["norm2"]) @ layer["up"]) @ layer["down"]
        logits = h @ ps["embed"].T
        log_probs = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(log_probs, targets[..., None], axis=-1).mean()

    return params, tokens, loss_fn


if __name__ == "__main__":
    sys.exit(main())
