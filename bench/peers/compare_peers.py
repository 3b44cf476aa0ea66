#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Our defaults against every modern peer, side by side (issue 22, "Defaults that win on every CPU").

The successor of compare_torch.py: it trains the Keras-example MLP (784-512 relu-10, Adam, sparse categorical
cross-entropy) on Fashion-MNIST with ours at its defaults and with every peer ../shared/peers/ provides, --runs
runs of each side at each batch size, alternating: in run r the sides run in one interleaved order (ours, a
peer, ours, a peer, ...) rotated by r places, so no side always runs first or right after the same neighbour.

  one             tensorpool train --strategy one --devices sim:0      (one device, no other flag)
  main            tensorpool train                                     (the main job: mirrored over sim:0,sim:1)
  torch2          PEERS_PYTHON torch_mlp.py --threads 2                (PyTorch 2, PyPI: MKL + oneDNN)
  torch1          /usr/bin/python3 torch_mlp.py --threads 2            (Debian python3-torch 1.13, OpenBLAS)
  keras-tensorflow KERAS_BACKEND=tensorflow PEERS_PYTHON keras_mlp.py  (Keras 3 on TensorFlow)
  keras-jax       KERAS_BACKEND=jax PEERS_PYTHON keras_mlp.py          (Keras 3 on JAX, XLA CPU)
and with --multi-worker:
  multi-worker    mpirun -np 2 tensorpool train --strategy multi_worker --devices sim:0
  torch2-ddp      PEERS_PYTHON torch_ddp_mlp.py --workers 2 --threads 1 (DistributedDataParallel over gloo)

Every side gets --epochs E and the batch size (ours --batch-size, peers --batch); nothing else. PEERS_PYTHON is
the virtual environment ../shared/peers/setup-peers makes (/tmp/tp-peers/bin/python). A side whose interpreter,
module, script or launcher is missing is reported as not installed and the rest run.

Figures. samples/s of the timed training loop: ours `samples_per_second` of --summary-json; torch_mlp.py its
training samples over its epochs' time; Keras peers run E + 1 epochs and the figure is over epochs 2..E+1 (the
first traces and compiles; its rate is reported beside); torch_ddp_mlp.py its own figure (its last epoch).
Every side times its epoch loop with the shuffle and without loading or evaluation. Peak RSS is the child's
ru_maxrss from os.wait4, the same measure for every side; for multi-process sides (mpirun, DDP's spawned
workers) it is the largest process's peak, not the sum. CPU time / wall time of each run and the load average
before and after each run show how busy the machine was.

Targets (issue 22), each judged on the median over runs, never on the best run: ours one device >= 2x the best
peer at batch 32 and >= 1.5x at batch 128; the main job >= 1.5x and >= 1.2x; multi-worker >= 1.5x DDP at both;
batch 128 one device >= 75% of the two-core roofline (2 x the faster library's one-core sgemm rate from
`tp_kernel_bench --sgemm-rate --library openblas|onednn` / 1,636,352 FLOP per sample); peak RSS of every side
of ours below every peer's. The quality target (5 seeds, 5 epochs) is quality.py's, beside this file.

--limit-train N trains every side on the first N training examples: ours through its --limit-train; the peers
have no such flag, so they read a copy of the Fashion-MNIST files cut to the first N training examples
($FASHION_MNIST_DIR; the test set stays whole). A limited run is a smoke test, not a measurement.

