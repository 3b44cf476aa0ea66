# SPDX-License-Identifier: Apache-2.0
"""tf.distribute: the strategies' devices and native descriptions, scopes, and their errors.

The in-process tests use the default devices (cpu:0, sim:0, sim:1, and any opencl device) and change no
configuration; those that need another configuration run in a fresh interpreter (test_config.run_checks).
"""

import os
import shutil
import subprocess
import sys
import threading

import pytest

import tensorpool as tf
from tensorpool import _tensorpool

sys.path.insert(0, os.path.dirname(__file__))
from test_config import run_checks  # noqa: E402

if os.environ.get("TP_SIM_DEVICES") is not None or os.environ.get("TP_VISIBLE_DEVICES") is not None:
    pytest.skip("these tests assume the default devices (TP_SIM_DEVICES and TP_VISIBLE_DEVICES unset)",
                allow_module_level=True)


def test_mirrored_strategy_defaults_to_the_sim_devices():
    strategy = tf.distribute.MirroredStrategy()
    assert strategy.tp_devices == ["sim:0", "sim:1"]
    assert strategy.num_replicas_in_sync == 2
    native = strategy._native()
    assert isinstance(native, _tensorpool.Strategy)
    assert native.kind == _tensorpool.Strategy.Kind.mirrored
    assert native.devices == ["sim:0", "sim:1"]
    assert native.all_reduce == _tensorpool.AllReduce.auto  # NcclAllReduce: nccl on distinct GPUs, else the ring
    assert native.shard == _tensorpool.Shard.auto  # ZeRO-1 where the update folds, as the CLI's default
    assert native.bucket_bytes == 25 << 20
    assert native.fuse_update is True  # the all-reduce folded into Adam, as in the CLI
    native.fuse_update = False
    assert native.fuse_update is False
    assert native.multi_tensor_update is True  # one update node per device, as in the CLI
    native.multi_tensor_update = False
    assert native.multi_tensor_update is False
    assert native.name == "mirrored"


def test_mirrored_strategy_takes_tensorflow_names_and_options():
    strategy = tf.distribute.MirroredStrategy(
        ["/job:localhost/replica:0/task:0/device:SIM:1", "/gpu:0"],
        cross_device_ops=tf.distribute.ReductionToOneDevice(),
        shard="optimizer",
        bucket_bytes=1 << 20,
    )
    native = strategy._native()
    assert native.devices == ["sim:1", "sim:0"]
    assert native.all_reduce == _tensorpool.AllReduce.reduce_to_one
    assert native.shard == _tensorpool.Shard.optimizer
    assert native.bucket_bytes == 1 << 20
    logical = tf.config.list_logical_devices("SIM")
    assert tf.distribute.MirroredStrategy(logical).tp_devices == ["sim:0", "sim:1"]
    assert tf.distribute.MirroredStrategy("cpu:0").num_replicas_in_sync == 1
    ring = tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
    assert ring._native().all_reduce == _tensorpool.AllReduce.ring


@pytest.mark.parametrize(
    "arguments, error_type, text",
    [
        ((["sim:0", "/device:SIM:0"],), ValueError, "listed twice"),
        ((["sim:9"],), ValueError, "'sim:9' (sim:9) does not exist: this process has cpu:0, sim:0, sim:1"),
        ((["sim:9"],), ValueError, "set TP_SIM_DEVICES=10"),
        ((["cuda:0"],), ValueError, "no CUDA"),
        ((["tpu:0"],), ValueError, "is not a device name"),
        (([],), ValueError, "the list is empty"),
        ((None, "ring"), TypeError, "cross_device_ops must be a tf.distribute.CrossDeviceOps"),
        (([3],), TypeError, "device must be a device name"),
    ],
)
def test_mirrored_strategy_refuses_bad_devices(arguments, error_type, text):
    with pytest.raises(error_type) as error:
        tf.distribute.MirroredStrategy(*arguments)
    assert text in str(error.value)


