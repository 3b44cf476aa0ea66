#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Keras `model.fit` from Python against `tensorpool train`, same settings, side by side (issue 21).

Both train the main job (784-512-10 MLP, Adam, sparse categorical cross-entropy, Fashion-MNIST, seed 42,
mirrored over sim:0 and sim:1, validation on the test set after each epoch) for --epochs epochs at each
--batch-sizes value, each run in a fresh process, alternating CLI and Python (CLI, Python, CLI, ...) so the
machine's drift falls on both, --runs times each. Throughput is the training loop's samples/s, measured by the
one C++ loop both run with the same clock (train::fit's epoch time, validation excluded): the CLI's from
--summary-json, Python's from the History (`samples_per_second` of the last epoch's logs) or, without it, from
the `N samples/s` of fit's progress line. Python's wall time of the whole fit() call (numpy conversion,
callbacks, validation included) is reported beside it. The table gives each side's median and range, the ratio
of the medians, and the median of the per-pair ratios (each Python run over the CLI run just before it: on a
shared machine whose speed drifts, neighbours in time compare better than medians over the whole run).

Run from the repository root with the venv the build uses (numpy) and the build's package:

  PYTHONPATH=build/python build/python-venv/bin/python bench/python/fit_vs_cli.py --runs 5
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", default="build/bin/tensorpool", help="the tensorpool binary (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=5, help="recorded runs of each side (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs of each run (default: %(default)s)")
    parser.add_argument("--batch-sizes", default="32,128", help="comma-separated (default: %(default)s)")
    parser.add_argument("--limit-train", type=int, default=0,
                        help="the first N training examples, 0 for all (default: %(default)s)")
    parser.add_argument("--json", help="also write every run's figures and the medians there as JSON")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # batch size of one Python run
    arguments = parser.parse_args()
    if arguments.runs < 1 or arguments.epochs < 1 or arguments.limit_train < 0:
        parser.error("--runs and --epochs must be >= 1, --limit-train >= 0")
    try:
        arguments.batch_sizes = [int(b) for b in arguments.batch_sizes.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--batch-sizes {arguments.batch_sizes!r}: write comma-separated integers, e.g. 32,128")
    if not arguments.batch_sizes or min(arguments.batch_sizes) < 1:
        parser.error("--batch-sizes: at least one size, each >= 1")
    return arguments


def python_worker(arguments):
    """One run of the Python side: the seed program's model and data, fit with the CLI's settings; prints JSON."""
    import tensorpool as tf

    strategy = tf.distribute.MirroredStrategy()  # sim:0 and sim:1, as `tensorpool train` by default
    with strategy.scope():
        model = tf.keras.models.Sequential([
            tf.keras.layers.Dense(512, activation="relu", input_shape=(784,)),
            tf.keras.layers.Dense(10, activation="softmax")])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"], seed=42)
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
    x_train = x_train.reshape(-1, 784) / 255.0
    x_test = x_test.reshape(-1, 784) / 255.0
    if arguments.limit_train:
        x_train, y_train = x_train[:arguments.limit_train], y_train[:arguments.limit_train]
    started = time.perf_counter()
    history = model.fit(x_train, y_train, batch_size=arguments.worker, epochs=arguments.epochs,
                        validation_data=(x_test, y_test))
    wall = time.perf_counter() - started
    speeds = history.history.get("samples_per_second")
    print(json.dumps({"samples_per_second": speeds[-1] if speeds else None,
                      "fit_wall_samples_per_second": len(x_train) * arguments.epochs / wall,
                      "val_accuracy": history.history.get("val_accuracy", [None])[-1]}))


def run_python(arguments, batch_size):
    command = [sys.executable, os.path.abspath(__file__), "--worker", str(batch_size), "--epochs",
               str(arguments.epochs), "--limit-train", str(arguments.limit_train)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"python fit (batch {batch_size}) failed:\n{result.stdout}\n{result.stderr}")
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    if figures["samples_per_second"] is None:
        speeds = re.findall(r"(\d+) samples/s", result.stdout)
        if not speeds:
            raise SystemExit(f"python fit printed no samples/s:\n{result.stdout}")
        figures["samples_per_second"] = float(speeds[-1])
    return figures


def run_cli(arguments, batch_size):
    with tempfile.TemporaryDirectory(prefix="tp-fit-vs-cli-") as scratch:
        summary = os.path.join(scratch, "summary.json")
        command = [arguments.cli, "train", "--epochs", str(arguments.epochs), "--batch-size", str(batch_size),
                   "--seed", "42", "--limit-train", str(arguments.limit_train), "--summary-json", summary]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
        with open(summary, encoding="utf-8") as file:
            data = json.load(file)
    return {"samples_per_second": data["samples_per_second"], "test_accuracy": data.get("test_accuracy")}


def cpu_description():
    model, flags = platform.processor() or "unknown", []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            for line in file:
                if line.startswith("model name") and model in ("unknown", platform.processor()):
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    break
    except OSError:
        pass
    simd = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_tile") if f in flags]
    return f"{model}, {os.cpu_count()} logical CPUs ({' '.join(simd) or 'no AVX2'})"


def versions():
    import numpy

    found = {"python": platform.python_version(), "numpy": numpy.__version__}
    try:
        import nanobind

        found["nanobind"] = nanobind.__version__
    except ImportError:
        pass
    try:
        found["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                         text=True).stdout.strip()
    except OSError:
        pass
    return found


def main():
    arguments = parse_arguments()
    if arguments.worker is not None:
        python_worker(arguments)
        return 0
    runs = {}
    for batch_size in arguments.batch_sizes:
        runs[batch_size] = {"cli": [], "python": []}
        for index in range(arguments.runs):
            runs[batch_size]["cli"].append(run_cli(arguments, batch_size))
            runs[batch_size]["python"].append(run_python(arguments, batch_size))
            print(f"batch {batch_size} run {index + 1}/{arguments.runs}: cli "
                  f"{runs[batch_size]['cli'][-1]['samples_per_second']:.0f}, python "
                  f"{runs[batch_size]['python'][-1]['samples_per_second']:.0f} samples/s", file=sys.stderr, flush=True)
    print(f"CPU: {cpu_description()}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    print(f"{arguments.epochs} epoch(s), {arguments.limit_train or 60000} examples, mirrored on sim:0,sim:1, "
          f"seed 42; median of {arguments.runs} alternating runs each\n")
    print("| batch | `tensorpool train` samples/s (min - max) | `model.fit` samples/s (min - max) | Python / CLI, "
          "medians | Python / CLI, median of pairs | fit() wall samples/s |")
    print("|---|---:|---:|---:|---:|---:|")
    medians = {}
    for batch_size, sides in runs.items():
        cli = statistics.median(r["samples_per_second"] for r in sides["cli"])
        python = statistics.median(r["samples_per_second"] for r in sides["python"])
        wall = statistics.median(r["fit_wall_samples_per_second"] for r in sides["python"])
        pairs = statistics.median(p["samples_per_second"] / c["samples_per_second"]
                                  for c, p in zip(sides["cli"], sides["python"]))
        medians[batch_size] = {"cli": cli, "python": python, "ratio": python / cli, "pair_ratio": pairs,
                               "python_fit_wall": wall}

        def spread(side):
            values = [r["samples_per_second"] for r in sides[side]]
            return f"{min(values):,.0f} - {max(values):,.0f}"

        print(f"| {batch_size} | {cli:,.0f} ({spread('cli')}) | {python:,.0f} ({spread('python')}) | "
              f"{python / cli:.3f} | {pairs:.3f} | {wall:,.0f} |")
    if arguments.json:
        with open(arguments.json, "w", encoding="utf-8") as file:
            json.dump({"cpu": cpu_description(), "versions": versions(), "runs": runs, "medians": medians}, file,
                      indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
