#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reserved device memory against the plan, with default flags (issue 23).

Runs `tensorpool train` with its default flags (the main job: mirrored over sim:0,sim:1, the device allocator
each device gets when none is chosen) on the main job's model and on `--hidden 4096,4096 --batch-size 1024`,
and prints per device the planned peak, the peak in use, the peak reserved, reserved / planned and whether the
target holds: peak reserved <= 1.02 x planned peak + one granule (the sim devices' VirtualMemory granularity).
Device memory is deterministic (the same steps allocate the same bytes in the same order), so a short run
(--epochs 1, --limit-train examples) reserves what a full one does, and the exit status is the verdict:
0 when the target holds on every device of every configuration, 1 otherwise, 77 (ctest's skip) when the
Fashion-MNIST files are missing.

Standard library only. Example (the command of docs/benchmarks.md):

  python3 bench/memory/reserved_vs_plan.py --cli build/bin/tensorpool
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

MIB = 1 << 20
# The configurations of the target, as extra `tensorpool train` flags on top of the defaults.
CONFIGURATIONS = [("main job", []), ("4096,4096 batch 1024", ["--hidden", "4096,4096", "--batch-size", "1024"])]
RATIO = 1.02
SKIPPED = 77


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--cli", default="build/bin/tensorpool", help="the tensorpool binary (default: %(default)s)")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                        help="train --data: the Fashion-MNIST IDX files (default: %(default)s)")
    parser.add_argument("--limit-train", type=int, default=2048,
                        help="train --limit-train: examples of the one epoch each run trains (default: %(default)s)")
    parser.add_argument("--granule-mib", type=float, default=2.0,
                        help="the sim devices' VirtualMemory granularity in MiB (default: %(default)s)")
    parser.add_argument("--only", choices=[name for name, _ in CONFIGURATIONS],
                        help="run only this configuration (default: both)")
    arguments = parser.parse_args()
    if arguments.limit_train < 1 or arguments.granule_mib <= 0:
        parser.error("--limit-train must be >= 1 and --granule-mib > 0")
    return arguments


def run_configuration(cli, data, limit_train, flags):
    """The summary JSON's devices of one `tensorpool train` run, and the command that gave them."""
    with tempfile.TemporaryDirectory(prefix="tp_reserved_vs_plan_") as scratch:
        summary = os.path.join(scratch, "summary.json")
        command = [cli, "train", "--data", data, "--epochs", "1", "--limit-train", str(limit_train)] + flags
        result = subprocess.run(command + ["--summary-json", summary], capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"{shlex.join(command)} failed (exit {result.returncode}):\n{result.stdout}{result.stderr}")
        with open(summary, encoding="utf-8") as file:
            return json.load(file)["devices"], command


def main():
    arguments = parse_arguments()
    if not os.path.exists(os.path.join(arguments.data, "train-images-idx3-ubyte.gz")):
        print(f"Fashion-MNIST is not in {arguments.data} (apt-get install dataset-fashion-mnist): skipped")
        return SKIPPED
    granule = int(arguments.granule_mib * MIB)
    print(f"Reserved against the plan: target peak reserved <= {RATIO} x planned peak + {arguments.granule_mib:g} MiB "
          "on every device")
    print(f"{'configuration':<22} {'device':<7} {'allocator':<11} {'planned':>10} {'peak in use':>12} "
          f"{'reserved':>10} {'ratio':>6} {'bound':>10}  target")
    held = True
    for name, flags in CONFIGURATIONS:
        if arguments.only is not None and name != arguments.only:
            continue
        devices, command = run_configuration(arguments.cli, arguments.data, arguments.limit_train, flags)
        for device in devices:
            planned = device["planned_peak_bytes"]
            reserved = device["peak_reserved_bytes"]
            bound = RATIO * planned + granule
            ok = planned > 0 and reserved <= bound
            held = held and ok
            print(f"{name:<22} {device['device']:<7} {device.get('allocator', '?'):<11} {planned / MIB:>6.2f} MiB "
                  f"{device['peak_in_use_bytes'] / MIB:>8.2f} MiB {reserved / MIB:>6.2f} MiB "
                  f"{reserved / planned if planned else float('inf'):>6.3f} {bound / MIB:>6.2f} MiB  "
                  f"{'holds' if ok else 'MISSED'}")
        print(f"  ({shlex.join(command)})")
    print("target holds on every device" if held else "target MISSED")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