def test_bad_shard_and_bucket_raise_value_error():
    with pytest.raises(ValueError, match="zero"):
        tf.distribute.MirroredStrategy(shard="zero")
    with pytest.raises(ValueError, match="bucket_bytes = 0"):
        tf.distribute.MirroredStrategy(bucket_bytes=0)
    with pytest.raises(ValueError, match="bogus"):
        _tensorpool.Strategy.mirrored(["sim:0"], "bogus")  # the C++ check, as InvalidArgumentError
    with pytest.raises(tf.errors.InvalidArgumentError):
        _tensorpool.parse_shard("zero")


def test_one_device_strategy():
    strategy = tf.distribute.OneDeviceStrategy("GPU:1")
    assert strategy.tp_devices == ["sim:1"]
    assert strategy.num_replicas_in_sync == 1
    native = strategy._native()
    assert native.kind == _tensorpool.Strategy.Kind.one
    assert native.devices == ["sim:1"]
    assert tf.distribute.OneDeviceStrategy("/cpu:0")._native().devices == ["cpu:0"]
    with pytest.raises(ValueError, match="sim:2"):
        tf.distribute.OneDeviceStrategy("sim:2")


def test_multi_worker_strategy_without_mpirun_is_one_worker():
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    assert strategy.tp_devices == ["sim:0"]
    assert strategy.num_replicas_in_sync == (_tensorpool.launcher_world_size() or 1)
    native = strategy._native()
    assert native.kind == _tensorpool.Strategy.Kind.multi_worker
    assert native.all_reduce == _tensorpool.AllReduce.auto  # mpi, or nccl for cuda devices, once compiled
    assert native.devices == ["sim:0"]
    assert tf.distribute.MultiWorkerMirroredStrategy(devices=["sim:0", "sim:1"]).tp_devices == ["sim:0", "sim:1"]
    with pytest.raises(ValueError, match="mpirun"):
        tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=object())


def test_parameter_server_strategy():
    strategy = tf.distribute.experimental.ParameterServerStrategy()
    assert strategy.tp_devices == ["sim:0", "sim:1"]
    assert strategy.parameter_device == "cpu:0"
    assert strategy.num_replicas_in_sync == 1
    native = strategy._native()
    assert native.kind == _tensorpool.Strategy.Kind.parameter_server
    assert native.devices == ["sim:0", "sim:1"]
    assert native.parameter_device == "cpu:0"
    assert native.max_staleness is None
    assert native.all_reduce == _tensorpool.AllReduce.none
    bounded = tf.distribute.experimental.ParameterServerStrategy(
        workers=["sim:1"], parameter_device="/device:SIM:0", max_staleness=2
    )._native()
    assert (bounded.devices, bounded.parameter_device, bounded.max_staleness) == (["sim:1"], "sim:0", 2)
    with pytest.raises(ValueError, match="max_staleness = -1"):
        tf.distribute.experimental.ParameterServerStrategy(max_staleness=-1)
    with pytest.raises(ValueError, match="parameter_device 'sim:7'"):
        tf.distribute.experimental.ParameterServerStrategy(parameter_device="sim:7")
    with pytest.raises(ValueError, match="cluster_resolver"):
        tf.distribute.experimental.ParameterServerStrategy(object())


def test_native_strategy_constructors():
    native = _tensorpool.Strategy.parameter_server(["sim:0"], "cpu:0", 3)
    assert (native.devices, native.parameter_device, native.max_staleness) == (["sim:0"], "cpu:0", 3)
    native.bucket_bytes = 1024
    assert native.bucket_bytes == 1024
    assert _tensorpool.Strategy.one_device().devices == []
    gradients = _tensorpool.Shard.gradients
    assert _tensorpool.Strategy.multi_worker(["sim:0"], gradients).shard == gradients
    assert "kind=parameter_server" in repr(native)


