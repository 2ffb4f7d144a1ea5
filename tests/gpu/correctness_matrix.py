#!/usr/bin/env python3
"""umswap's correctness matrix: does umswap change what a model learns? One invocation, one GPU.

    python3 tests/gpu/correctness_matrix.py --umswap build/bin/umswap [options] [-- ENV=VALUE ...]

For every model of matrix_models.py (cnn, mlm, decoder, lstm, embbag, moe by default), every
allocator (PyTorch's default caching allocator, `backend:cudaMallocAsync`) and every determinism
setting (PyTorch's defaults; torch.use_deterministic_algorithms): two native runs, then one run
under `umswap run --budget B` for each budget (100%, 50%, 25% of the larger native peak of
reserved memory), 20 steps each; plus tests/gpu/cupy_check.py's loop under umswap at 50% of its
footprint. Each umswap run has a plan cache of its own (XDG_CACHE_HOME in the output folder), as a
user's first run of a command does; at the --replays budgets (50% by default) the same command
runs a second time right after, replaying the plan the first run cached (a user's second run:
the "replay" rows, which must have replayed). With --engines um,vmm every row also runs under
`umswap run --engine vmm` at each budget (the "vmm" rows: no advisor, no cache).
`--repeat N` runs every model's umswap row N times (the CuPy loop once), each with a cache of
its own (rows "repeat 2" and on), every row's first run before any second: for a failure too
rare to see once in a matrix (the EmbeddingBag's crash on the async backend, 2 in 62 runs,
2026-11-30), with the matrix's load beside it.
Runs go side by side (--jobs at a time), each umswap run with UMSWAP_MANAGED_LIMIT set
(--limit) so that the managed memory of all runs together stays far below the card's.

Each umswap run is compared step by step with the two native runs of its row:
  * where the two native runs agree bit for bit (losses and, deterministic, the weights'
    checksum), the umswap run must too: "identical" or "DIFFERS" (without deterministic
    algorithms the natives agree only by chance: a run that does not is judged by the next rule;
    so is every deterministic row of a model whose two deterministic natives differ in any row
    of the matrix: the decoder's, whose fused attention backward is not bit-reproducible);
  * otherwise every step's loss must lie within the natives' own spread: |umswap - mean| <=
    max(4 * the largest native difference up to that step, 0.5% of |mean|): "within" or
    "OUTSIDE" (the column gives the worst step's distance in units of that spread);
  * a run cut by --timeout fails, judged on the steps it finished: "TIMEOUT, 16 of 20 identical";
  * a second run that did not replay (its advisor learned online) fails: "NOT REPLAYED"; unless
    its first run's log shows that it cached no plan (it never found an iteration: nothing to
    replay), judged as a first run then, the verdict saying "nothing cached".
It also reports, from the umswap run's stats, the peak GPU-resident bytes counted against the
budget over the whole run and over the iterations after the first plan took effect (learning
holds the whole footprint on purpose), the iteration that first plan began in, GPU page faults
per steady iteration, and the faults on pages umswap had discarded (copy_check.unforeseen: an
access nobody foresaw; anything but 0 fails the row).

Prints a markdown table (also --markdown FILE) and writes --json FILE. Exit 0: every row passed;
1: a row failed or a run crashed; 2: bad arguments; 77: no torch or GPU.
"""
import argparse
import collections
import concurrent.futures as futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "matrix_models.py")
CUPY = os.path.join(HERE, "cupy_loop.py")
# The loss is read up to where it ends: a line of umswap's on stderr (one log for both) may start
# right after it, before the program's newline (run 127: "loss 9.552780151367188umswap: a plan").
ITER = re.compile(r"^iter (\d+) ms ([0-9.]+) loss (-?(?:nan|inf|\d+(?:\.\d*)?(?:e[-+]?\d+)?))",
                  re.M)
SUMMARY = re.compile(r"^summary (\{.*\})$", re.M)
ALLOCATORS = {"default": None, "async": "backend:cudaMallocAsync"}


