#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Training throughput of `tensorpool train` against the PyTorch peer (issue #5, "Benchmark against PyTorch").

Trains the Keras-example MLP (784-512 relu-10, Adam, sparse categorical cross-entropy) on Fashion-MNIST with
ours and with the peer (../shared/peers/torch_mlp.py: Debian python3-torch 1.13 with OpenBLAS, same model,
same hyper-parameters, Keras init), alternating ours and the peer, --runs runs of every configuration at every
batch size, --epochs epochs each:

  ours, one device      tensorpool train --strategy one --devices sim:0 --intra-op-threads 1
  ours, mirrored        tensorpool train --strategy mirrored --devices sim:0,sim:1 --intra-op-threads 1
                        (two replicas, one intra-op thread each, the same global batch)
  peer, default         torch_mlp.py --threads 2
  peer, OPENBLAS=1      OPENBLAS_NUM_THREADS=1 torch_mlp.py --threads 2
  peer, PASSIVE         OMP_WAIT_POLICY=PASSIVE torch_mlp.py --threads 2
  peer, 1 thread        torch_mlp.py --threads 1
                        (torch.set_num_threads does not reach Debian's pthread OpenBLAS: the peer's GEMMs
                        still run on OpenBLAS's own threads, one per core, in every setting but OPENBLAS=1)

  ours, one device,      tensorpool train --strategy one --devices sim:0 --intra-op-threads 2
  2 intra-op threads    (one2: both cores, as the tuned peer's GEMMs get them)
  ours, the same with   tensorpool train --strategy one --devices sim:0 --intra-op-threads 2 --gemm onednn
  oneDNN GEMMs          (one2dnn: oneDNN's float32 GEMMs instead of OpenBLAS's)

Figures: samples/s of the timed training loop (ours: `samples_per_second` of --summary-json; the peer: its
training samples over its epochs' time; both time the epoch loop with its shuffle and exclude loading and
evaluation), peak RSS (ours: the child's ru_maxrss from os.wait4; the peer: its own ru_maxrss, peak_rss_kib),
test accuracy, and CPU time / wall time of each run (a sign of a shared, busy machine). The comparison is
against the best peer setting's median per batch size.

Roofline: `tp_kernel_bench --sgemm-rate --library openblas|onednn` measures the single-threaded raw sgemm rate
of each library (cblas_sgemm, dnnl_sgemm) over the step's GEMMs at batch 32 and 128 (FLOP-weighted, median of
rounds); the faster library's rate is the machine's; one core's roofline is that rate / 1,636,352
FLOPs per sample (forward 2 x (784x512 + 512x10), layer-2 input gradient, both weight gradients). Ours one
device is reported against one core's roofline, mirrored against two cores'.

Prints a Markdown report (the table, the targets, the machine, the load average before and after) on stdout
and writes every run as JSON with --json.

Usage (from the repository root, after
`cmake --build build -j2 --target tp_kernel_bench tensorpool_cli`):

  bench/peers/compare_torch.py --json build/bench/compare_torch.json            # full: ~4 minutes
  bench/peers/compare_torch.py --runs 1 --batches 128 --limit-train 6000        # quick smoke test
  bench/peers/compare_torch.py --sgemm-gflops 45 --peer-settings default,threads1

Options: --batches 32,128  --runs 3  --epochs 1  --peer-settings default,openblas1,passive,threads1
--tensorpool build/bin/tensorpool  --kernel-bench build/bench/tp_kernel_bench  --peer ../shared/peers/torch_mlp.py
--python /usr/bin/python3  --data DIR  --sgemm-gflops X (skip the measurement)  --limit-train N (ours only:
a quick run, not comparable)  --wait-load L --wait-max S (wait up to S seconds for the 1-minute load average
to fall under L before starting)  --check (exit 1 when a target is missed).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

FLOPS_PER_SAMPLE = 1_636_352  # 2 x (784*512 + 512*10) forward + 2*512*10 layer-2 input grad + 2 x (784*512 + 512*10)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Peer thread settings: name -> (label, extra environment, --threads).
PEER_SETTINGS = {
    "default": ("peer, default (--threads 2)", {}, 2),
    "openblas1": ("peer, OPENBLAS_NUM_THREADS=1 (--threads 2)", {"OPENBLAS_NUM_THREADS": "1"}, 2),
    "passive": ("peer, OMP_WAIT_POLICY=PASSIVE (--threads 2)", {"OMP_WAIT_POLICY": "PASSIVE"}, 2),
    "threads1": ("peer, --threads 1", {}, 1),
}
OURS = {
    "one": ("ours, one device (sim:0)", ["--strategy", "one", "--devices", "sim:0"], 1),
    "mirrored": ("ours, mirrored (sim:0,sim:1)", ["--strategy", "mirrored", "--devices", "sim:0,sim:1"], 2),
    # One device with two intra-op threads: both cores, as the tuned peer's GEMMs get them.
    "one2": ("ours, one device, 2 intra-op threads", ["--strategy", "one", "--devices", "sim:0"], 2),
    # The same with oneDNN's float32 GEMMs (`--gemm onednn`) instead of OpenBLAS's.
    "one2dnn": ("ours, one device, 2 intra-op threads, oneDNN GEMMs",
                ["--strategy", "one", "--devices", "sim:0", "--gemm", "onednn"], 2),
}
DEFAULT_OURS = ("one", "one2", "one2dnn", "mirrored")
# Environment variables that change the peer's threading; removed so that each setting sets only its own.
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "GOTO_NUM_THREADS")


def load_average():
    return list(os.getloadavg())


def log(message):
    print(message, file=sys.stderr, flush=True)


def run_child(argv, env, cwd):
    """Runs argv to completion; returns (exit code, stdout, stderr, wall s, rusage of the child)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=cwd)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)  # already reaped: keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        return (child.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"), wall,
                usage)


def base_env():
    return {k: v for k, v in os.environ.items() if k not in THREAD_ENV}


def run_ours(args, config, batch, workdir):
    label, flags, cores = OURS[config]
    summary = os.path.join(workdir, f"summary-{config}-{batch}.json")
    if os.path.exists(summary):
        os.unlink(summary)
    argv = [args.tensorpool, "train", "--epochs", str(args.epochs), "--batch-size", str(batch),
            "--intra-op-threads", "2" if config in ("one2", "one2dnn") else "1", "--summary-json", summary] + flags
    if args.data:
        argv += ["--data", args.data]
    if args.limit_train:
        argv += ["--limit-train", str(args.limit_train)]
    code, out, err, wall, usage = run_child(argv, base_env(), workdir)
    if code != 0 or not os.path.exists(summary):
        raise RuntimeError(f"{' '.join(argv)} failed with {code}:\n{out[-2000:]}\n{err[-2000:]}")
    with open(summary) as f:
        data = json.load(f)
    return {
        "side": "ours", "config": config, "label": label, "batch": batch, "cores": cores,
        "samples_per_s": float(data["samples_per_second"]), "test_acc": float(data["test_accuracy"]),
        "peak_rss_kib": usage.ru_maxrss, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
        "command": argv, "summary": data,
    }


def run_peer(args, setting, batch, workdir):
    label, extra, threads = PEER_SETTINGS[setting]
    env = base_env()
    env.update(extra)
    if args.data:
        env["FASHION_MNIST_DIR"] = args.data
    argv = [args.python, args.peer, "--batch", str(batch), "--epochs", str(args.epochs), "--threads", str(threads)]
    code, out, err, wall, usage = run_child(argv, env, workdir)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        raise RuntimeError(f"{' '.join(argv)} failed with {code}:\n{out[-2000:]}\n{err[-2000:]}")
    data = json.loads(lines[-1])
    epochs = data["epochs"]
    samples = data["n_train"] * len(epochs)
    seconds = sum(e["time_s"] for e in epochs)
    return {
        "side": "peer", "config": setting, "label": label, "batch": batch, "threads": threads, "env": extra,
        "samples_per_s": samples / seconds if seconds > 0 else 0.0,
        "epoch0_samples_per_s": epochs[0]["samples_per_s"], "test_acc": float(epochs[-1]["test_acc"]),
        "peak_rss_kib": int(data["peak_rss_kib"]), "child_ru_maxrss_kib": usage.ru_maxrss,
        "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "command": argv, "output": data,
    }


def measure_sgemm(args):
    """The faster library's single-threaded sgemm rate (the machine's roofline), with both libraries' figures."""
    measured = {}
    for library in ("openblas", "onednn"):
        argv = [args.kernel_bench, "--sgemm-rate", "--rounds", str(args.sgemm_rounds), "--library", library]
        code, out, err, _, _ = run_child(argv, base_env(), ROOT)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if code != 0 or not lines:
            raise RuntimeError(f"{' '.join(argv)} failed with {code}:\n{out[-2000:]}\n{err[-2000:]}")
        measured[library] = json.loads(lines[-1])
        measured[library]["command"] = argv
    data = dict(max(measured.values(), key=lambda d: d["sgemm_gflops"]))
    data["libraries"] = measured
    return data


