#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Two tensorpool binaries side by side: `tensorpool train --epochs 1` of each, alternating (the order flips
every round), on one device and the main job at batch 32 and 128 (--configs picks some). Prints, per
configuration, each binary's median samples/s (min-max), the median of the per-round after/before ratios,
in how many rounds `after` was faster, and the test accuracies (which a change of speed alone leaves equal).

A change's speed-up is judged on the per-round ratios: this machine's speed drifts between runs, and two runs
of the same round are seconds apart.

Where the two CPUs are (--round-trip, on by default when tp_core_round_trip is built): a VM's two vCPUs may sit
on cores that share a cache or on cores that do not, and the hypervisor moves them (docs/benchmarks.md, "Why
this VM runs in two speeds"). One cache line's round trip between them is timed before and after every run, and
the rounds whose four probes all fall on one side of NEAR_ROUND_TRIP_NS are summarised
again, near and far apart; a round whose probes disagree (the placement moved during it) counts in neither.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Below this a round trip is "near", as bench/peers/compare_peers.py counts it (not imported from there: the
# docs check replaces that script with a shim).
NEAR_ROUND_TRIP_NS = 250

CONFIGS = {
    "one32": ("one device, batch 32", ["--strategy", "one", "--devices", "sim:0", "--batch-size", "32"]),
    "main32": ("main job, batch 32", ["--batch-size", "32"]),
    "one128": ("one device, batch 128", ["--strategy", "one", "--devices", "sim:0", "--batch-size", "128"]),
    "main128": ("main job, batch 128", ["--batch-size", "128"]),
}


def run(binary, arguments, summary):
    subprocess.run([binary, "train", "--epochs", "1", *arguments, "--summary-json", summary], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(summary, encoding="utf-8") as file:
        result = json.load(file)
    return result["samples_per_second"], result.get("test_accuracy")


def round_trip(probe):
    """One cache line's round trip between the first two CPUs, ns; None without a probe or when it fails."""
    if probe is None:
        return None
    done = subprocess.run([probe, "--rounds", "3", "--trips", "20000"], capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["core_round_trip_ns"]


def placement(probes):
    """'near' or 'far' when every probe of a round agrees, else None."""
    if not probes or any(trip is None for trip in probes):
        return None
    if all(trip < NEAR_ROUND_TRIP_NS for trip in probes):
        return "near"
    if all(trip >= NEAR_ROUND_TRIP_NS for trip in probes):
        return "far"
    return None


def summary_line(label, rounds):
    before = [entry["before"] for entry in rounds]
    after = [entry["after"] for entry in rounds]
    ratios = [a / b for a, b in zip(after, before)]
    return (f"{label}: before {statistics.median(before):,.0f} ({min(before):,.0f}-{max(before):,.0f}), "
            f"after {statistics.median(after):,.0f} ({min(after):,.0f}-{max(after):,.0f}); "
            f"after/before {statistics.median(ratios):.3f}, faster in {sum(r > 1 for r in ratios)} of {len(ratios)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the tensorpool binary before the change")
    parser.add_argument("--after", required=True, help="the tensorpool binary after the change")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (default 7)")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"configurations, comma-separated, of {','.join(CONFIGS)} (default all)")
    parser.add_argument("--limit-train", type=int, help="train on the first N examples (smoke runs)")
    parser.add_argument("--round-trip", default=os.path.join(ROOT, "build", "bench", "tp_core_round_trip"),
                        help="tp_core_round_trip, timed before and after every run ('' or a missing file: none)")
    arguments = parser.parse_args()
    if arguments.rounds < 1:
        sys.exit(f"ab_train.py: --rounds {arguments.rounds} must be >= 1")
    configs = [name.strip() for name in arguments.configs.split(",") if name.strip()]
    unknown = [name for name in configs if name not in CONFIGS]
    if unknown or not configs:
        sys.exit(f"ab_train.py: --configs {arguments.configs!r}: use names of {','.join(CONFIGS)}")
    if arguments.limit_train is not None and arguments.limit_train < 1:
        sys.exit(f"ab_train.py: --limit-train {arguments.limit_train} must be >= 1")
    for side in ("before", "after"):
        binary = getattr(arguments, side)
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            sys.exit(f"ab_train.py: --{side} {binary} is not an executable file; pass a tensorpool binary")
    probe = arguments.round_trip if arguments.round_trip and os.access(arguments.round_trip, os.X_OK) else None
    limit = ["--limit-train", str(arguments.limit_train)] if arguments.limit_train else []
    rounds = {config: [] for config in configs}
    accuracies = {(config, side): set() for config in configs for side in ("before", "after")}
    with tempfile.TemporaryDirectory() as scratch:
        summary = f"{scratch}/summary.json"
        for round_index in range(arguments.rounds):
            for config in configs:
                entry = {"probes": []}
                order = ("before", "after") if round_index % 2 else ("after", "before")
                for side in order:
                    entry["probes"].append(round_trip(probe))
                    rate, accuracy = run(getattr(arguments, side), CONFIGS[config][1] + limit, summary)
                    entry["probes"].append(round_trip(probe))
                    entry[side] = rate
                    accuracies[(config, side)].add(accuracy)
                rounds[config].append(entry)
    for config in configs:
        label = CONFIGS[config][0]
        print(summary_line(label, rounds[config]) + f"; test accuracy {sorted(accuracies[(config, 'before')])} / "
              f"{sorted(accuracies[(config, 'after')])}")
        if probe is None:
            continue
        for where in ("near", "far"):
            placed = [entry for entry in rounds[config] if placement(entry["probes"]) == where]
            trips = [trip for entry in placed for trip in entry["probes"]]
            if placed:
                print(f"  {summary_line(f'{where} ({min(trips):.0f}-{max(trips):.0f} ns)', placed)}")
        moved = sum(placement(entry["probes"]) is None for entry in rounds[config])
        if moved:
            print(f"  {moved} round(s) whose probes disagreed (the CPUs moved during the round): in neither")


if __name__ == "__main__":
    main()