Exit status: 0; 1 when a run failed (or, with --check, a target is missed); 77 (ctest's skip) when the
Fashion-MNIST files are missing. Standard library only. From the repository root:

  bench/peers/compare_peers.py --runs 5 --json /tmp/peers.json          # the measurement (minutes)
  bench/peers/compare_peers.py --wait-load 0.5 --wait-max 900 --runs 5  # the same once the machine is quiet
  bench/peers/compare_peers.py --multi-worker --runs 5                  # and multi-worker against DDP
  bench/peers/compare_peers.py --quick                                  # every side once, 2000 examples
  bench/peers/compare_peers.py --peers none --runs 1 --limit-train 512  # ours only (the ctest smoke test)
"""
import argparse
import gzip
import json
import os
import platform
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS_DIR = os.path.normpath(os.path.join(ROOT, "..", "shared", "peers"))
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
DATA_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
              "t10k-labels-idx1-ubyte.gz")
FLOPS_PER_SAMPLE = 1_636_352  # 2 x (784*512 + 512*10) forward + 2*512*10 layer-2 input grad + 2 x weight grads
SKIPPED = 77
QUICK_LIMIT_TRAIN = 2000

# A round trip between the two CPUs below this: they share a last-level cache (docs/benchmarks.md, "Why this VM
# runs in two speeds").
NEAR_ROUND_TRIP_NS = 250
# name -> label. Ours first; the order is the report's.
OURS = {
    "one": "ours, one device (`--strategy one --devices sim:0`)",
    "main": "ours, main job (`tensorpool train`, mirrored)",
    "multi-worker": "ours, multi-worker (mpirun -np 2, sim:0 each)",
}
PEERS = {
    "torch2": "PyTorch 2 (PyPI), 2 threads",
    "torch1": "PyTorch 1.13 (Debian), 2 threads",
    "keras-tensorflow": "Keras 3 on TensorFlow",
    "keras-jax": "Keras 3 on JAX",
    "torch2-ddp": "PyTorch 2 DDP over gloo, 2 workers x 1 thread",
}
SINGLE_PEERS = ("torch2", "torch1", "keras-tensorflow", "keras-jax")
MULTI_WORKER = ("multi-worker", "torch2-ddp")
# Targets: batch -> ours / best peer at least this (the multi-worker one against DDP).
ONE_GOAL = {32: 2.0, 128: 1.5}
MAIN_GOAL = {32: 1.5, 128: 1.2}
MULTI_WORKER_GOAL = {32: 1.5, 128: 1.5}
ROOFLINE_GOAL = 0.75
ROOFLINE_BATCH = 128
# Environment variables that change a side's threading; removed so that every side runs at its defaults.
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "GOTO_NUM_THREADS",
              "KERAS_BACKEND", "XLA_FLAGS", "FASHION_MNIST_DIR", "TP_SIM_MEMORY")
VERSIONS_PROBE = """import importlib.metadata as m, json
out = {}
for name in ("torch", "tensorflow-cpu", "tensorflow", "jax", "jaxlib", "keras", "numpy"):
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps(out))"""


def log(message):
    print(message, file=sys.stderr, flush=True)


def base_env():
    return {k: v for k, v in os.environ.items() if k not in THREAD_ENV}


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_child(argv, env, cwd, timeout):
    """Runs argv in its own process group to completion or timeout (then kills the group).

    Returns (exit code, stdout, stderr, wall s, rusage of the child and its reaped descendants, timed out)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True)
        timer = threading.Timer(timeout, kill_group, (child.pid,))
        timer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:
            kill_group(child.pid)
            raise
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)  # already reaped: keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        return (child.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"), wall,
                usage, wall >= timeout)


