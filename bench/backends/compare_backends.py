#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The main job on an OpenCL device against the same job on a sim device, side by side (issue 19).

Runs `tensorpool train --strategy one` on each device of --devices in turn (opencl:0, sim:0, opencl:0, ...),
--runs times each, after --warmup unrecorded runs of each (PoCL compiles the kernels on a process's first use
unless its cache has them), and prints per device the medians of the training throughput (samples/s, from
--summary-json) and of the peak device memory in use and reserved, with the test accuracy and loss, the machine's
CPU, and the PoCL and CLBlast versions. Alternating the devices spreads the machine's drift (other processes,
clock changes) over both. PoCL runs the OpenCL kernels on this machine's CPU cores: these are not GPU figures.

Standard library only. Example (the command of docs/benchmarks.md):

  python3 bench/backends/compare_backends.py --runs 5 --epochs 1 --limit-train 20000
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", default="build/bin/tensorpool", help="the tensorpool binary (default: %(default)s)")
    parser.add_argument("--devices", default="opencl:0,sim:0",
                        help="comma-separated devices, each run alone with --strategy one (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=5, help="recorded runs per device (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="unrecorded runs per device first, to fill PoCL's kernel cache (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=1, help="train --epochs (default: %(default)s)")
    parser.add_argument("--limit-train", type=int, default=0,
                        help="train --limit-train: the first N training examples, 0 for all (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="train --batch-size (default: %(default)s)")
    parser.add_argument("--json", help="also write every run's figures and the medians there as JSON")
    arguments = parser.parse_args()
    if arguments.runs < 1 or arguments.warmup < 0 or arguments.epochs < 1 or arguments.limit_train < 0:
        parser.error("--runs and --epochs must be >= 1, --warmup and --limit-train >= 0")
    arguments.devices = [name.strip() for name in arguments.devices.split(",") if name.strip()]
    if not arguments.devices:
        parser.error("--devices is empty; write e.g. opencl:0,sim:0")
    return arguments


def environment(cli):
    """The caller's environment, with POCL_CACHE_DIR set (when unset) to the build's shared kernel cache."""
    variables = dict(os.environ)
    if "POCL_CACHE_DIR" not in variables:
        cache = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(cli))), "pocl-cache")
        os.makedirs(cache, exist_ok=True)
        variables["POCL_CACHE_DIR"] = cache
    return variables


def listed_devices(cli, variables):
    result = subprocess.run([cli, "devices", "--json"], env=variables, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{cli} devices --json failed (exit {result.returncode}):\n{result.stdout}{result.stderr}")
    return json.loads(result.stdout)["devices"]


def cpu_model():
    try:
        output = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in output.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def package_version(name):
    if shutil.which("dpkg-query") is None:
        return "unknown"
    result = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", name], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else "not installed"


def train(cli, variables, device, arguments, directory, index):
    summary = os.path.join(directory, f"run{index}.json")
    command = [cli, "train", "--devices", device, "--strategy", "one", "--epochs", str(arguments.epochs),
               "--limit-train", str(arguments.limit_train), "--batch-size", str(arguments.batch_size),
               "--summary-json", summary]
    result = subprocess.run(command, env=variables, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {result.returncode}):\n{result.stdout}{result.stderr}")
    with open(summary, encoding="utf-8") as source:
        figures = json.load(source)
    memory = figures["devices"][0]
    return {
        "device": device,
        "samples_per_second": figures["samples_per_second"],
        "steps": figures["steps"],
        "peak_in_use_bytes": memory["peak_in_use_bytes"],
        "peak_reserved_bytes": memory["peak_reserved_bytes"],
        "planned_peak_bytes": memory["planned_peak_bytes"],
        "test_accuracy": figures["test_accuracy"],
        "test_loss": figures["test_loss"],
    }


def mib(value):
    return f"{value / (1 << 20):.2f} MiB"


def main():
    arguments = parse_arguments()
    variables = environment(arguments.cli)
    devices = listed_devices(arguments.cli, variables)
    names = {device["name"] for device in devices}
    opencl = [device["opencl"] for device in devices if device["kind"] == "opencl" and "opencl" in device]
    missing = [name for name in arguments.devices if name not in names and not name.startswith("sim:")]
    if missing:
        # sim devices are made on demand; an opencl device needs a driver.
        print(f"skipped: {', '.join(missing)} not found ({arguments.cli} devices lists {', '.join(sorted(names))}); "
              "an OpenCL driver provides opencl devices: scripts/install-deps installs pocl-opencl-icd")
        return 0

    flags = cpu_flags()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical cores, AVX-512: "
          f"{'yes (avx512f)' if 'avx512f' in flags else 'no'}")
    for properties in opencl[:1]:
        print(f"OpenCL: {properties['platform']} {properties['driver_version']}, device {properties['name']} "
              f"({properties['device_version']}), {properties['compute_units']} compute units")
    print(f"Packages: pocl-opencl-icd {package_version('pocl-opencl-icd')}, "
          f"libclblast1 {package_version('libclblast1')}")
    print(f"Job: train --strategy one --epochs {arguments.epochs} --limit-train {arguments.limit_train} "
          f"--batch-size {arguments.batch_size}; {arguments.runs} runs per device after {arguments.warmup} warm-up, "
          "alternating")
    print("Load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    sys.stdout.flush()

    runs = {name: [] for name in arguments.devices}
    with tempfile.TemporaryDirectory(prefix="tp-compare-backends-") as directory:
        index = 0
        for _ in range(arguments.warmup):
            for name in arguments.devices:
                train(arguments.cli, variables, name, arguments, directory, index)
                index += 1
        for _ in range(arguments.runs):
            for name in arguments.devices:
                runs[name].append(train(arguments.cli, variables, name, arguments, directory, index))
                index += 1

    print("Load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print()
    print("| device | samples/s (median) | min - max | peak in use | peak reserved | planned peak "
          "| test accuracy | test loss |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    medians = {}
    for name, recorded in runs.items():
        rates = [run["samples_per_second"] for run in recorded]
        median = {key: statistics.median(run[key] for run in recorded)
                  for key in ("samples_per_second", "peak_in_use_bytes", "peak_reserved_bytes", "planned_peak_bytes",
                              "test_accuracy", "test_loss")}
        medians[name] = median
        print(f"| {name} | {median['samples_per_second']:.0f} | {min(rates):.0f} - {max(rates):.0f} "
              f"| {mib(median['peak_in_use_bytes'])} | {mib(median['peak_reserved_bytes'])} "
              f"| {mib(median['planned_peak_bytes'])} | {median['test_accuracy']:.4f} | {median['test_loss']:.4f} |")
    if len(arguments.devices) == 2:
        first, second = arguments.devices
        ratio = medians[second]["samples_per_second"] / medians[first]["samples_per_second"]
        print(f"\n{second} trains {ratio:.1f}x as many samples/s as {first} (medians)")
    if arguments.json:
        with open(arguments.json, "w", encoding="utf-8") as out:
            json.dump({"runs": runs, "medians": medians}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