def test_get_strategy_and_scopes():
    default = tf.distribute.get_strategy()
    assert not tf.distribute.has_strategy()
    assert default.num_replicas_in_sync == 1
    assert default._native().kind == _tensorpool.Strategy.Kind.one
    assert default.tp_devices == ["sim:0"]
    mirrored = tf.distribute.MirroredStrategy()
    other = tf.distribute.OneDeviceStrategy("sim:0")
    with mirrored.scope() as entered:
        assert entered is mirrored
        assert tf.distribute.get_strategy() is mirrored
        assert tf.distribute.has_strategy()
        with mirrored.scope():  # the same strategy nests
            assert tf.distribute.get_strategy() is mirrored
        with tf.distribute.get_strategy().scope():
            assert tf.distribute.get_strategy() is mirrored
        with default.scope():  # the default's scope inside another is that one's (TensorFlow's rule)
            assert tf.distribute.get_strategy() is mirrored
        with pytest.raises(ValueError, match="Mixing different tf.distribute.Strategy objects"):
            with other.scope():
                pass
        assert tf.distribute.get_strategy() is mirrored  # the refused scope left the stack as it was
        seen = []
        thread = threading.Thread(target=lambda: seen.append(tf.distribute.get_strategy()))
        thread.start()
        thread.join()
        assert seen == [default]  # scopes are per thread
    assert tf.distribute.get_strategy() is default
    assert not tf.distribute.has_strategy()
    with other.scope():
        assert tf.distribute.get_strategy() is other
    with pytest.raises(RuntimeError):
        with mirrored.scope():
            raise RuntimeError("the scope is left on an exception")
    assert tf.distribute.get_strategy() is default


def test_a_strategy_initialises_the_devices():
    run_checks(
        """
        gpus = tf.config.list_physical_devices("GPU")
        tf.config.experimental.set_memory_growth(gpus[0], False)
        strategy = tf.distribute.MirroredStrategy()
        try:
            tf.config.experimental.set_memory_growth(gpus[0], True)
            raise AssertionError("changed growth after a strategy initialised the devices")
        except RuntimeError as error:
            assert "Physical devices cannot be modified after being initialized" in str(error)
        """
    )
    run_checks(
        """
        tf.config.set_visible_devices([], "GPU")  # no accelerator: the strategies fall back to cpu:0
        assert tf.distribute.MirroredStrategy().tp_devices == ["cpu:0"]
        assert tf.distribute.MultiWorkerMirroredStrategy().tp_devices == ["cpu:0"]
        assert tf.distribute.get_strategy().tp_devices == ["cpu:0"]
        """
    )
    run_checks(
        """
        assert tf.distribute.MirroredStrategy().tp_devices == ["sim:0", "sim:1", "sim:2"]
        assert tf.distribute.MirroredStrategy().num_replicas_in_sync == 3
        """,
        TP_SIM_DEVICES="3",
    )


def test_strategies_place_and_train_a_model():
    run_checks(
        """
        rng = np.random.default_rng(0)
        x = rng.standard_normal((256, 8)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)

        def fit(strategy):
            with strategy.scope():
                model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                             tf.keras.layers.Dense(3, activation="softmax")])
                model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
            return model, model.fit(x, y, batch_size=32, epochs=3, verbose=0).history["loss"]

        info = tf.config.experimental.get_memory_info
        model, losses = fit(tf.distribute.OneDeviceStrategy("GPU:1"))
        assert losses[-1] < losses[0], losses
        assert info("sim:1")["current"] > 0 and info("sim:0")["peak"] == 0, (info("sim:0"), info("sim:1"))
        del model
        model, losses = fit(tf.distribute.experimental.ParameterServerStrategy(max_staleness=1))
        assert losses[-1] < losses[0], losses
        assert info("sim:0")["peak"] > 0  # a worker's replica ran there
        """
    )