def schedule(ours, peers):
    """One round's order: ours and the peer alternate; the peer settings rotate from round to round."""
    order = []
    for index in range(max(len(ours), 1)):
        if index < len(ours):
            order.append(("ours", ours[index]))
        share = peers[index::len(ours)] if ours else peers
        order.extend(("peer", setting) for setting in share)
    return order


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown", os.cpu_count()
    fields = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields.get("Model name", "unknown"), fields.get("CPU(s)", str(os.cpu_count()))


def med(values):
    return statistics.median(values) if values else float("nan")


def fmt_rate(values):
    if not values:
        return "-"
    return f"{med(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def mib(kib):
    return kib / 1024.0


def summarise(runs, batches, settings, sgemm_gflops):
    """Per batch size: medians, best peer, ratios, roofline fractions."""
    result = {}
    for batch in batches:
        def of(side, config, key):
            return [r[key] for r in runs if r["side"] == side and r["config"] == config and r["batch"] == batch]

        def figures(side, config):
            return {
                "samples_per_s": of(side, config, "samples_per_s"),
                "median": med(of(side, config, "samples_per_s")),
                "peak_rss_kib": med(of(side, config, "peak_rss_kib")),
                "test_acc": med(of(side, config, "test_acc")),
                "cpu_per_wall": med([c / w for c, w in zip(of(side, config, "cpu_s"), of(side, config, "wall_s"))]),
            }

        entry = {"ours": {}, "peer": {}}
        for config in OURS:
            if of("ours", config, "samples_per_s"):
                entry["ours"][config] = figures("ours", config)
        for setting in settings:
            if of("peer", setting, "samples_per_s"):
                entry["peer"][setting] = figures("peer", setting)
        if entry["peer"]:
            best = max(entry["peer"], key=lambda s: entry["peer"][s]["median"])
            entry["best_peer"] = best
            entry["best_peer_median"] = entry["peer"][best]["median"]
            entry["peer_min_peak_rss_kib"] = min(p["peak_rss_kib"] for p in entry["peer"].values())
        roof1 = sgemm_gflops * 1e9 / FLOPS_PER_SAMPLE if sgemm_gflops else None
        entry["roofline_1core"] = roof1
        one = entry["ours"].get("one", {}).get("median")
        mirrored = entry["ours"].get("mirrored", {}).get("median")
        best = entry.get("best_peer_median")
        entry["one_vs_best_peer"] = one / best if one and best else None
        entry["mirrored_vs_best_peer"] = mirrored / best if mirrored and best else None
        entry["mirrored_vs_one"] = mirrored / one if one and mirrored else None
        one2 = entry["ours"].get("one2", {}).get("median")
        entry["one2_vs_best_peer"] = one2 / best if one2 and best else None
        one2dnn = entry["ours"].get("one2dnn", {}).get("median")
        entry["one2dnn_vs_best_peer"] = one2dnn / best if one2dnn and best else None
        entry["one2dnn_roofline_fraction"] = one2dnn / (2 * roof1) if one2dnn and roof1 else None
        entry["one_roofline_fraction"] = one / roof1 if one and roof1 else None
        entry["mirrored_roofline_fraction"] = mirrored / (2 * roof1) if mirrored and roof1 else None
        entry["one2_roofline_fraction"] = one2 / (2 * roof1) if one2 and roof1 else None
        result[batch] = entry
    return result