def json_line(text):
    lines = [line for line in text.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


class Bench:
    """The selected sides, how to run each, and where their scratch files go."""

    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.ddp_runs = 0
        self.peer_data = None
        if args.limit_train:
            self.peer_data = cut_data(args.data, args.limit_train, os.path.join(workdir, "data"))

    def command(self, side, batch):
        """(argv, extra environment, summary path or None) of one run of side at batch."""
        a = self.args
        epochs = str(a.epochs)
        if side in OURS:
            summary = os.path.join(self.workdir, f"summary-{side}-{batch}.json")
            train = [a.tensorpool, "train", "--epochs", epochs, "--batch-size", str(batch), "--summary-json", summary]
            if a.data != DEFAULT_DATA:
                train += ["--data", a.data]
            if a.limit_train:
                train += ["--limit-train", str(a.limit_train)]
            if side == "one":
                return train[:2] + ["--strategy", "one", "--devices", "sim:0"] + train[2:], {}, summary
            if side == "main":
                return train, {}, summary
            return ([a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"] + train[:2] +
                    ["--strategy", "multi_worker", "--devices", "sim:0"] + train[2:], {}, summary)
        env = {"FASHION_MNIST_DIR": self.peer_data} if self.peer_data else {}
        if a.data != DEFAULT_DATA and not self.peer_data:
            env["FASHION_MNIST_DIR"] = a.data
        if side in ("torch2", "torch1"):
            python = a.peers_python if side == "torch2" else a.debian_python
            return ([python, os.path.join(a.peers_dir, "torch_mlp.py"), "--batch", str(batch), "--epochs", epochs,
                     "--threads", "2"], env, None)
        if side.startswith("keras-"):
            env["KERAS_BACKEND"] = side.removeprefix("keras-")
            # One more epoch than asked: the first traces and compiles, the figure is over the rest.
            return ([a.peers_python, os.path.join(a.peers_dir, "keras_mlp.py"), "--batch", str(batch), "--epochs",
                     str(a.epochs + 1)], env, None)
        self.ddp_runs += 1
        port = 29533 + self.ddp_runs % 400  # a fresh rendezvous port for every run: none left in TIME_WAIT
        return ([a.peers_python, os.path.join(a.peers_dir, "torch_ddp_mlp.py"), "--workers", "2", "--threads", "1",
                 "--batch", str(batch), "--epochs", epochs, "--port", str(port)], env, None)

    def run(self, side, batch):
        argv, extra, summary = self.command(side, batch)
        env = base_env()
        env.update(extra)
        if summary and os.path.exists(summary):
            os.unlink(summary)
        load_before = list(os.getloadavg())
        code, out, err, wall, usage, timed_out = run_child(argv, env, self.workdir, self.args.run_timeout)
        record = {"side": side, "batch": batch, "command": argv, "env": extra, "exit_code": code, "wall_s": wall,
                  "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_kib": usage.ru_maxrss,
                  "load_before": load_before, "load_after": list(os.getloadavg())}
        try:
            if code != 0:
                raise ValueError("timed out" if timed_out else f"exit code {code}")
            record.update(parse_ours(summary) if side in OURS else parse_peer(side, out, self.args.epochs))
        except (ValueError, KeyError, TypeError, OSError) as error:
            record["error"] = f"{error}; stdout: {out[-1500:]} stderr: {err[-1500:]}"
        return record


def parse_ours(summary):
    with open(summary, encoding="utf-8") as f:
        data = json.load(f)
    libraries = {}
    for choice in data.get("gemm_choices", []):
        libraries[choice["library"]] = libraries.get(choice["library"], 0) + 1
    return {"samples_per_s": float(data["samples_per_second"]), "test_acc": float(data["test_accuracy"]),
            "gemm": data.get("gemm"), "gemm_libraries": libraries, "summary": data}


def parse_peer(side, out, epochs):
    data = json_line(out)
    if data is None:
        raise ValueError("no JSON line on stdout")
    record = {"output": data}
    if side == "torch2-ddp":
        record["samples_per_s"] = float(data["epochs_out"][-1]["samples_per_s"])
        record["test_acc"] = float(data["test_acc"])
        return record
    runs = data["epochs"]
    if side.startswith("keras-"):
        if len(runs) != epochs + 1:
            raise ValueError(f"expected {epochs + 1} epochs, got {len(runs)}")
        record["first_epoch_samples_per_s"] = float(runs[0]["samples_per_s"])
        runs = runs[1:]
        record["test_acc"] = float(data["test_acc"])
    else:
        record["test_acc"] = float(runs[-1]["test_acc"])
    seconds = sum(e["time_s"] for e in runs)
    samples = sum(e["samples_per_s"] * e["time_s"] for e in runs)
    record["samples_per_s"] = samples / seconds if seconds > 0 else 0.0
    record["self_reported_peak_rss_kib"] = data.get("peak_rss_kib")
    return record


def cut_data(source, limit, target):
    """A copy of the Fashion-MNIST files with only the first `limit` training examples (the test set whole)."""
    os.makedirs(target, exist_ok=True)
    for name in DATA_FILES:
        path = os.path.join(source, name)
        if name.startswith("t10k"):
            os.symlink(path, os.path.join(target, name))
            continue
        with gzip.open(path, "rb") as f:
            buf = f.read()
        ndim = struct.unpack(">I", buf[:4])[0] & 0xFF
        dims = list(struct.unpack(">" + "I" * ndim, buf[4:4 + 4 * ndim]))
        count = min(limit, dims[0])
        item = 1
        for d in dims[1:]:
            item *= d
        header = buf[:4] + struct.pack(">" + "I" * ndim, count, *dims[1:])
        body = buf[4 + 4 * ndim:4 + 4 * ndim + count * item]
        with gzip.open(os.path.join(target, name), "wb", compresslevel=1) as f:
            f.write(header + body)
    return target


def probe(argv, env, timeout=300):
    """(works, what it printed or why not) of a short probe command."""
    if shutil.which(argv[0]) is None:
        return False, f"{argv[0]} not found"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"{' '.join(argv[:2])} ... timed out after {timeout} s"
    except OSError as error:
        return False, str(error)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["exit code " + str(done.returncode)])[-1]
        return False, last
    return True, done.stdout.strip()


def availability(args, sides):
    """side -> None when it can run, else why not ('not installed: ...')."""
    missing = {}
    for side in sides:
        why = None
        if side in ("one", "main", "multi-worker") and not os.access(args.tensorpool, os.X_OK):
            why = f"{args.tensorpool} not built"
        elif side == "multi-worker" and not shutil.which(args.mpirun):
            why = f"{args.mpirun} not found"
        elif side in PEERS:
            script = {"torch2": "torch_mlp.py", "torch1": "torch_mlp.py", "torch2-ddp": "torch_ddp_mlp.py"}.get(
                side, "keras_mlp.py")
            python = args.debian_python if side == "torch1" else args.peers_python
            env = base_env()
            if side.startswith("keras-"):
                env["KERAS_BACKEND"] = side.removeprefix("keras-")
                code = "import keras; assert keras.backend.backend() == '%s'" % side.removeprefix("keras-")
            elif side == "torch2-ddp":
                code = "import torch.distributed as d; assert d.is_available() and d.is_gloo_available()"
            else:
                code = "import torch, numpy"
            if not os.path.exists(os.path.join(args.peers_dir, script)):
                why = f"{os.path.join(args.peers_dir, script)} missing"
            else:
                works, said = probe([python, "-c", code], env)
                why = None if works else said
        if why:
            missing[side] = why
            log(f"{side}: not installed ({why})")
    return missing


def versions(args, sides):
    """Library versions of the interpreters the selected sides use, and ours'."""
    found = {}
    try:
        found["tensorpool"] = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--tags"],
                                             capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        found["tensorpool"] = "unknown"
    wanted = {}
    if any(s in sides for s in ("torch2", "keras-tensorflow", "keras-jax", "torch2-ddp")):
        wanted["peers venv"] = args.peers_python
    if "torch1" in sides:
        wanted["Debian"] = args.debian_python
    for where, python in wanted.items():
        works, said = probe([python, "-c", VERSIONS_PROBE], base_env(), timeout=60)
        found[where] = json.loads(said) if works else {}
    return found


def cpu_info():
    model, cpus, flags = platform.processor() or "unknown", str(os.cpu_count()), set()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        fields = {}
        for line in out.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        model, cpus = fields.get("Model name", model), fields.get("CPU(s)", cpus)
        flags = set(fields.get("Flags", "").split())
    except (OSError, subprocess.CalledProcessError):
        pass
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16") if f in flags]
    shown += sorted(f for f in flags if f.startswith("amx_"))
    absent = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_*") if f not in flags and
              not (f == "amx_*" and any(x.startswith("amx_") for x in flags))]
    return {"model": model, "cpus": cpus, "flags": shown, "absent": absent, "kernel": platform.release()}