_FIT_SCRIPT = """
import sys
import numpy as np
import tensorpool as tf
if sys.argv[1] == "multi_worker":
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # one device per worker: sim:0
else:
    strategy = tf.distribute.MirroredStrategy(["sim:0", "sim:1"])
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
rng = np.random.default_rng(0)
x = rng.standard_normal((256, 8)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
history = model.fit(x, y, batch_size=32, epochs=2, verbose=0)
rank, size = tf._tensorpool.mpi_world() if sys.argv[1] == "multi_worker" else (0, 1)
weights = float(sum(np.abs(w).sum() for w in model.get_weights()))
# One file per rank: mpirun interleaves the ranks' stdout.
with open(f"result.{rank}.{sys.argv[1]}", "w") as out:
    print(rank, size, strategy.num_replicas_in_sync, *history.history["loss"], weights, file=out)
"""


def _mpirun_or_skip():
    """mpirun's path; skips the test (saying why) without it or without tensorpool's MPI transport."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed (scripts/install-deps installs Open MPI)")
    if not _tensorpool.mpi_built():
        pytest.skip("tensorpool was built without MPI")
    return mpirun


def _mpi_job_environment():
    """The environment of an mpirun job's ranks: this package importable, no device or MPI variables of the
    caller's leaking in, no opencl devices."""
    environment = dict(os.environ, TP_OPENCL_DEVICES="0", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    for variable in ("TP_SIM_DEVICES", "TP_VISIBLE_DEVICES", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        environment.pop(variable, None)
    return environment


def test_multi_worker_fit_under_mpirun_matches_mirrored(tmp_path):
    """Two workers of one device each train as one mirrored model over two devices: the same global batches,
    the gradients summed over the workers, so the same losses and weights on every rank."""
    mpirun = _mpirun_or_skip()
    script = tmp_path / "fit.py"
    script.write_text(_FIT_SCRIPT)
    environment = _mpi_job_environment()

    def results(command):
        done = subprocess.run(command, env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
        rows = [path.read_text().split() for path in tmp_path.glob(f"result.*.{command[-1]}")]
        return sorted([int(v) for v in row[:3]] + [float(v) for v in row[3:]] for row in rows)

    workers = results([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable, str(script),
                       "multi_worker"])
    (mirrored,) = results([sys.executable, str(script), "mirrored"])
    assert [row[:3] for row in workers] == [[0, 2, 2], [1, 2, 2]], workers
    assert mirrored[2] == 2
    for row in workers:
        assert row[3:] == pytest.approx(mirrored[3:], rel=1e-5), (workers, mirrored)


_PS_SCRIPT = """
import numpy as np
import tensorpool as tf
strategy = tf.distribute.experimental.ParameterServerStrategy(workers=["sim:0"])
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
rng = np.random.default_rng(0)
x = rng.standard_normal((256, 8)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
history = model.fit(x, y, batch_size=32, epochs=3, verbose=0)
rank, size = tf._tensorpool.mpi_world()
with open(f"result.{rank}", "w") as out:  # one file per rank: mpirun interleaves the ranks' stdout
    print(rank, size, *history.history.get("loss", []), file=out)
"""


def test_parameter_server_fit_under_mpirun(tmp_path):
    """Under mpirun rank 0 serves the variables and ranks 1 and 2 train asynchronously against it; the server
    reports the job's falling loss."""
    mpirun = _mpirun_or_skip()
    script = tmp_path / "ps.py"
    script.write_text(_PS_SCRIPT)
    environment = _mpi_job_environment()
    done = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "3", sys.executable, str(script)],
                          env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    rows = {int(row[0]): row[1:] for row in (path.read_text().split() for path in tmp_path.glob("result.*"))}
    assert sorted(rows) == [0, 1, 2], done.stdout
    assert all(row[0] == "3" for row in rows.values()), rows
    losses = [float(value) for value in rows[0][1:]]
    assert len(losses) == 3 and losses[-1] < losses[0], losses


@pytest.mark.parametrize("module", ["tensorpool.distribute", "tensorpool.distribute.experimental"])
def test_public_names_exist(module):
    import importlib

    loaded = importlib.import_module(module)
    for name in loaded.__all__:
        assert hasattr(loaded, name), f"{module}.{name}"