def ratio(value, suffix="x"):
    return "-" if value is None else f"{value:.2f}{suffix}"


def pct(value):
    return "-" if value is None else f"{100 * value:.0f}%"


def markdown(summary, batches, settings):
    lines = []
    head = "| | " + " | ".join(f"batch {b}" for b in batches) + " |"
    lines += [head, "|---|" + "---:|" * len(batches)]

    def row(label, cell):
        lines.append(f"| {label} | " + " | ".join(cell(summary[b]) for b in batches) + " |")

    measured = [c for c in OURS if any(c in summary[b]["ours"] for b in batches)]
    for config in measured:
        row(f"{OURS[config][0]}, samples/s",
            lambda e, c=config: fmt_rate(e["ours"].get(c, {}).get("samples_per_s", [])))
    for setting in settings:
        row(f"{PEER_SETTINGS[setting][0]}, samples/s",
            lambda e, s=setting: fmt_rate(e["peer"].get(s, {}).get("samples_per_s", [])))
    row("**best peer median**, samples/s",
        lambda e: f"**{e['best_peer_median']:,.0f}** ({e['best_peer']})" if e.get("best_peer") else "-")
    if "one" in measured:
        row("**ours one device / best peer**", lambda e: f"**{ratio(e['one_vs_best_peer'])}**")
    if "mirrored" in measured:
        row("**ours mirrored / best peer**", lambda e: f"**{ratio(e['mirrored_vs_best_peer'])}**")
    if "one2" in measured:
        row("ours one device with 2 intra-op threads / best peer", lambda e: ratio(e.get("one2_vs_best_peer")))
    if "one2dnn" in measured:
        row("ours one device with 2 intra-op threads, oneDNN GEMMs / best peer",
            lambda e: ratio(e.get("one2dnn_vs_best_peer")))
    if "one" in measured and "mirrored" in measured:
        row("ours mirrored / ours one device", lambda e: ratio(e["mirrored_vs_one"]))
    row("roofline, one core (sgemm rate / 1,636,352 FLOPs), samples/s",
        lambda e: "-" if e["roofline_1core"] is None else f"{e['roofline_1core']:,.0f}")
    if "one" in measured:
        row("ours one device / one-core roofline", lambda e: pct(e["one_roofline_fraction"]))
    if "one2" in measured:
        row("ours one device with 2 intra-op threads / two-core roofline", lambda e: pct(e["one2_roofline_fraction"]))
    if "one2dnn" in measured:
        row("ours one device with 2 intra-op threads, oneDNN GEMMs / two-core roofline",
            lambda e: pct(e["one2dnn_roofline_fraction"]))
    if "mirrored" in measured:
        row("ours mirrored / two-core roofline", lambda e: pct(e["mirrored_roofline_fraction"]))
    for config in measured:
        row(f"peak RSS, {OURS[config][0]}, MiB",
            lambda e, c=config: f"{mib(e['ours'][c]['peak_rss_kib']):.0f}" if c in e["ours"] else "-")
    row("peak RSS, peer (lowest setting median), MiB",
        lambda e: f"{mib(e['peer_min_peak_rss_kib']):.0f}" if "peer_min_peak_rss_kib" in e else "-")
    row("test accuracy, ours one / mirrored / best peer",
        lambda e: " / ".join(
            f"{x:.4f}" if x is not None else "-" for x in (
                e["ours"].get("one", {}).get("test_acc"), e["ours"].get("mirrored", {}).get("test_acc"),
                e["peer"].get(e.get("best_peer"), {}).get("test_acc"))))
    row("CPU time / wall, ours one / mirrored / best peer",
        lambda e: " / ".join(
            f"{x:.2f}" if x is not None else "-" for x in (
                e["ours"].get("one", {}).get("cpu_per_wall"), e["ours"].get("mirrored", {}).get("cpu_per_wall"),
                e["peer"].get(e.get("best_peer"), {}).get("cpu_per_wall"))))
    return lines


