#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Two tensorpool binaries side by side: `tensorpool train --epochs 1` of each, alternating (the order flips
every round), on one device and the main job at batch 32 and one device at batch 128. Prints, per
configuration, each binary's median samples/s (min-max), the median of the per-round after/before ratios,
in how many rounds `after` was faster, and the test accuracies (which a change of speed alone leaves equal).

A change's speed-up is judged on the per-round ratios: this machine's speed drifts between runs, and two runs
of the same round are seconds apart.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CONFIGS = {
    "one device, batch 32": ["--strategy", "one", "--devices", "sim:0", "--batch-size", "32"],
    "main job, batch 32": ["--batch-size", "32"],
    "one device, batch 128": ["--strategy", "one", "--devices", "sim:0", "--batch-size", "128"],
}


def run(binary, arguments, summary):
    subprocess.run([binary, "train", "--epochs", "1", *arguments, "--summary-json", summary], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(summary, encoding="utf-8") as file:
        result = json.load(file)
    return result["samples_per_second"], result.get("test_accuracy")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the tensorpool binary before the change")
    parser.add_argument("--after", required=True, help="the tensorpool binary after the change")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    arguments = parser.parse_args()
    if arguments.rounds < 1:
        sys.exit(f"ab_train.py: --rounds {arguments.rounds} must be >= 1")
    for side in ("before", "after"):
        binary = getattr(arguments, side)
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            sys.exit(f"ab_train.py: --{side} {binary} is not an executable file; pass a tensorpool binary")
    rates = {(config, side): [] for config in CONFIGS for side in ("before", "after")}
    accuracies = {(config, side): set() for config in CONFIGS for side in ("before", "after")}
    with tempfile.TemporaryDirectory() as scratch:
        summary = f"{scratch}/summary.json"
        for round_index in range(arguments.rounds):
            for config, flags in CONFIGS.items():
                order = ("before", "after") if round_index % 2 else ("after", "before")
                for side in order:
                    rate, accuracy = run(getattr(arguments, side), flags, summary)
                    rates[(config, side)].append(rate)
                    accuracies[(config, side)].add(accuracy)
    for config in CONFIGS:
        before, after = rates[(config, "before")], rates[(config, "after")]
        ratios = [a / b for a, b in zip(after, before)]
        print(f"{config}: before {statistics.median(before):,.0f} ({min(before):,.0f}-{max(before):,.0f}), "
              f"after {statistics.median(after):,.0f} ({min(after):,.0f}-{max(after):,.0f}); "
              f"after/before {statistics.median(ratios):.3f}, faster in {sum(r > 1 for r in ratios)} of "
              f"{len(ratios)}; test accuracy {sorted(accuracies[(config, 'before')])} / "
              f"{sorted(accuracies[(config, 'after')])}")


if __name__ == "__main__":
    main()
