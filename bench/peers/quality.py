#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The main job's test accuracy over seeds against the peers' (issue 22, the quality target).

Trains the Keras-example MLP (784-512 relu-10, Adam, sparse categorical cross-entropy, batch 32) on
Fashion-MNIST for --epochs epochs (default 5) with every seed of --seeds (default 1,2,3,4,5), for each side:

  main       tensorpool train --epochs E --seed S                  (the main job: mirrored over sim:0,sim:1)
  torch2     PEERS_PYTHON torch_mlp.py --epochs E --seed S         (PyTorch 2, PyPI)
  keras-jax  KERAS_BACKEND=jax PEERS_PYTHON keras_mlp.py --epochs E --seed S  (Keras 3 on JAX)

and compares the medians of the final test accuracies. Target (issue 22): the main job's median within 0.3
points of the peers' median (every peer run pooled, the same number of seeds per peer); a main job above the
peers passes. Each peer's own median is shown beside. Accuracy is a property of the run, not of the machine's
load, so this may run on a busy machine; the seeds run one after another, sides alternating.

The seed sets every side's initialisation and shuffle, but the sides draw different numbers from it: seed S of
ours and seed S of a peer are two independent samples, which is why the medians over seeds are compared and
not seed by seed.

Exit status: 0; 1 when a run failed (or, with --check, the target is missed); 77 (ctest's skip) when the
Fashion-MNIST files are missing. Standard library only, and compare_peers.py's helpers. From the repository
root:

  bench/peers/quality.py --json /tmp/quality.json                       # the measurement (minutes)
  bench/peers/quality.py --peers none --seeds 1 --epochs 1 --limit-train 512  # ours only (the ctest smoke test)
"""
import argparse
import json
import os
import sys
import tempfile
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_peers as cp  # noqa: E402  (beside this file)

PEERS = {"torch2": cp.PEERS["torch2"], "keras-jax": cp.PEERS["keras-jax"]}
GOAL_POINTS = 0.3
BATCH = 32


def command(args, side, seed, workdir, peer_data):
    """(argv, extra environment, summary path or None) of one run."""
    epochs, seed = str(args.epochs), str(seed)
    if side == "main":
        summary = os.path.join(workdir, f"summary-{seed}.json")
        argv = [args.tensorpool, "train", "--epochs", epochs, "--seed", seed, "--summary-json", summary]
        if args.data != cp.DEFAULT_DATA:
            argv += ["--data", args.data]
        if args.limit_train:
            argv += ["--limit-train", str(args.limit_train)]
        return argv, {}, summary
    env = {"FASHION_MNIST_DIR": peer_data or args.data} if (peer_data or args.data != cp.DEFAULT_DATA) else {}
    if side == "torch2":
        return ([args.peers_python, os.path.join(args.peers_dir, "torch_mlp.py"), "--batch", str(BATCH),
                 "--epochs", epochs, "--seed", seed, "--threads", "2"], env, None)
    env["KERAS_BACKEND"] = "jax"
    return ([args.peers_python, os.path.join(args.peers_dir, "keras_mlp.py"), "--batch", str(BATCH), "--epochs",
             epochs, "--seed", seed], env, None)


def run(args, side, seed, workdir, peer_data):
    argv, extra, summary = command(args, side, seed, workdir, peer_data)
    env = cp.base_env()
    env.update(extra)
    code, out, err, wall, _, timed_out = cp.run_child(argv, env, workdir, args.run_timeout)
    record = {"side": side, "seed": seed, "command": argv, "env": extra, "exit_code": code, "wall_s": wall}
    try:
        if code != 0:
            raise ValueError("timed out" if timed_out else f"exit code {code}")
        if summary:
            with open(summary, encoding="utf-8") as f:
                record["test_acc"] = float(json.load(f)["test_accuracy"])
        else:
            data = cp.json_line(out)
            if data is None:
                raise ValueError("no JSON line on stdout")
            # torch_mlp.py evaluates after every epoch, keras_mlp.py once at the end.
            record["test_acc"] = float(data["epochs"][-1]["test_acc"] if side == "torch2" else data["test_acc"])
    except (ValueError, KeyError, TypeError, IndexError, OSError) as error:
        record["error"] = f"{error}; stdout: {out[-1500:]} stderr: {err[-1500:]}"
    return record


def parse_seeds(text):
    seeds = cp.int_list(text, "seeds", 0, "1,2,3,4,5")
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: seeds must be distinct, e.g. 1,2,3,4,5")
    return seeds


def parse_arguments():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--seeds", type=parse_seeds, default=[1, 2, 3, 4, 5], help="seeds (default 1,2,3,4,5)")
    ap.add_argument("--epochs", type=cp.positive, default=5, help="epochs per run (default 5)")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"peers, of {','.join(PEERS)}, or none "
                    "(default both)")
    ap.add_argument("--limit-train", type=cp.positive, help="train every side on the first N examples (smoke runs)")
    ap.add_argument("--tensorpool", default=os.path.join(cp.ROOT, "build", "bin", "tensorpool"))
    ap.add_argument("--peers-python", default="/tmp/tp-peers/bin/python",
                    help="the interpreter of ../shared/peers/setup-peers' venv (default %(default)s)")
    ap.add_argument("--peers-dir", default=cp.PEERS_DIR, help="keras_mlp.py and torch_mlp.py")
    ap.add_argument("--data", default=cp.DEFAULT_DATA, help="the Fashion-MNIST IDX files (default %(default)s)")
    ap.add_argument("--run-timeout", type=cp.positive, default=1800, help="seconds before a run is killed")
    ap.add_argument("--json", help="write every run, the versions and the summary here")
    ap.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    args = ap.parse_args()
    if args.peers == "none":
        args.peers = []
    else:
        args.peers = [p for p in args.peers.split(",") if p]
        for p in args.peers:
            if p not in PEERS:
                ap.error(f"--peers: unknown peer {p!r}; known: {', '.join(PEERS)}, none")
    args.tensorpool = os.path.abspath(args.tensorpool)  # the runs' working directory is a scratch one
    if not os.access(args.tensorpool, os.X_OK):
        ap.error(f"--tensorpool {args.tensorpool}: not found (build it: cmake --build build --target tensorpool_cli)")
    return args


def report(runs, sides, missing, args, found, started, finished):
    """Markdown: accuracy per seed and side, the medians, the verdict; and the verdict itself."""
    acc = {(r["side"], r["seed"]): r.get("test_acc") for r in runs}
    lines = ["## Quality over seeds (issue 22)", "",
             f"Versions: ours {found.get('tensorpool', 'unknown')}" +
             ("; peers venv: " + ", ".join(f"{k} {v}" for k, v in found.get("peers venv", {}).items())
              if found.get("peers venv") else "") + ".",
             f"Run {started:%Y-%m-%d %H:%M}-{finished:%H:%M} UTC: batch {BATCH}, {args.epochs} epoch(s), seeds "
             f"{','.join(map(str, args.seeds))}; test accuracy after the last epoch."]
    if missing:
        lines.append("Not installed: " + "; ".join(f"{cp.label(s)} ({why})" for s, why in missing.items()) + ".")
    if args.limit_train:
        lines.append(f"**Smoke run: every side trained on the first {args.limit_train} examples; not a "
                     "measurement.**")
    lines += ["", "| side | " + " | ".join(f"seed {s}" for s in args.seeds) + " | median |",
              "|---|" + "---:|" * (len(args.seeds) + 1)]
    medians = {}
    for side in sides:
        values = [acc.get((side, s)) for s in args.seeds]
        ok = [v for v in values if v is not None]
        medians[side] = cp.med(ok) if len(ok) == len(values) else None
        cells = ["failed" if v is None else f"{v:.4f}" for v in values]
        name = "ours, main job (`tensorpool train`)" if side == "main" else cp.label(side)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'-' if medians[side] is None else f'{medians[side]:.4f}'} |")
    peer_values = [acc.get((p, s)) for p in sides if p != "main" for s in args.seeds]
    pooled = cp.med(peer_values) if peer_values and None not in peer_values else None
    ours = medians.get("main")
    result = "-"
    if ours is not None and pooled is not None:
        gap = 100 * (ours - pooled)
        result = "PASS" if gap >= -GOAL_POINTS else "**FAIL**"
        lines += ["", f"Peers pooled ({len(peer_values)} runs): median {pooled:.4f}. Ours minus peers: {gap:+.2f} "
                  f"points; target: at least -{GOAL_POINTS} points: {result}."]
    lines.append("")
    lines.append("Command: `" + " ".join(["bench/peers/quality.py"] + sys.argv[1:]) + "`")
    return lines, result, pooled


def main():
    args = parse_arguments()
    if not all(os.path.exists(os.path.join(args.data, name)) for name in cp.DATA_FILES):
        print(f"--data {args.data}: the Fashion-MNIST files are missing (apt-get install dataset-fashion-mnist): "
              "skipped")
        return cp.SKIPPED
    missing = cp.availability(args, args.peers)
    sides = ["main"] + [p for p in args.peers if p not in missing]
    found = cp.versions(args, sides)
    started = datetime.now(timezone.utc)
    runs = []
    with tempfile.TemporaryDirectory(prefix="quality.") as workdir:
        peer_data = cp.cut_data(args.data, args.limit_train, os.path.join(workdir, "data")) \
            if args.limit_train else None
        for index, seed in enumerate(args.seeds):
            shift = index % len(sides)
            for side in sides[shift:] + sides[:shift]:
                record = run(args, side, seed, workdir, peer_data)
                runs.append(record)
                if "error" in record:
                    cp.log(f"seed {seed} {side}: FAILED: {record['error']}")
                else:
                    cp.log(f"seed {seed} {side}: test accuracy {record['test_acc']:.4f} ({record['wall_s']:.0f} s)")
    finished = datetime.now(timezone.utc)
    lines, result, pooled = report(runs, sides, missing, args, found, started, finished)
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"started": started.isoformat(), "finished": finished.isoformat(), "versions": found,
                       "command": sys.argv, "not_installed": missing, "seeds": args.seeds, "epochs": args.epochs,
                       "peers_median": pooled, "result": result.strip("*"), "runs": runs}, f, indent=1)
        cp.log(f"wrote {args.json}")
    if any("error" in r for r in runs):
        return 1
    if args.check and "FAIL" in result:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