def parse_size(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (say 12G)")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2) or " "))


# The umswap runs' relative cost, measured (H200, 2026-11-29): lower budgets and these models run
# longest, so they start first and the matrix's tail is short.
MODEL_COST = {"decoder": 6, "varlen": 6, "lstm": 5, "embbag": 4, "mlm": 3, "moe": 2, "cnn": 1}


def longest_first(keys, twice=()):
    """Umswap runs (model, allocator, det, budget%, ...) in the order to start them. A row at a
    budget in `twice` runs two times in one job (a replay after its first run): it starts with
    the lowest budget's rows, which take about as long."""
    lowest = min((k[3] for k in keys), default=0)
    # With --repeat, every row's first run before any row's second (k[5], the repeat number).
    return sorted(keys, key=lambda k: (k[5] if len(k) > 5 else 1,
                                       lowest if k[3] in twice else k[3],
                                       -MODEL_COST.get(k[0], 0), k[1] != "default",
                                       k[2] != "on", k[3]))


def run(cmd, env, log, timeout, deadline=None):
    """Runs cmd; None if the deadline (time.time()) leaves it less than 10 s (not started)."""
    if deadline is not None:
        left = deadline - time.time()
        if left < 10:
            return None
        timeout = min(timeout, int(left))
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (
            e.stdout or "")
        out += f"\n[matrix: killed after {timeout} s]\n"
        rc = 124
    seconds = round(time.time() - t0, 1)
    with open(log, "w") as f:
        f.write(out)
        f.write(f"\n[matrix: exit {rc} after {seconds} s]\n")
    return parse_log(log)


def parse_log(log):
    """A run's result from its log (what run() wrote, or a log of a matrix that was stopped)."""
    with open(log) as f:
        out = f.read()
    losses = [float(x[2]) for x in ITER.findall(out)]
    ms = [float(x[1]) for x in ITER.findall(out)]
    s = SUMMARY.search(out)
    summary = json.loads(s.group(1)) if s else {}
    e = re.search(r"^\[matrix: exit (-?\d+) after ([0-9.]+) s\]$", out, re.M)
    rc = int(e.group(1)) if e else (124 if "[matrix: killed after" in out else
                                    0 if s or "checksum" in out else 1)
    return {"rc": rc, "losses": losses, "ms": ms, "summary": summary, "log": log,
            "seconds": float(e.group(2)) if e else None}


def log_tail(path, lines=40):
    """The last `lines` lines of a run's log; None when it cannot be read."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except (OSError, TypeError):
        return None


def peaks_after(stats, launch):
    """(the first iteration that began at or after `launch`, the peak resident of each iteration
    after it); (None, []) when `launch` is not a launch number or no iteration began there."""
    its = stats.get("iterations") or []
    if not isinstance(launch, int):
        return None, []
    began = next((i for i, it in enumerate(its)
                  if isinstance(it.get("first_step"), int) and it["first_step"] >= launch), None)
    if began is None:
        return None, []
    return began, [it["peak_resident_bytes"] for it in its[began + 1:]
                   if isinstance(it.get("peak_resident_bytes"), int)]


def planned_peaks(stats):
    """(the first iteration that began under the run's first plan, the peak resident of each
    iteration after it); (None, []) without a plan or such an iteration."""
    adv = stats.get("advisor") or {}
    return peaks_after(stats, adv.get("first_plan_applied_from_launch",
                                      (adv.get("plan") or {}).get("applied_from_launch")))


def planned_iterations(stats):
    """(the first iteration that began under the run's first plan, the largest peak resident of
    the iterations after it), as umswap compare takes its steady iterations; (None, None) without
    a plan, and a None peak when no iteration came after it."""
    planned, peaks = planned_peaks(stats)
    return planned, (max(peaks) if peaks else None)


def over_budget(peaks, budget):
    """[peaks above the budget by more than 2%, peaks]."""
    return [sum(1 for p in peaks if p > budget * 1.02), len(peaks)]


def planned_over_budget(stats):
    """(iterations after the one the first plan began in whose peak resident is above the budget
    by more than 2%, iterations after it): a row's peak under the plan is the largest of them;
    this says whether it was one iteration or most. None without a plan or a budget."""
    budget = (stats.get("advisor") or {}).get("budget_bytes")
    planned, peaks = planned_peaks(stats)
    if planned is None or not isinstance(budget, int) or budget <= 0:
        return None
    return over_budget(peaks, budget)


def relearned_over_budget(stats):
    """planned_over_budget's count over the iterations after the one the last plan began in, when
    that plan was relearned (it began after the first): [over, iterations]. None otherwise."""
    adv = stats.get("advisor") or {}
    first = adv.get("first_plan_applied_from_launch")
    last = (adv.get("plan") or {}).get("applied_from_launch")
    budget = adv.get("budget_bytes")
    if not (isinstance(first, int) and isinstance(last, int) and last > first and
            isinstance(budget, int) and budget > 0):
        return None
    _, peaks = peaks_after(stats, last)
    return over_budget(peaks, budget) if peaks else None


def records_short(stats):
    """Bytes by which more came to the GPU than left it over the iterations, past all managed
    memory (0 when within it): a byte comes in once from where it began, then only after it left,
    so a positive value means CUPTI's records of moves are incomplete and the peak counted from
    them is unreliable (umswap's exit summary says the same). None without the figures."""
    its = stats.get("iterations") or []
    managed = (stats.get("allocator") or {}).get("managed_bytes_peak")
    if not its or not isinstance(managed, int):
        return None
    moved_in = sum(i.get("bytes_htod") or 0 for i in its)
    moved_out = sum(i.get("bytes_dtoh") or 0 for i in its)
    return max(0, moved_in - moved_out - managed)


def discarded_bytes(s):
    parts = [((s.get("allocator") or {}).get("async_slabs") or {}).get("discarded_bytes"),
             (s.get("torch_blocks") or {}).get("discarded_bytes")]
    parts = [x for x in parts if isinstance(x, int)]
    return sum(parts) if parts else None


def stats_of(path):
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return {}
    its = s.get("iterations", [])
    adv = s.get("advisor", {})
    cc = s.get("copy_check") or {}
    steady = [i.get("gpu_page_faults", 0) for i in its[len(its) // 2:]] if its else []
    plan_from, peak_planned = planned_iterations(s)
    vmm = s.get("vmm") or {}
    return {
        # Engine vmm: its GPU chunks and the program's own GPU memory at their peak.
        "peak_resident": vmm.get("gpu_and_program_bytes_peak",
                                 s.get("peak_resident_bytes", adv.get("peak_resident_bytes"))),
        "plan_from_iteration": plan_from,
        "peak_planned": peak_planned,
        "planned_over_budget": planned_over_budget(s),
        "relearned_over_budget": relearned_over_budget(s),
        "planned_peak": adv.get("peak_resident_applied_bytes"),
        # The last plan's launches whose own data is over the budget: no plan holds it there.
        "unfit_steps": (adv.get("plan") or {}).get("unfit_steps"),
        "records_short": records_short(s),
        # Times the watchdog released launches waiting for the advisor (waits off afterwards).
        "wait_stalls": adv.get("wait_stalls"),
        "faults_steady_max": max(steady) if steady else None,
        "unforeseen": (cc.get("unforeseen") or {}).get("faults", 0),
        "harmful": cc.get("harmful", 0),
        "evict_copy_off": (adv.get("evict_copy") or {}).get("off_reason"),
        "guard_hits": (adv.get("evict_copy") or {}).get("guard_hits"),
        "advisor_mode": adv.get("mode"),
        # What could explain a changed result (lab/2026-12-01-discards-racing-migrations.md):
        # dead pages discarded (slabs, at frees and sweeps, and PyTorch's blocks; None where
        # neither reports), actions on buffers no longer found, and how many plans the run made
        # (relearned ones included, in force or not).
        "discarded_bytes": discarded_bytes(s),
        "stale_actions": adv.get("stale_actions"),
        "plans": adv.get("plans"),
        # Discards and migrations kept apart (advisor.md, "Lifetimes"): pages kept back from a
        # discard, pages left out of a migration, whether an event failure stopped the discards.
        "drops_kept": (adv.get("drop_order") or {}).get("pages_kept"),
        "moves_left_out": (adv.get("drop_order") or {}).get("pages_left_out"),
        "drops_stopped": (adv.get("drop_order") or {}).get("stopped"),
    }


RUN_KINDS = ("first", "replay", "vmm")  # a row's run: its suffix in file names is "-<kind>"


RUN_LABELS = {"replay": ", replayed", "vmm": ", vmm"}  # after the budget in the table
REPEAT = re.compile(r"-r(\d+)(?:-replay|-vmm)?\.json$")


def repeat_of(stats_path):
    """Which of --repeat's runs of its row a run is (1, 2, ...), from its stats file name."""
    m = REPEAT.search(stats_path or "")
    return int(m.group(1)) if m else 1


def run_kind(stats_path):
    """"replay" for a command's second run (replaying its first's cached plan), "vmm" for a run
    under engine vmm, else "first"; from the row's stats file name."""
    for kind in RUN_KINDS[1:]:
        if stats_path and stats_path.endswith(f"-{kind}.json"):
            return kind
    return "first"


def is_replay(stats_path):
    return run_kind(stats_path) == "replay"


def run_twice(first, second):
    """Runs first(), then second() unless first was not started; their results in a list."""
    r = first()
    return [r, second() if r is not None else None]


def prefix(run_dict, n):
    """A native run's first n losses, without its checksum (which covers every step)."""
    return {"rc": run_dict["rc"], "losses": run_dict["losses"][:n],
            "summary": {k: v for k, v in run_dict["summary"].items() if k != "checksum"}}


def judge(n1, n2, u, bitwise=True):
    """(verdict, worst) for umswap run u against natives n1, n2 (run dicts). bitwise False: the
    model's deterministic natives differed somewhere in this matrix, so two that agree here
    agreed by chance and the spread rule judges."""
    a, b, x = n1["losses"], n2["losses"], u["losses"]
    steps = min(len(a), len(b))
    if u["rc"] == 124:
        # Cut by the timeout: still a failure, judged on the steps it finished, so that a slow run
        # is told from a wrong one ("TIMEOUT, 16 of 20 identical").
        done = min(len(x), steps)
        if not done:
            return "TIMEOUT", None
        verdict, worst = judge(prefix(n1, done), prefix(n2, done),
                               {"rc": 0, "losses": x[:done], "summary": {}, "cut": True},
                               bitwise)
        return f"TIMEOUT, {done} of {steps} {verdict}", worst
    if u["rc"] != 0 or not u["losses"]:
        return "FAILED", None
    if len(x) != steps:
        return "FAILED", None
    same_natives = (bitwise and a == b and
                    n1["summary"].get("checksum") == n2["summary"].get("checksum"))
    if same_natives:
        # A run cut short has no checksum to compare: its losses decide.
        ok = x == a and (u.get("cut") or
                         u["summary"].get("checksum") == n1["summary"].get("checksum"))
        # Natives that agree without deterministic algorithms agreed by chance (the decoder on
        # the async backend, 2026-12-01): no promise of bits, so the spread rule judges.
        if ok or n1["summary"].get("deterministic") is not False:
            return ("identical" if ok else "DIFFERS"), 0.0 if ok else None
    worst, spread, verdict = 0.0, 0.0, "within"
    for i in range(steps):
        spread = max(spread, abs(a[i] - b[i]))
        mean = (a[i] + b[i]) / 2
        allowed = max(4 * spread, 5e-3 * abs(mean))
        d = abs(x[i] - mean)
        if d != d or d > allowed:  # NaN or outside
            verdict = "OUTSIDE"
        worst = max(worst, d / allowed if allowed else float("inf"))
    return verdict, round(worst, 3)


def rejudge(a):
    """Rebuild natives and results from the logs in a.rejudge and report them."""
    natives, results = {}, []
    pat = re.compile(r"^(\w+)-(\w+)-det(\w+)-(native(\d)|b(\d+)(?:-r\d+)?(-replay|-vmm)?)\.log$")
    for name in sorted(os.listdir(a.rejudge)):
        path = os.path.join(a.rejudge, name)
        m = pat.match(name)
        if m and m.group(1) != "cupy":
            r = parse_log(path)
            if m.group(5):
                natives[(m.group(1), m.group(2), m.group(3), int(m.group(5)))] = r
            else:
                b = int(m.group(6))
                results.append(((m.group(1), m.group(2), m.group(3), b, None,
                                 path[:-4] + ".json"), r))
        elif name.startswith("cupy-native") or name == "cupy-b50.log":
            k = ("cupy", "native", "-", int(name[11]), None, None) if "native" in name else (
                "cupy", "umswap", "-", 50, None, path[:-4] + ".json")
            results.append((k, parse_log(path)))
    # Budgets as the matrix gave them: a share of the larger native peak.
    fixed = []
    for key, r in results:
        if key[0] != "cupy" and key[4] is None:
            n = [natives.get(key[:3] + (k,)) for k in (1, 2)]
            peak = max((x["summary"].get("peak_reserved_bytes") or 0) for x in n if x)
            key = key[:4] + (peak * key[3] // 100,) + key[5:]
        fixed.append((key, r))
    cupy = {k[1] + str(k[3]) for k, _ in fixed if k[0] == "cupy"}
    if cupy != {"native1", "native2", "umswap50"}:
        fixed = [(k, r) for k, r in fixed if k[0] != "cupy"]
    return report(a, natives, fixed, time.time(), a.rejudge)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--umswap", help="the umswap command (required unless --rejudge)")
    ap.add_argument("--models", default="cnn,mlm,decoder,lstm,embbag,moe")
    ap.add_argument("--allocators", default="default,async")
    ap.add_argument("--determinism", default="off,on", help="off, on or off,on (default)")
    ap.add_argument("--budgets", default="100,50,25", help="percents of native peak")
    ap.add_argument("--engines", default="um",
                    help="um, vmm or um,vmm: the engines of the umswap runs (default um; vmm rows "
                         "have no replay)")
    ap.add_argument("--replays", default="50",
                    help="budgets (of --budgets) at which each row's command runs again, "
                         "replaying the plan its first run cached; '' for none (default 50)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of every umswap row, each with a cache of its own (default 1)")
    ap.add_argument("--jobs", type=int, default=8, help="runs at a time (default 8)")
    ap.add_argument("--limit", type=parse_size, default=parse_size("12G"),
                    help="UMSWAP_MANAGED_LIMIT of each umswap run (default 12G)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds a run may take")
    ap.add_argument("--deadline", type=int, default=0,
                    help="seconds the whole matrix may take: no run starts, and none runs, past "
                         "it; rows left are NOT RUN (default 0: no deadline)")
    ap.add_argument("--no-cupy", action="store_true")
    ap.add_argument("--out", help="directory for logs and stats (default: a temporary one)")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--rejudge", metavar="DIR",
                    help="run nothing: judge the logs a (possibly stopped) matrix left in DIR; "
                         "give the matrix's own --models, --allocators, --determinism, --budgets "
                         "and --replays (the rows they name that have no log are NOT RUN)")
    ap.add_argument("env", nargs="*", help="-- ENV=VALUE ... for every umswap run")
    a = ap.parse_args()
    extra = {}
    for kv in a.env:
        if "=" not in kv:
            ap.error(f"not ENV=VALUE: {kv!r}")
        k, v = kv.split("=", 1)
        extra[k] = v
    models = [m for m in a.models.split(",") if m]
    allocs = [x for x in a.allocators.split(",") if x]
    dets = [x for x in a.determinism.split(",") if x]
    budgets = [int(x) for x in a.budgets.split(",") if x]
    try:
        replays = {int(x) for x in a.replays.split(",") if x}
    except ValueError:
        replays = {0}
    engines = [x for x in a.engines.split(",") if x]
    if (not models or any(x not in ALLOCATORS for x in allocs) or
            any(x not in ("off", "on") for x in dets) or not budgets or
            any(not 0 < b <= 100 for b in budgets) or a.steps < 3 or a.jobs < 1 or
            a.deadline < 0 or a.repeat < 1 or not replays <= set(budgets) or not engines or
            any(x not in ("um", "vmm") for x in engines)):
        ap.error("bad --models, --allocators, --determinism, --budgets, --replays (a subset of "
                 "--budgets), --engines, --steps, --jobs, --repeat or --deadline")
    if a.jobs * a.limit > 110 * 1024 ** 3:
        ap.error("--jobs x --limit must stay under 110G (never oversubscribe a shared GPU)")
    if a.rejudge:
        return rejudge(a)
    if not a.umswap:
        ap.error("--umswap is required (unless --rejudge)")
    if not shutil.which(a.umswap) and not os.access(a.umswap, os.X_OK):
        ap.error(f"no umswap command at {a.umswap}")
    try:
        import torch  # noqa: F401
        if not torch.cuda.is_available():
            print("skip: no CUDA GPU")
            return 77
    except ImportError:
        print("skip: no torch")
        return 77
    out = a.out or tempfile.mkdtemp(prefix="umswap-matrix-")
    os.makedirs(out, exist_ok=True)
    started = time.time()
    deadline = started + a.deadline if a.deadline else None
    base = dict(os.environ)
    base.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    base["PYTHONUNBUFFERED"] = "1"

    def env_for(alloc, managed):
        e = dict(base)
        if ALLOCATORS[alloc]:
            e["PYTORCH_CUDA_ALLOC_CONF"] = ALLOCATORS[alloc]
        if managed:
            e["UMSWAP_MANAGED_LIMIT"] = str(a.limit)
            e.update(extra)
        return e

    def model_cmd(model, det):
        return [sys.executable, MODELS, model, "--steps", str(a.steps)] + (
            ["--deterministic"] if det == "on" else [])

    rows = [(m, al, d) for m in models for al in allocs for d in dets]
    natives = {}
    with futures.ThreadPoolExecutor(a.jobs) as pool:
        jobs = {}
        for (m, al, d) in rows:
            for k in (1, 2):
                log = os.path.join(out, f"{m}-{al}-det{d}-native{k}.log")
                jobs[pool.submit(run, model_cmd(m, d), env_for(al, False), log, a.timeout,
                                 deadline)] = (m, al, d, k)
        for f in futures.as_completed(jobs):
            natives[jobs[f]] = f.result()
        print(f"matrix: {len(jobs)} native runs in {time.time() - started:.0f} s", flush=True)
        if all(r is not None and r["rc"] == 77 for r in natives.values()):
            print("skip: the models cannot run here")
            return 77
        jobs = {}
        planned = []
        for (m, al, d) in rows:
            n1, n2 = natives[(m, al, d, 1)], natives[(m, al, d, 2)]
            if n1 is None or n2 is None:
                continue  # not run before the deadline: the row is NOT RUN
            peak = max(r["summary"].get("peak_reserved_bytes") or
                       r["summary"].get("peak_allocated_bytes") or 0 for r in (n1, n2))
            if not peak:
                continue
            for b in sorted(budgets):
                for k in range(1, a.repeat + 1):
                    planned.append((m, al, d, b, peak * b // 100, k))
        if not a.no_cupy:  # first: short, and its natives run beside it
            sys.path.insert(0, HERE)
            import cupy_loop
            budget = cupy_loop.footprint() // 2
            for k in (1, 2):
                log = os.path.join(out, f"cupy-native{k}.log")
                jobs[pool.submit(run, [sys.executable, CUPY], env_for("default", False), log,
                                 a.timeout, deadline)] = ("cupy", "native", "-", k, 0, None)
            stats = os.path.join(out, "cupy-b50.json")
            log = os.path.join(out, "cupy-b50.log")
            jobs[pool.submit(run, [a.umswap, "run", "--limit", str(a.limit), "--budget",
                                   str(budget), "--stats", stats, "--", sys.executable, CUPY],
                             dict(env_for("default", True),
                                  XDG_CACHE_HOME=os.path.join(out, "cache", "cupy")),
                             log, a.timeout, deadline)] = (
                "cupy", "umswap", "-", 50, budget, stats)
        for (m, al, d, b, budget, k) in longest_first(
                planned, replays if "um" in engines else ()):
            name = f"{m}-{al}-det{d}-b{b}" + (f"-r{k}" if k > 1 else "")
            # A plan cache of the row's own: its first run learns online whatever ran before,
            # and its second (at the --replays budgets) replays what the first cached.
            env = dict(env_for(al, True), XDG_CACHE_HOME=os.path.join(out, "cache", name))
            runs = []  # (suffix, extra umswap flags): one job each, a replay after its first run
            if "um" in engines:
                runs.append([("", [])] + ([("-replay", [])] if b in replays else []))
            if "vmm" in engines:
                runs.append([("-vmm", ["--engine", "vmm"])])
            for job_runs in runs:
                keys, calls = [], []
                for suffix, flags in job_runs:
                    stats = os.path.join(out, f"{name}{suffix}.json")
                    log = os.path.join(out, f"{name}{suffix}.log")
                    cmd = [a.umswap, "run"] + flags + ["--limit", str(a.limit), "--budget",
                                                       str(budget), "--stats", stats, "--"]
                    cmd += model_cmd(m, d)
                    keys.append((m, al, d, b, budget, stats))
                    calls.append(lambda cmd=cmd, log=log, env=env: run(cmd, env, log,
                                                                        a.timeout, deadline))
                job = (pool.submit(run_twice, *calls) if len(calls) == 2 else
                       pool.submit(lambda c=calls[0]: [c()]))
                jobs[job] = keys
        results = []
        for f in futures.as_completed(jobs):
            keys = jobs[f] if isinstance(jobs[f], list) else [jobs[f]]
            got = f.result() if isinstance(jobs[f], list) else [f.result()]
            for key, r in zip(keys, got):
                if r is not None:  # None: not started before the deadline (NOT RUN)
                    results.append((key, r))
    return report(a, natives, results, started, out)


def first_run_cached(replay_log):
    """Whether the first run of a replay row's command cached a plan, from its log (the replay
    row's log without "-replay"): True or False, None when that log cannot be read."""
    if not replay_log or not replay_log.endswith("-replay.log"):
        return None
    try:
        with open(replay_log[:-len("-replay.log")] + ".log", errors="replace") as f:
            return "plan cached for the next run" in f.read()
    except OSError:
        return None


def bitwise_models(natives):
    """Models whose deterministic rows' two natives agree bit for bit (losses and checksum) in
    every row where both finished: only their rows promise bits. The decoder's did not in 15 of 16
    matrices (2026-11-29 to 12-01; SDPA's fused attention backward), and once its async pair
    agreed by chance while its default pair differed (run 160), which the bit rule alone would
    have taken for a promise. A native that crashed, was cut or never ran says nothing either
    way; a model with no finished pair keeps the bit rule."""
    models, differ = set(), set()
    for (m, al, d, k), r in natives.items():
        if d != "on" or k != 1:
            continue
        models.add(m)
        other = natives.get((m, al, d, 2))
        pair = [x for x in (r, other) if x and x.get("rc") == 0 and x["summary"].get("checksum")]
        if len(pair) == 2 and (pair[0]["losses"] != pair[1]["losses"] or
                               pair[0]["summary"]["checksum"] != pair[1]["summary"]["checksum"]):
            differ.add(m)
    return models - differ


def report(a, natives, results, started, out):
    table, failed = [], False
    bitwise = bitwise_models(natives)
    for (m, al, d, b, budget, stats), u in sorted(
            results, key=lambda x: x[0][:4] + (repeat_of(x[0][5]),
                                               RUN_KINDS.index(run_kind(x[0][5])))):
        if m == "cupy":
            continue
        n1, n2 = natives[(m, al, d, 1)], natives[(m, al, d, 2)]
        verdict, worst = judge(n1, n2, u, m in bitwise or d != "on")
        st = stats_of(stats)
        kind = run_kind(stats)
        passed = verdict in ("identical", "within")
        if kind == "replay" and passed and st.get("advisor_mode") != "replay":
            if first_run_cached(u.get("log")) is False:
                verdict += ", nothing cached"
            else:
                verdict, passed = "NOT REPLAYED", False
        ok = passed and not st.get("unforeseen")
        failed |= not ok
        table.append({"model": m, "allocator": al, "deterministic": d, "budget_pct": b,
                      "run": kind,
                      "budget_bytes": budget, "verdict": verdict, "worst_in_spread": worst,
                      "native_last": n1["losses"][-1] if n1["losses"] else None,
                      "native_spread_last": abs(n1["losses"][-1] - n2["losses"][-1])
                      if n1["losses"] and n2["losses"] else None,
                      "umswap_last": u["losses"][-1] if u["losses"] else None,
                      "native_ms": sorted(n1["ms"][2:])[len(n1["ms"][2:]) // 2] if len(
                          n1["ms"]) > 2 else None,
                      "umswap_ms": sorted(u["ms"][2:])[len(u["ms"][2:]) // 2] if len(
                          u["ms"]) > 2 else None,
                      "seconds": u["seconds"], "rc": u["rc"], "ok": ok, **st})
        if repeat_of(stats) > 1:
            table[-1]["repeat"] = repeat_of(stats)
        if not ok:
            # The run's last lines travel with the row: a failure stays explained when the log
            # folder does not survive (a device run that cannot bring it back).
            table[-1]["steps_done"] = len(u["losses"])
            table[-1]["log_tail"] = log_tail(u.get("log"))
    # Rows asked for and not run (a matrix stopped before it got to them).
    done = collections.Counter((r["model"], r["allocator"], r["deterministic"], r["budget_pct"],
                                r.get("run", "first")) for r in table)
    # Rejudged logs say how many repeats ran, even without --repeat.
    repeat = max([getattr(a, "repeat", 1)] + [repeat_of(k[5]) for k, _ in results if k[5]])
    replays = {int(x) for x in getattr(a, "replays", "").split(",") if x}
    engines = [x for x in getattr(a, "engines", "um").split(",") if x]
    for m in [x for x in a.models.split(",") if x]:
        for al in [x for x in a.allocators.split(",") if x]:
            for d in [x for x in a.determinism.split(",") if x]:
                for b in sorted(int(x) for x in a.budgets.split(",") if x):
                    kinds = (["first"] + (["replay"] if b in replays else [])
                             if "um" in engines else []) + (["vmm"] if "vmm" in engines else [])
                    for kind in kinds:
                        for k in range(done[(m, al, d, b, kind)] + 1, repeat + 1):
                            failed = True
                            table.append({"model": m, "allocator": al, "deterministic": d,
                                          "budget_pct": b, "run": kind,
                                          "verdict": "NOT RUN", "ok": False})
                            if k > 1:  # which one is not known: counted from the last run
                                table[-1]["repeat"] = k
    cupy = {k[1] + str(k[3]): (k, r) for (k, r) in results if k[0] == "cupy"}
    if cupy and set(cupy) != {"native1", "native2", "umswap50"}:
        failed = True
        table.append({"model": "cupy loop", "allocator": "cupy pool", "deterministic": "-",
                      "budget_pct": 50, "verdict": "NOT RUN", "ok": False})
    elif cupy:
        # CuPy: every iteration's loss and the final weights' checksum against two native runs.
        def checksum(r):
            m = re.search(r"^checksum (\S+)", open(r["log"]).read(), re.M)
            return m.group(1) if m else None
        (_, n1), (_, n2) = cupy["native1"], cupy["native2"]
        (key, u) = cupy["umswap50"]
        for r in (n1, n2, u):
            r["summary"] = {"checksum": checksum(r)}
        verdict, worst = judge(n1, n2, u)
        st = stats_of(key[5])
        ok = verdict in ("identical", "within") and not st.get("unforeseen")
        failed |= not ok
        table.append({"model": "cupy loop", "allocator": "cupy pool", "deterministic": "-",
                      "budget_pct": 50, "budget_bytes": key[4], "verdict": verdict,
                      "worst_in_spread": worst,
                      "native_last": n1["losses"][-1] if n1["losses"] else None,
                      "native_spread_last": abs(n1["losses"][-1] - n2["losses"][-1])
                      if n1["losses"] and n2["losses"] else None,
                      "umswap_last": u["losses"][-1] if u["losses"] else None,
                      "native_ms": None, "umswap_ms": None, "seconds": u["seconds"],
                      "rc": u["rc"], "ok": ok, **st})
    gib = 1024 ** 3
    lines = ["| model | allocator | det. | budget | verdict (worst / spread) | last loss native "
             "(spread) / umswap | peak counted (under the plan; iterations over; * records "
             "short; † waits released; ‡ launches over the budget on their own; → over under the "
             "relearned plan) / budget | "
             "plan from iteration | "
             "faults (steady max) | unforeseen | ms native / umswap |", "|" + " --- |" * 11]
    for r in table:
        pr = r.get("peak_resident")
        pp = r.get("peak_planned")
        over = r.get("planned_over_budget")
        relearned = r.get("relearned_over_budget")
        lines.append(
            f"| {r['model']} | {r.get('allocator', '-')} | {r.get('deterministic', '-')} | "
            f"{r.get('budget_pct', '-')}% ({(r.get('budget_bytes') or 0) / gib:.2f} GiB)"
            f"{RUN_LABELS.get(r.get('run'), '')}"
            f"{', repeat %d' % r['repeat'] if r.get('repeat') else ''} | "
            f"{r['verdict']}{'' if r.get('worst_in_spread') in (None, 0.0) else ' (%.2f)' % r['worst_in_spread']} | "
            f"{r.get('native_last', '-')} ({r.get('native_spread_last', '-')}) / {r.get('umswap_last', '-')} | "
            f"{'-' if pr is None else '%.2f' % (pr / gib)} "
            f"({'-' if pp is None else '%.2f' % (pp / gib)}"
            f"{'' if not over else '; %d of %d' % tuple(over)}"
            f"{'' if not relearned else ' → %d of %d' % tuple(relearned)}"
            f"{'; *' if r.get('records_short') else ''}"
            f"{'; †' if r.get('wait_stalls') else ''}"
            f"{'; ‡' if r.get('unfit_steps') else ''}) / "
            f"{(r.get('budget_bytes') or 0) / gib:.2f} | "
            f"{'-' if r.get('plan_from_iteration') is None else r['plan_from_iteration']} | "
            f"{r.get('faults_steady_max', '-')} | {r.get('unforeseen', '-')} | "
            f"{r.get('native_ms') or '-'} / {r.get('umswap_ms') or '-'} |")
    text = "\n".join(lines)
    print(text)
    for r in table:
        if r.get("log_tail"):
            print(f"--- {r['model']} {r.get('allocator')} det {r.get('deterministic')} "
                  f"{r.get('budget_pct')}%{RUN_LABELS.get(r.get('run'), '')}: exit {r['rc']} "
                  f"after {r.get('steps_done')} steps; "
                  f"the end of its log:\n{r['log_tail']}")
    print(f"matrix: {len(table)} rows, {sum(1 for r in table if not r['ok'])} failed, "
          f"{time.time() - started:.0f} s; logs in {out}")
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": table, "natives": {"|".join(map(str, k)): v for k, v in
                                                  natives.items()}}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