def measure_sgemm(args):
    """The faster library's one-thread sgemm rate over the step's GEMMs, with both libraries' figures."""
    measured = {}
    for library in ("openblas", "onednn"):
        argv = [args.kernel_bench, "--sgemm-rate", "--rounds", str(args.sgemm_rounds), "--library", library]
        code, out, err, _, _, _ = run_child(argv, base_env(), ROOT, args.run_timeout)
        data = json_line(out)
        if code != 0 or data is None:
            log(f"{' '.join(argv)} failed with {code}: {err[-500:]}")
            continue
        measured[library] = data
    if not measured:
        return None
    best = dict(max(measured.values(), key=lambda d: d["sgemm_gflops"]))
    best["libraries"] = {k: v["sgemm_gflops"] for k, v in measured.items()}
    return best


def probe_round_trip(args):
    """One cache line's round trip between the first two CPUs (tp_core_round_trip), ns; None when unavailable."""
    code, out, _, _, _, _ = run_child([args.round_trip, "--rounds", "3", "--trips", "50000"], base_env(), ROOT, 60)
    data = json_line(out)
    return data["core_round_trip_ns"] if code == 0 and data else None


def probe_two_cores(args, library):
    """Two one-thread sgemm processes at once: what the two CPUs give together right now (GFLOP/s, summed)."""
    argv = [args.kernel_bench, "--sgemm-rate", "--rounds", "1", "--library", library]
    children = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT, env=base_env())
                for _ in range(2)]
    outputs = []
    for child in children:  # both are reaped whatever happens to the other
        try:
            outputs.append((child.communicate(timeout=args.run_timeout)[0], child.returncode))
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            outputs.append((b"", None))
    data = [json_line(out.decode(errors="replace")) if code == 0 else None for out, code in outputs]
    return None if None in data else sum(d["sgemm_gflops"] for d in data)


def schedule(ours, peers, run):
    """Run `run`'s order: ours and the peers interleaved, rotated by `run` places."""
    order = []
    for index in range(max(len(ours), len(peers))):
        order += ours[index:index + 1] + peers[index:index + 1]
    shift = run % max(len(order), 1)
    return order[shift:] + order[:shift]


def med(values):
    return statistics.median(values) if values else None


def summarise(runs, batches, sides):
    """batch -> side -> medians and ranges of the side's successful runs."""
    result = {}
    for batch in batches:
        result[batch] = {}
        for side in sides:
            ok = [r for r in runs if r["side"] == side and r["batch"] == batch and "error" not in r]
            failed = sum(1 for r in runs if r["side"] == side and r["batch"] == batch and "error" in r)
            if not ok and not failed:
                continue
            rates = [r["samples_per_s"] for r in ok]
            first = [r["first_epoch_samples_per_s"] for r in ok if "first_epoch_samples_per_s" in r]
            result[batch][side] = {
                "samples_per_s": rates, "median": med(rates), "failed": failed,
                "first_epoch_median": med(first),
                "peak_rss_kib": med([r["peak_rss_kib"] for r in ok]),
                "test_acc": med([r["test_acc"] for r in ok]),
                "cpu_per_wall": med([r["cpu_s"] / r["wall_s"] for r in ok if r["wall_s"] > 0]),
                "round_trips": [(r["samples_per_s"], r["core_round_trip_ns"]) for r in ok
                                if r.get("core_round_trip_ns") is not None],
                "against_probe": [(r["samples_per_s"] * FLOPS_PER_SAMPLE / (r["two_core_gflops"] * 1e9),
                                   r["two_core_gflops"], r.get("core_round_trip_ns")) for r in ok
                                  if r.get("two_core_gflops")],
            }
    return result


