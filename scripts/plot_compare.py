#!/usr/bin/env python3
"""Draw the JSON of `umswap compare --json FILE` as a PNG bar chart.

    python3 scripts/plot_compare.py compare.json -o compare.png

Top panel: median steady iteration time per mode (bars), the native time (a dashed line across)
and each mode's link limit max(native, GB in / host->device, GB out / device->host) (a short
solid line over its bar); a failed or skipped mode gets an empty slot with its status.
Bottom panel: GPU page faults per steady iteration (bars, left axis) and GB moved host->device
and device->host per steady iteration (bars, right axis).

Needs matplotlib (Debian: python3-matplotlib; pip: matplotlib).
Exit: 0 written, 1 the JSON cannot be read or is not compare output, 2 usage error or no
matplotlib.
"""
import argparse
import json
import os
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="The schema of the JSON is in docs/cli.md (`umswap compare`, --json).")
    p.add_argument("json", help="the file written by `umswap compare --json FILE`")
    p.add_argument("-o", "--output",
                   help="PNG to write (default: the JSON's name with .png)")
    p.add_argument("--title", help="chart title (default: the compared command)")
    return p.parse_args(argv)


KNOWN_VERSIONS = (1, 2, 3, 4)


def load(path):
    """The compare document, or exit 1 with one line saying why not."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        sys.exit(f"plot_compare: error: {path}: cannot open: {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"plot_compare: error: {path}: not JSON ({e})")
    # Versions 2 to 4 added fields (baselines, ranks) and changed how results are judged; the
    # fields of the modes read here are unchanged.
    if not isinstance(doc, dict) or doc.get("umswap_compare_version") not in KNOWN_VERSIONS:
        sys.exit(f"plot_compare: error: {path}: not `umswap compare --json` output "
                 "(no umswap_compare_version 1 to 4)")
    if not isinstance(doc.get("modes"), list) or not doc["modes"]:
        sys.exit(f"plot_compare: error: {path}: no modes")
    return doc


def number(mode, key):
    v = mode.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def plot(doc, output, title, plt):
    modes = doc["modes"]
    # A torchrun command has one entry per mode and rank (version 3 on): "online r1".
    names = [str(m.get("mode", "?")) + (f" r{m['rank']}" if isinstance(m.get("rank"), int) else "")
             for m in modes]
    x = list(range(len(modes)))
    steady = [number(m, "steady_median_ms") for m in modes]
    link = [number(m, "link_limit_ms") for m in modes]
    native = next((number(m, "steady_median_ms") for m in modes
                   if m.get("mode") == "native" and m.get("status") == "ok"), None)
    faults = [number(m, "gpu_faults_per_iteration") for m in modes]
    gb_in = [(number(m, "bytes_in_per_iteration") or 0) / 1e9
             if number(m, "bytes_in_per_iteration") is not None else None for m in modes]
    gb_out = [(number(m, "bytes_out_per_iteration") or 0) / 1e9
              if number(m, "bytes_out_per_iteration") is not None else None for m in modes]

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6.0, 1.6 * len(modes) + 2), 7.5),
                                      sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    top.bar(x, [v or 0 for v in steady], width=0.6, color="#4c72b0", label="steady ms (median)")
    ymax = max([v for v in steady + link + [native] if v] or [1.0])
    for i, (m, v) in enumerate(zip(modes, steady)):
        if m.get("status") != "ok":
            top.text(i, ymax * 0.02, str(m.get("status")), ha="center", va="bottom",
                     rotation=90, color="#c44e52")
        elif v is not None:
            top.text(i, v, f"{v:.1f}", ha="center", va="bottom", fontsize=8)
    if native:
        top.axhline(native, color="black", linestyle="--", linewidth=1, label="native")
    labelled = False
    for i, v in enumerate(link):
        if v is not None:
            top.hlines(v, i - 0.4, i + 0.4, colors="#dd8452", linewidth=2.5,
                       label=None if labelled else "link limit")
            labelled = True
    top.set_ylabel("ms per steady iteration")
    top.set_ylim(0, ymax * 1.35)  # room for the legend above the bars
    top.legend(loc="upper right", ncol=3, fontsize=8)
    probe = doc.get("probe") or {}
    if not probe.get("ok"):
        top.text(0.99, 0.97, f"no link figures: {probe.get('error') or 'unknown'}",
                 transform=top.transAxes, ha="right", va="top", fontsize=7, color="gray")

    w = 0.27
    bottom.bar([i - w for i in x], [v or 0 for v in faults], width=w, color="#8172b2",
               label="GPU faults / it")
    bottom.set_ylabel("GPU page faults per iteration")
    right = bottom.twinx()
    right.bar(x, [v or 0 for v in gb_in], width=w, color="#55a868", label="GB in / it")
    right.bar([i + w for i in x], [v or 0 for v in gb_out], width=w, color="#c44e52",
              label="GB out / it")
    right.set_ylabel("GB moved per iteration")
    top_faults = max([v for v in faults if v] or [0.0])
    top_gb = max([v for v in gb_in + gb_out if v] or [0.0])
    bottom.set_ylim(0, top_faults * 1.4 or 1.0)
    right.set_ylim(0, top_gb * 1.4 or 1.0)
    if all(v is None for v in faults + gb_in + gb_out):
        bottom.text(0.5, 0.5, "no fault or byte counters in the stats files",
                    transform=bottom.transAxes, ha="center", va="center", color="gray")
    handles = bottom.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    bottom.legend(handles, [h.get_label() for h in handles], loc="upper right", ncol=3,
                  fontsize=8)
    bottom.set_xticks(x)
    bottom.set_xticklabels(names)

    budget = doc.get("budget_bytes")
    command = " ".join(str(a) for a in doc.get("command") or [])
    head = title or (os.path.basename(command.split(" ")[0]) if command else "umswap compare")
    if isinstance(budget, (int, float)) and not isinstance(budget, bool):
        head += f"  (budget {budget / 2**30:.2f} GiB)"
    fig.suptitle(head)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)


def main(argv):
    args = parse_args(argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_compare: error: matplotlib is not installed (Debian: apt-get install "
              "python3-matplotlib; pip: pip install matplotlib)", file=sys.stderr)
        return 2
    doc = load(args.json)
    output = args.output or os.path.splitext(args.json)[0] + ".png"
    try:
        plot(doc, output, args.title, plt)
    except OSError as e:
        sys.exit(f"plot_compare: error: {output}: cannot write: {e.strerror}")
    print(f"plot_compare: wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
