#!/usr/bin/env python3
"""Sums the samples bench/host_sampler.cpp wrote (one file, PREFIX.PID) by thread: for the threads
with the most samples, the share of each module and function at the top of the stack (where the
CPU was), and the share of samples with each of umswap's functions anywhere in the stack (in the
innermost 62 frames the sampler keeps; umswap's sit near the top). A frame inside functions
inlined into one another is named after the outermost, the function the code was compiled in.

    host_samples.py SAMPLES [--lib build/lib/libumswap.so] [--threads N] [--top N]

libumswap.so's functions are hidden from the dynamic symbol table: --lib names a copy with its
symbols (the build the run used, before stripping), for addr2line. Exit: 0, 1 when the file holds
no sample, 2 for bad arguments.
"""
import argparse
import collections
import subprocess
import sys


def split(frame):
    """`module+0xOFFSET[:symbol]` -> (module, offset, symbol); a module may hold '+' itself."""
    module, _, rest = frame.partition("+0x")
    offset, _, symbol = rest.partition(":")
    return module, "0x" + offset, symbol


def parse(path):
    samples = []
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        samples.append((int(parts[0]), parts[1:]))
    return samples


class Symbols:
    """addr2line over one library, many offsets at a time."""

    def __init__(self, lib):
        self.lib, self.names = lib, {}

    def load(self, offsets):
        unnamed = sorted(o for o in offsets if o not in self.names)
        if not unnamed or not self.lib:
            return
        try:
            out = subprocess.run(["addr2line", "-a", "-f", "-i", "-C", "-e", self.lib] + unnamed,
                                 capture_output=True, text=True, check=False).stdout.split("\n")
        except OSError as e:
            print(f"host_samples.py: addr2line: {e}", file=sys.stderr)
            return
        # Per address: its line ("0x..."), then a function line and a location line for each
        # inlined level, innermost first. The last function is the one the frame is in.
        names, pairs = [], None
        for line in out:
            if line.startswith("0x"):
                if pairs is not None:
                    names.append(pairs[-2] if len(pairs) >= 2 else "?")
                pairs = []
            elif pairs is not None and line:
                pairs.append(line)
        if pairs is not None:
            names.append(pairs[-2] if len(pairs) >= 2 else "?")
        for offset, name in zip(unnamed, names):
            self.names[offset] = name or "?"

    def name(self, frame):
        module, offset, symbol = split(frame)
        if module == "libumswap.so" and offset in self.names:
            return "umswap " + self.names[offset]
        return f"{module}:{symbol}" if symbol else module


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("samples")
    p.add_argument("--lib", default="")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--top", type=int, default=15)
    a = p.parse_args()
    samples = parse(a.samples)
    if not samples:
        print(f"host_samples.py: {a.samples}: no sample", file=sys.stderr)
        return 1
    symbols = Symbols(a.lib)
    symbols.load({split(f)[1] for _, frames in samples for f in frames
                  if f.startswith("libumswap.so+")})
    threads = collections.Counter(t for t, _ in samples)
    print(f"{len(samples)} samples; threads with the most: {threads.most_common(8)}")
    for tid, count in threads.most_common(a.threads):
        stacks = [frames for t, frames in samples if t == tid and frames]
        modules = collections.Counter(split(f[0])[0] for f in stacks)
        tops = collections.Counter(symbols.name(f[0]) for f in stacks)
        inside = collections.Counter()
        for frames in stacks:
            inside.update({symbols.name(f) for f in frames if f.startswith("libumswap.so+")})
        with_umswap = sum(1 for frames in stacks if any(f.startswith("libumswap.so+")
                                                        for f in frames))
        print(f"\nthread {tid}: {count} samples, {100 * with_umswap / count:.1f}% with umswap "
              f"in the stack")
        print("  at the top, by module: " + ", ".join(
            f"{m} {100 * c / count:.1f}%" for m, c in modules.most_common(6)))
        print("  at the top, by function:")
        for name, c in tops.most_common(a.top):
            print(f"    {100 * c / count:5.1f}%  {name[:110]}")
        print("  umswap's functions anywhere in the stack:")
        for name, c in inside.most_common(a.top):
            print(f"    {100 * c / count:5.1f}%  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