def placement_lines(summary, batches):
    """--capacity-probe: each run of ours with the round trip timed right before it, and the medians of the runs
    after a near and after a far round trip (NEAR_ROUND_TRIP_NS). Empty without probes."""
    rows = []
    for batch in batches:
        for side, entry in summary[batch].items():
            trips = entry.get("round_trips") if side in OURS else None
            if not trips:
                continue
            near = [rate for rate, trip in trips if trip < NEAR_ROUND_TRIP_NS]
            far = [rate for rate, trip in trips if trip >= NEAR_ROUND_TRIP_NS]
            runs = ", ".join(f"{rate:,.0f} ({trip:.0f} ns)" for rate, trip in trips)
            rows.append(f"| {batch} | {side} | {runs} | {'-' if not near else f'{med(near):,.0f} ({len(near)})'} | "
                        f"{'-' if not far else f'{med(far):,.0f} ({len(far)})'} |")
    if not rows:
        return []
    return [f"Runs of ours by how far apart the two CPUs were (`--capacity-probe`: one cache line's round trip "
            f"between them, timed right before each run; near below {NEAR_ROUND_TRIP_NS} ns), samples/s:", "",
            "| batch | side | runs (round trip before) | median near (runs) | median far (runs) |",
            "|---:|---|---|---:|---:|", *rows, ""]


def fmt_rate(entry):
    if entry is None:
        return "-"
    rates = entry["samples_per_s"]
    text = f"{entry['median']:,.0f} ({min(rates):,.0f}-{max(rates):,.0f})" if rates else "failed"
    if entry["failed"] and rates:
        text += f", {entry['failed']} failed"
    return text


def ratio_text(value):
    return "-" if value is None else f"{value:.2f}x"


def verdict(value, goal):
    if value is None or goal is None:
        return "-"
    return "PASS" if value >= goal else "**FAIL**"


def best_of(entries, names):
    present = [(entries[n]["median"], n) for n in names if n in entries and entries[n]["median"]]
    return max(present) if present else (None, None)


def label(side):
    return OURS.get(side) or PEERS[side]


def target_tables(summary, batches, roofline):
    """Markdown: one table per target of issue 22, and the (target, batch, result) rows for --check."""
    lines, verdicts = [], []

    def ratio_table(title, ours_side, peer_names, goals):
        if not any(ours_side in summary[b] for b in batches):
            return
        lines.extend([f"**{title}**", "",
                      "| batch | ours, samples/s | best peer, samples/s | ours / best peer | target | result |",
                      "|---:|---:|---|---:|---:|---|"])
        for batch in batches:
            ours = summary[batch].get(ours_side, {}).get("median")
            best, name = best_of(summary[batch], peer_names)
            value = ours / best if ours and best else None
            goal = goals.get(batch)
            result = verdict(value, goal)
            verdicts.append((title, batch, result))
            lines.append(f"| {batch} | {'-' if ours is None else f'{ours:,.0f}'} | "
                         f"{'-' if best is None else f'{best:,.0f} ({PEERS[name]})'} | {ratio_text(value)} | "
                         f"{'-' if goal is None else f'>= {goal}x'} | {result} |")
        lines.append("")

    ratio_table("Target: one device, no other flag, against the best peer", "one", SINGLE_PEERS, ONE_GOAL)
    ratio_table("Target: the main job (`tensorpool train`, no flag) against the best peer", "main", SINGLE_PEERS,
                MAIN_GOAL)
    ratio_table("Target: multi-worker (mpirun -np 2) against PyTorch DDP over gloo, 2 workers", "multi-worker",
                ("torch2-ddp",), MULTI_WORKER_GOAL)

    if ROOFLINE_BATCH in batches and "one" in summary[ROOFLINE_BATCH]:
        ours = summary[ROOFLINE_BATCH]["one"]["median"]
        roof = 2 * roofline["sgemm_gflops"] * 1e9 / FLOPS_PER_SAMPLE if roofline else None
        value = ours / roof if ours and roof else None
        result = verdict(value, ROOFLINE_GOAL)
        verdicts.append(("roofline", ROOFLINE_BATCH, result))
        rate = "-" if not roofline else (f"{roofline['sgemm_gflops']:.1f} GFLOP/s ({roofline['library']}; " +
                                         ", ".join(f"{k} {v:.1f}" for k, v in roofline["libraries"].items()) + ")")
        lines += [f"**Target: batch {ROOFLINE_BATCH}, one device, against the two-core roofline**", "",
                  "| one-core sgemm rate | two-core roofline, samples/s | ours one device, samples/s | fraction "
                  "| target | result |", "|---|---:|---:|---:|---:|---|",
                  f"| {rate} | {'-' if roof is None else f'{roof:,.0f}'} | {'-' if ours is None else f'{ours:,.0f}'} | "
                  f"{'-' if value is None else f'{100 * value:.0f}%'} | >= {100 * ROOFLINE_GOAL:.0f}% | {result} |", ""]
        probed = summary[ROOFLINE_BATCH]["one"].get("against_probe")
        if probed:
            lines += ["Against the two CPUs measured right before each run (`--capacity-probe`: two one-thread sgemm "
                      "processes at once, summed, and one cache line's round trip between the two CPUs), per run: " +
                      ", ".join(f"{100 * fraction:.0f}% of {gflops:.0f} GFLOP/s" +
                                ("" if trip is None else f" (round trip {trip:.0f} ns)")
                                for fraction, gflops, trip in probed) +
                      f"; median {100 * med([p[0] for p in probed]):.0f}% (not the target's definition: it shows "
                      "whether the machine gave two cores, and how far apart they were).", ""]

    lines += placement_lines(summary, batches)
    lines += ["**Target: peak RSS of ours below every peer's** (per process, median over runs)", "",
              "| batch | ours, highest | peers, lowest | result |", "|---:|---|---|---|"]
    for batch in batches:
        entries = summary[batch]
        ours = [(e["peak_rss_kib"], s) for s, e in entries.items() if s in OURS and e["peak_rss_kib"] is not None]
        peers = [(e["peak_rss_kib"], s) for s, e in entries.items() if s in PEERS and e["peak_rss_kib"] is not None]
        high, low = (max(ours) if ours else None), (min(peers) if peers else None)
        result = "-" if not high or not low else ("PASS" if high[0] < low[0] else "**FAIL**")
        verdicts.append(("peak RSS", batch, result))

        def mib(pair, names):
            return "-" if pair is None else f"{pair[0] / 1024:,.0f} MiB ({names[pair[1]]})"

        lines.append(f"| {batch} | {mib(high, {s: s for s in OURS})} | {mib(low, {s: s for s in PEERS})} | {result} |")
    lines.append("")
    return lines, verdicts


