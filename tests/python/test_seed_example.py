# SPDX-License-Identifier: Apache-2.0
"""examples/seed_keras_mlp.py, the issue's seed program, runs as written and trains: 1 epoch on a subset in a
subprocess (SEED_EPOCHS, SEED_LIMIT), once mirrored in one process and once as two workers under mpirun."""

import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from tensorpool import _tensorpool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "seed_keras_mlp.py")
FASHION_DIR = "/usr/share/datasets/fashion-mnist"
CHANCE_LOSS = math.log(10)  # cross-entropy of a uniform guess over 10 classes

pytestmark = pytest.mark.skipif(
    not os.path.isfile(os.path.join(FASHION_DIR, "train-images-idx3-ubyte.gz")),
    reason=f"Fashion-MNIST is not installed in {FASHION_DIR} (apt-get install dataset-fashion-mnist)")

RESULT = re.compile(r"Test accuracy ([0-9.]+), test loss ([0-9.]+), (\d+) replicas, (\d+) training examples")


def environment(limit):
    env = dict(os.environ, SEED_EPOCHS="1", SEED_LIMIT=str(limit))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(_tensorpool.__file__)),
                                                     env.get("PYTHONPATH")) if p)
    return env


def check_trained(output, limit, replicas):
    results = RESULT.findall(output)
    assert results, output
    for accuracy, loss, replica_count, examples in results:
        assert int(examples) == limit and int(replica_count) == replicas, output
        assert float(accuracy) > 0.6, output  # chance is 0.1
        assert float(loss) < CHANCE_LOSS / 2, output
    # The training loss Keras reports falls from its first report to its last.
    losses = [float(v) for v in re.findall(r"(?<!val_)loss: ([0-9.]+)", output)]
    assert losses and losses[-1] < CHANCE_LOSS / 2, output
    if len(losses) > 1:
        assert losses[-1] < losses[0], output
    return results


def test_seed_program_trains_mirrored():
    run = subprocess.run([sys.executable, EXAMPLE], env=environment(6000), capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    check_trained(run.stdout, 6000, replicas=2)


def test_seed_program_trains_multi_worker_under_mpirun():
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin)")
    if not _tensorpool.mpi_built():
        pytest.skip("tensorpool was built without MPI")
    env = environment(3000)
    command = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
    for name in ("PYTHONPATH", "SEED_EPOCHS", "SEED_LIMIT"):
        command += ["-x", name]
    run = subprocess.run(command + [sys.executable, EXAMPLE], env=env, capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    results = check_trained(run.stdout, 3000, replicas=2)
    assert len(results) == 2, run.stdout  # one line per worker
    assert results[0][:2] == results[1][:2], run.stdout  # the workers hold the same (all-reduced) weights