def targets(summary, batches):
    """(target, measured, result) rows; result is PASS/FAIL or '-' when not measured."""
    rows = []
    goal = {32: 2.0, 128: 1.5}
    for batch in batches:
        e = summary[batch]
        want = goal.get(batch)
        if want is not None and e["one_vs_best_peer"] is not None:
            # Our best configuration on the same two cores, as the peer's best setting is its best.
            ours = (e["one_vs_best_peer"], e.get("one2_vs_best_peer"), e.get("one2dnn_vs_best_peer"),
                    e["mirrored_vs_best_peer"])
            best_ours = max(v for v in ours if v is not None)
            rows.append((f"ours >= {want}x the tuned peer, batch {batch} (one device / one device with 2 intra-op "
                         f"threads / the same with oneDNN GEMMs / mirrored)", " / ".join(ratio(v) for v in ours),
                         "PASS" if best_ours >= want else "FAIL"))
    for batch in batches:
        e = summary[batch]
        if e["ours"] and "peer_min_peak_rss_kib" in e:
            ours_rss = max(v["peak_rss_kib"] for v in e["ours"].values())
            rows.append((f"peak RSS below the peer's, batch {batch}",
                         f"{mib(ours_rss):.0f} MiB vs {mib(e['peer_min_peak_rss_kib']):.0f} MiB",
                         "PASS" if ours_rss < e["peer_min_peak_rss_kib"] else "FAIL"))
    for batch in batches:
        e = summary[batch]
        if e["mirrored_vs_one"] is not None:
            rows.append((f"mirrored over 2 sim devices ~2x one device (>= 1.8x), batch {batch}",
                         ratio(e["mirrored_vs_one"]), "PASS" if e["mirrored_vs_one"] >= 1.8 else "FAIL"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="32,128", help="comma-separated batch sizes (default 32,128)")
    ap.add_argument("--runs", type=int, default=3, help="runs of every configuration per batch size (default 3)")
    ap.add_argument("--epochs", type=int, default=1, help="epochs per run (default 1)")
    ap.add_argument("--peer-settings", default=",".join(PEER_SETTINGS),
                    help=f"comma-separated peer thread settings, of {','.join(PEER_SETTINGS)}")
    ap.add_argument("--ours", default=",".join(DEFAULT_OURS),
                    help="comma-separated configurations of ours, of one,one2,one2dnn,mirrored (one2: one device, 2 "
                    "intra-op threads; one2dnn: the same with oneDNN GEMMs)")
    ap.add_argument("--tensorpool", default=os.path.join(ROOT, "build", "bin", "tensorpool"))
    ap.add_argument("--kernel-bench", default=os.path.join(ROOT, "build", "bench", "tp_kernel_bench"))
    ap.add_argument("--peer", default=os.path.normpath(os.path.join(ROOT, "..", "shared", "peers", "torch_mlp.py")))
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter that sees python3-torch")
    ap.add_argument("--data", help="Fashion-MNIST directory (default: each side's own default)")
    ap.add_argument("--sgemm-gflops", type=float, help="use this sgemm rate instead of measuring it")
    ap.add_argument("--sgemm-rounds", type=int, default=7, help="rounds of tp_kernel_bench --sgemm-rate")
    ap.add_argument("--limit-train", type=int, help="ours only: train on about N examples (smoke tests)")
    ap.add_argument("--wait-load", type=float, help="wait for the 1-minute load average to fall below this")
    ap.add_argument("--wait-max", type=float, default=600, help="seconds to wait at most for --wait-load")
    ap.add_argument("--json", help="write every run, the sgemm measurement and the summary here")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args()

    batches = [int(b) for b in args.batches.split(",") if b]
    settings = [s for s in args.peer_settings.split(",") if s]
    ours = [o for o in args.ours.split(",") if o]
    for s in settings:
        if s not in PEER_SETTINGS:
            ap.error(f"unknown peer setting {s!r}; known: {', '.join(PEER_SETTINGS)}")
    for o in ours:
        if o not in OURS:
            ap.error(f"unknown configuration {o!r}; known: {', '.join(OURS)}")
    for path in (args.tensorpool, args.peer) + ((args.kernel_bench,) if args.sgemm_gflops is None else ()):
        if not os.path.exists(path):
            ap.error(f"{path} not found (build: cmake --build build -j2 --target tp_kernel_bench tensorpool_cli)")

    if args.wait_load is not None:
        deadline = time.monotonic() + args.wait_max
        while os.getloadavg()[0] >= args.wait_load and time.monotonic() < deadline:
            log(f"waiting: 1-minute load {os.getloadavg()[0]:.2f} >= {args.wait_load}")
            time.sleep(10)

    started = datetime.now(timezone.utc)
    load_before = load_average()
    log(f"load average before: {load_before}")
    workdir = tempfile.mkdtemp(prefix="compare_torch.")
    if args.sgemm_gflops is None:
        sgemm = measure_sgemm(args)
        log(f"sgemm rate (1 thread): {sgemm['sgemm_gflops']:.1f} GFLOP/s (CPU/wall {sgemm.get('cpu_per_wall')})")
    else:
        sgemm = {"sgemm_gflops": args.sgemm_gflops, "given": True}
    runs = []
    for batch in batches:
        for run in range(args.runs):
            rotation = run % max(len(settings), 1)
            order = schedule(ours, settings[rotation:] + settings[:rotation])
            for side, config in order:
                record = (run_ours(args, config, batch, workdir) if side == "ours"
                          else run_peer(args, config, batch, workdir))
                record["run"] = run
                record["load_after"] = load_average()
                runs.append(record)
                log(f"batch {batch} run {run + 1}/{args.runs} {record['label']}: {record['samples_per_s']:,.0f} "
                    f"samples/s, peak RSS {mib(record['peak_rss_kib']):.0f} MiB, acc {record['test_acc']:.4f}, "
                    f"CPU/wall {record['cpu_s'] / record['wall_s']:.2f}, load {record['load_after'][0]:.2f}")
    load_after = load_average()
    finished = datetime.now(timezone.utc)

    summary = summarise(runs, batches, settings, sgemm["sgemm_gflops"])
    model, cpus = cpu_model()
    command = " ".join([os.path.relpath(sys.argv[0], ROOT) if sys.argv[0].startswith(ROOT) else sys.argv[0]]
                       + sys.argv[1:])
    out = []
    out.append(f"Machine: {model}, {cpus} CPUs ({os.cpu_count()} online), Linux {platform.release()}; "
               f"run {started:%Y-%m-%d %H:%M}-{finished:%H:%M} UTC.")
    out.append(f"Load average (1/5/15 min): {' / '.join(f'{x:.2f}' for x in load_before)} before, "
               f"{' / '.join(f'{x:.2f}' for x in load_after)} after.")
    sg = sgemm["sgemm_gflops"]
    by_batch = sgemm.get("by_batch", {})
    libraries = sgemm.get("libraries", {})
    if libraries:
        out.append("sgemm rate by library, one thread: " + ", ".join(
            f"{name} {lib['sgemm_gflops']:.1f} GFLOP/s" for name, lib in libraries.items()) +
            f"; the roofline uses the faster ({sgemm.get('library')}).")
    out.append(f"sgemm rate, one thread, raw sgemm over the step's GEMMs (FLOP-weighted): {sg:.1f} GFLOP/s"
               + (f" (batch 32: {by_batch['32']:.1f}, batch 128: {by_batch['128']:.1f}; "
                  f"CPU/wall during it {sgemm.get('cpu_per_wall', float('nan')):.2f})" if by_batch else " (given)")
               + f"; one-core roofline {sg * 1e9 / FLOPS_PER_SAMPLE:,.0f} samples/s.")
    out.append(f"{args.runs} runs of each configuration, {args.epochs} epoch(s) each, ours and the peer alternating; "
               "medians with (min-max).")
    if args.limit_train:
        out.append(f"**Smoke run: ours trained on about {args.limit_train} examples only; not comparable.**")
    out.append("")
    out += markdown(summary, batches, settings)
    out.append("")
    rows = targets(summary, batches)
    out += ["| target | measured | result |", "|---|---:|---|"]
    out += [f"| {t} | {m} | {'**FAIL**' if r == 'FAIL' else r} |" for t, m, r in rows]
    out.append("")
    out.append(f"Command: `{command}`")
    print("\n".join(out))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"started": started.isoformat(), "finished": finished.isoformat(),
                       "machine": {"model": model, "cpus": cpus, "kernel": platform.release()},
                       "load_before": load_before, "load_after": load_after, "command": sys.argv,
                       "flops_per_sample": FLOPS_PER_SAMPLE, "sgemm": sgemm,
                       "summary": {str(b): v for b, v in summary.items()},
                       "targets": [{"target": t, "measured": m, "result": r} for t, m, r in rows],
                       "runs": runs}, f, indent=1)
        log(f"wrote {args.json}")
    if args.check and any(r == "FAIL" for _, _, r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