def all_runs_table(summary, batches, sides, missing):
    head = " | ".join(f"batch {b}" for b in batches)
    lines = [f"| side | {head} |", "|---|" + "---:|" * len(batches)]
    for side in sides:
        if side in missing:
            lines.append(f"| {label(side)} | " + " | ".join("not installed" for _ in batches) + " |")
            continue
        lines.append(f"| {label(side)}, samples/s | " +
                     " | ".join(fmt_rate(summary[b].get(side)) for b in batches) + " |")
        if side.startswith("keras-"):
            lines.append(f"| {label(side)}, first epoch (tracing), samples/s | " + " | ".join(
                "-" if not summary[b].get(side, {}).get("first_epoch_median") else
                f"{summary[b][side]['first_epoch_median']:,.0f}" for b in batches) + " |")

    def detail(title, key, form):
        lines.append(f"| **{title}** | " + " | ".join("" for _ in batches) + " |")
        for side in sides:
            if side not in missing:
                lines.append(f"| {side} | " + " | ".join(
                    "-" if summary[b].get(side, {}).get(key) is None else form(summary[b][side][key])
                    for b in batches) + " |")

    detail("peak RSS, MiB", "peak_rss_kib", lambda v: f"{v / 1024:,.0f}")
    detail("test accuracy", "test_acc", lambda v: f"{v:.4f}")
    detail("CPU time / wall", "cpu_per_wall", lambda v: f"{v:.2f}")
    return lines


def int_list(text, what, minimum, example):
    """The comma-separated integers of an argument, each >= minimum; argparse's error naming `what` otherwise."""
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {what}, e.g. {example}")
    if not values or min(values) < minimum:
        raise argparse.ArgumentTypeError(f"{text!r}: {what} must be >= {minimum}, e.g. {example}")
    return values


def parse_batches(text):
    return int_list(text, "batch sizes", 1, "32,128")


def positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def parse_arguments():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--batches", type=parse_batches, default=[32, 128], help="batch sizes (default 32,128)")
    ap.add_argument("--runs", type=positive, help="runs of every side per batch size (default 5; --quick: 1)")
    ap.add_argument("--epochs", type=positive, default=1, help="epochs per run (default 1; Keras peers run one more)")
    ap.add_argument("--ours", default="one,main", help=f"sides of ours, of {','.join(OURS)}, or none (default "
                    "one,main; --multi-worker adds multi-worker)")
    ap.add_argument("--peers", default=",".join(SINGLE_PEERS), help=f"peers, of {','.join(PEERS)}, all, or none "
                    f"(default {','.join(SINGLE_PEERS)}; --multi-worker adds torch2-ddp)")
    ap.add_argument("--multi-worker", action="store_true", help="also ours under mpirun -np 2 against PyTorch DDP")
    ap.add_argument("--limit-train", type=positive, help="train every side on the first N examples (smoke runs)")
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke mode: --runs 1, --limit-train {QUICK_LIMIT_TRAIN} unless given, one sgemm round")
    ap.add_argument("--tensorpool", default=os.path.join(ROOT, "build", "bin", "tensorpool"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--peers-python", default="/tmp/tp-peers/bin/python",
                    help="the interpreter of ../shared/peers/setup-peers' venv (default %(default)s)")
    ap.add_argument("--debian-python", default="/usr/bin/python3", help="the interpreter that sees python3-torch")
    ap.add_argument("--peers-dir", default=PEERS_DIR, help="keras_mlp.py, torch_mlp.py, torch_ddp_mlp.py")
    ap.add_argument("--data", default=DEFAULT_DATA, help="the Fashion-MNIST IDX files (default %(default)s)")
    ap.add_argument("--kernel-bench", default=os.path.join(ROOT, "build", "bench", "tp_kernel_bench"),
                    help="measures the roofline's sgemm rate when it exists")
    ap.add_argument("--round-trip", default=os.path.join(ROOT, "build", "bench", "tp_core_round_trip"),
                    help="--capacity-probe: times one cache line's round trip between two CPUs when it exists")
    ap.add_argument("--sgemm-gflops", type=float, help="use this one-core sgemm rate instead of measuring it")
    ap.add_argument("--sgemm-rounds", type=positive, help="rounds of tp_kernel_bench --sgemm-rate (default 7)")
    ap.add_argument("--skip-roofline", action="store_true", help="neither measure nor judge the roofline")
    ap.add_argument("--capacity-probe", action="store_true",
                    help=f"before each one-device run at batch {ROOFLINE_BATCH}, time two one-thread sgemm processes "
                    "at once and report ours against their sum too; before every run of ours, time a cache line's "
                    "round trip between two CPUs, and report the runs by it")
    ap.add_argument("--wait-load", type=float, help="first wait for the 1-minute load average to fall below this")
    ap.add_argument("--wait-max", type=positive, default=600, help="seconds to wait at most for --wait-load")
    ap.add_argument("--run-timeout", type=positive, default=1200, help="seconds before a run is killed")
    ap.add_argument("--json", help="write every run, the versions, the machine and the summary here")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args()
    if args.quick:
        args.runs = args.runs or 1
        args.limit_train = args.limit_train or QUICK_LIMIT_TRAIN
        args.sgemm_rounds = args.sgemm_rounds or 1
    args.runs = args.runs or 5
    args.sgemm_rounds = args.sgemm_rounds or 7
    if args.sgemm_gflops is not None and args.sgemm_gflops <= 0:
        ap.error(f"--sgemm-gflops {args.sgemm_gflops}: must be > 0")
    if args.capacity_probe and (args.skip_roofline or args.sgemm_gflops is not None):
        ap.error("--capacity-probe times the library the roofline measurement chose: drop --skip-roofline and "
                 "--sgemm-gflops")

    def sides(flag, text, known, extra):
        if text == "none":
            return []
        chosen = list(known) if text == "all" else [s for s in text.split(",") if s]
        for s in chosen:
            if s not in known:
                ap.error(f"{flag}: unknown side {s!r}; known: {', '.join(known)}, all, none")
        if args.multi_worker and extra not in chosen:
            chosen.append(extra)
        return chosen

    args.ours = sides("--ours", args.ours, OURS, "multi-worker")
    args.peers = sides("--peers", args.peers, PEERS, "torch2-ddp")
    if not args.ours and not args.peers:
        ap.error("--ours none and --peers none: nothing to run")
    args.tensorpool = os.path.abspath(args.tensorpool)  # the runs' working directory is a scratch one
    if args.ours and not os.access(args.tensorpool, os.X_OK):
        ap.error(f"--tensorpool {args.tensorpool}: not found (build it: /tmp/tp-build tensorpool_cli)")
    return args


def main():
    args = parse_arguments()
    if not all(os.path.exists(os.path.join(args.data, name)) for name in DATA_FILES):
        print(f"--data {args.data}: the Fashion-MNIST files are missing (apt-get install dataset-fashion-mnist): "
              "skipped")
        return SKIPPED
    sides = args.ours + args.peers
    missing = availability(args, sides)
    ours = [s for s in args.ours if s not in missing]
    peers = [s for s in args.peers if s not in missing]
    found = versions(args, [s for s in sides if s not in missing])
    machine = cpu_info()

    roofline = None
    if not args.skip_roofline and "one" in ours:
        if args.sgemm_gflops is not None:
            roofline = {"sgemm_gflops": args.sgemm_gflops, "library": "given", "libraries": {}}
        elif os.access(args.kernel_bench, os.X_OK):
            roofline = measure_sgemm(args)
        else:
            log(f"{args.kernel_bench} not built: no roofline (/tmp/tp-build tp_kernel_bench)")

    if args.wait_load is not None:
        deadline = time.monotonic() + args.wait_max
        while os.getloadavg()[0] >= args.wait_load and time.monotonic() < deadline:
            log(f"waiting: 1-minute load {os.getloadavg()[0]:.2f} >= {args.wait_load}")
            time.sleep(10)
    started = datetime.now(timezone.utc)
    load_before = list(os.getloadavg())
    log(f"load average before: {' / '.join(f'{x:.2f}' for x in load_before)}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="compare_peers.") as workdir:
        bench = Bench(args, workdir)
        for batch in args.batches:
            for run in range(args.runs):
                for side in schedule(ours, peers, run):
                    probe, trip = None, None
                    if args.capacity_probe and side in OURS and os.access(args.round_trip, os.X_OK):
                        trip = probe_round_trip(args)
                    if args.capacity_probe and roofline and side == "one" and batch == ROOFLINE_BATCH:
                        probe = probe_two_cores(args, roofline["library"])
                    record = bench.run(side, batch)
                    if probe is not None:
                        record["two_core_gflops"] = probe
                    if trip is not None:
                        record["core_round_trip_ns"] = trip
                    record["run"] = run
                    runs.append(record)
                    if "error" in record:
                        log(f"batch {batch} run {run + 1}/{args.runs} {side}: FAILED: {record['error']}")
                        continue
                    log(f"batch {batch} run {run + 1}/{args.runs} {side}: {record['samples_per_s']:,.0f} samples/s, "
                        f"peak RSS {record['peak_rss_kib'] / 1024:.0f} MiB, acc {record['test_acc']:.4f}, "
                        f"CPU/wall {record['cpu_s'] / record['wall_s']:.2f}, load {record['load_after'][0]:.2f}" +
                        ("" if trip is None else f", round trip before {trip:.0f} ns"))
    load_after = list(os.getloadavg())
    finished = datetime.now(timezone.utc)

    summary = summarise(runs, args.batches, sides)
    tables, verdicts = target_tables(summary, args.batches, roofline)
    venv, debian = found.get("peers venv", {}), found.get("Debian", {})
    chosen = {}  # (side, batch) -> the GEMM libraries --gemm auto chose per shape class, in the first run
    for r in runs:
        if r["side"] in OURS and r.get("gemm_libraries"):
            chosen.setdefault((r["side"], r["batch"]), (r["gemm"], r["gemm_libraries"]))
    gemm = [f"{side} batch {batch}: " + ", ".join(f"{lib} {n}" for lib, n in sorted(libraries.items()))
            for (side, batch), (_, libraries) in chosen.items()]
    modes = sorted({mode for mode, _ in chosen.values()})
    libs = [f"ours {found['tensorpool']}" + (f" (--gemm {'/'.join(modes)}; shape classes per library: "
                                             f"{'; '.join(gemm)})" if gemm else "")]
    if venv:
        libs.append("peers venv: " + ", ".join(f"{k} {v}" for k, v in venv.items()))
    if debian:
        libs.append("Debian: " + ", ".join(f"{k} {v}" for k, v in debian.items()))
    out = ["## Defaults against every peer (issue 22)", "",
           f"Machine: {machine['model']}, {machine['cpus']} CPUs, Linux {machine['kernel']}; CPU flags: "
           f"{' '.join(machine['flags']) or 'none of avx2/avx512f/avx512_bf16/amx'}"
           + (f" (absent: {' '.join(machine['absent'])})" if machine["absent"] else "") + ".",
           f"Versions: {'; '.join(libs)}.",
           f"Run {started:%Y-%m-%d %H:%M}-{finished:%H:%M} UTC; load average (1/5/15 min) "
           f"{' / '.join(f'{x:.2f}' for x in load_before)} before, {' / '.join(f'{x:.2f}' for x in load_after)} "
           "after.",
           f"{args.runs} run(s) of every side per batch size, {args.epochs} epoch(s) each (Keras peers: "
           f"{args.epochs + 1}, the first not counted), alternating; medians with (min-max)."]
    if missing:
        out.append("Not installed: " + "; ".join(f"{label(s)} ({why})" for s, why in missing.items()) + ".")
    if args.limit_train:
        out.append(f"**Smoke run: every side trained on the first {args.limit_train} examples; not a measurement.**")
    if load_before[0] >= 0.5:
        out.append(f"**Busy machine (1-minute load {load_before[0]:.2f} before the runs): the figures are not a "
                   "verdict on the targets.**")
    out += [""] + all_runs_table(summary, args.batches, sides, missing) + [""] + tables
    out.append("Command: `" + " ".join(["bench/peers/compare_peers.py"] + sys.argv[1:]) + "`")
    print("\n".join(out))

    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"started": started.isoformat(), "finished": finished.isoformat(), "machine": machine,
                       "versions": found, "load_before": load_before, "load_after": load_after,
                       "command": sys.argv, "not_installed": missing, "flops_per_sample": FLOPS_PER_SAMPLE,
                       "roofline": roofline, "summary": {str(b): v for b, v in summary.items()},
                       "targets": [{"target": t, "batch": b, "result": r.strip("*")} for t, b, r in verdicts],
                       "runs": runs}, f, indent=1)
        log(f"wrote {args.json}")
    if any("error" in r for r in runs):
        return 1
    if args.check and any("FAIL" in r for _, _, r in verdicts):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
