# SPDX-License-Identifier: Apache-2.0
"""tf.config: device lists, visibility, logical splits, memory growth, memory counters, and TensorFlow's errors.

The device configuration is per process and freezes at its first use, so each test that changes it runs its
checks in a fresh interpreter (run_checks): the script's asserts fail the test with the script's output.
"""

import os
import subprocess
import sys
import textwrap

import pytest


def run_checks(script, **env):
    """Runs `script` (after `import tensorpool as tf`) in a fresh interpreter with `env` added; returns its
    stdout, failing the test with its output when it exits non-zero."""
    environment = dict(os.environ)
    environment.pop("TP_SIM_DEVICES", None)
    environment.pop("TP_VISIBLE_DEVICES", None)
    environment.pop("TP_ALLOW_GROWTH", None)
    environment["TP_OPENCL_DEVICES"] = "0"  # the device list does not depend on the machine's OpenCL driver
    environment["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    environment.update(env)
    code = "import numpy as np\nimport tensorpool as tf\n" + textwrap.dedent(script)
    result = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"script failed:\n{code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    return result.stdout


def test_default_devices_as_tensorflow_names_them():
    run_checks(
        """
        from tensorpool import _runtime
        physical = tf.config.list_physical_devices()
        assert [d.name for d in physical] == [
            "/physical_device:CPU:0", "/physical_device:SIM:0", "/physical_device:SIM:1"], physical
        assert [d.device_type for d in physical] == ["CPU", "SIM", "SIM"]
        assert [d.tp_name for d in physical] == ["cpu:0", "sim:0", "sim:1"]
        name, device_type = physical[1]  # unpacks as TensorFlow's namedtuple
        assert (name, device_type) == ("/physical_device:SIM:0", "SIM")
        assert tf.config.list_physical_devices("GPU") == physical[1:]  # "GPU": every accelerator
        assert tf.config.list_physical_devices("sim") == physical[1:]
        assert tf.config.list_physical_devices("CPU") == physical[:1]
        assert tf.config.get_visible_devices() == physical
        # Listing physical devices does not initialise them; listing logical ones does.
        assert not _runtime.initialized()
        logical = tf.config.list_logical_devices("GPU")
        assert [d.name for d in logical] == [
            "/job:localhost/replica:0/task:0/device:SIM:0", "/job:localhost/replica:0/task:0/device:SIM:1"]
        assert [d.tp_name for d in logical] == ["sim:0", "sim:1"]
        assert _runtime.initialized()
        _runtime.ensure_configured()  # idempotent
        info = {row["name"]: row for row in tf._tensorpool.devices_info()}
        assert sorted(info) == ["cpu:0", "sim:0", "sim:1"], info
        assert info["sim:1"]["capacity_bytes"] == 1 << 30
        assert info["sim:1"]["policy"] == "grow"
        """
    )


def test_sim_devices_follow_the_environment():
    run_checks(
        """
        names = [d.tp_name for d in tf.config.list_logical_devices()]
        assert names == ["cpu:0", "sim:0", "sim:1", "sim:2"], names
        assert tf._tensorpool.devices_info()[1]["capacity_bytes"] == 64 << 20
        """,
        TP_SIM_DEVICES="3",
        TP_SIM_MEMORY="64MiB",
    )
    run_checks(
        """
        assert [d.tp_name for d in tf.config.get_visible_devices()] == ["cpu:0", "sim:1"]
        assert [d.tp_name for d in tf.config.list_logical_devices()] == ["cpu:0", "sim:0"]
        """,
        TP_VISIBLE_DEVICES="sim:1",
    )


def test_visible_devices_renumber_and_freeze():
    run_checks(
        """
        gpus = tf.config.list_physical_devices("GPU")
        tf.config.set_visible_devices(gpus[1], "GPU")
        assert tf.config.get_visible_devices() == [tf.config.list_physical_devices("CPU")[0], gpus[1]]
        tf.config.set_visible_devices([gpus[1], gpus[0]], "SIM")  # reordered: sim:0 is physical sim:1
        logical = tf.config.list_logical_devices()
        assert [d.tp_name for d in logical] == ["cpu:0", "sim:0", "sim:1"]
        physical = {row["name"]: row["physical"] for row in tf._tensorpool.devices_info()}
        assert physical == {"cpu:0": "cpu:0", "sim:0": "sim:1", "sim:1": "sim:0"}, physical
        try:
            tf.config.experimental.get_memory_info("sim:2")
            raise AssertionError("accepted sim:2")
        except ValueError as error:
            assert "this process has cpu:0, sim:0, sim:1; set TP_SIM_DEVICES=3" in str(error), error
        tf.config.set_visible_devices([gpus[1], gpus[0]], "GPU")  # unchanged: no error, as TensorFlow
        try:
            tf.config.set_visible_devices([gpus[0]], "GPU")
            raise AssertionError("changed visibility after initialisation")
        except RuntimeError as error:
            assert str(error) == "Visible devices cannot be modified after being initialized", error
        """
    )
    run_checks(
        """
        tf.config.set_visible_devices([], "GPU")
        try:
            tf.distribute.OneDeviceStrategy("sim:1")
            raise AssertionError("accepted a hidden device")
        except ValueError as error:
            assert "set_visible_devices hides it: add /physical_device:SIM:1 there" in str(error), error
        assert [d.tp_name for d in tf.config.list_logical_devices()] == ["cpu:0"]
        assert tf.distribute.MirroredStrategy().tp_devices == ["cpu:0"]
        """
    )


def test_memory_growth_applies_and_freezes():
    run_checks(
        """
        gpus = tf.config.list_physical_devices("GPU")
        assert tf.config.experimental.get_memory_growth(gpus[0]) is True  # tensorpool grows by default
        tf.config.experimental.set_memory_growth(gpus[0], False)
        assert tf.config.experimental.get_memory_growth(gpus[0]) is False
        assert tf.config.experimental.get_memory_growth("sim:1") is True
        for bad, error_type, text in [
            (tf.config.list_physical_devices("CPU")[0], ValueError, "non-GPU"),
            ("sim:9", ValueError, "sim:9"),
        ]:
            try:
                tf.config.experimental.set_memory_growth(bad, True)
                raise AssertionError(f"accepted {bad!r}")
            except error_type as error:
                assert text in str(error), error
        tf.config.list_logical_devices()
        policies = {row["name"]: row["policy"] for row in tf._tensorpool.devices_info()}
        assert policies == {"cpu:0": "grow", "sim:0": "preallocate", "sim:1": "grow"}, policies
        tf.config.experimental.set_memory_growth(gpus[0], False)  # unchanged: no error
        try:
            tf.config.experimental.set_memory_growth(gpus[0], True)
            raise AssertionError("changed growth after initialisation")
        except RuntimeError as error:
            assert str(error) == "Physical devices cannot be modified after being initialized", error
        """
    )


def test_tp_allow_growth_overrides_memory_growth():
    run_checks(
        """
        gpus = tf.config.list_physical_devices("GPU")
        tf.config.experimental.set_memory_growth(gpus[0], True)
        assert tf.config.experimental.get_memory_growth(gpus[0]) is False  # the operator's variable wins
        tf.config.list_logical_devices()
        assert [row["policy"] for row in tf._tensorpool.devices_info()[1:]] == ["preallocate", "preallocate"]
        """,
        TP_ALLOW_GROWTH=" No ",
    )


def test_logical_device_configuration_splits_a_device():
    run_checks(
        """
        gpus = tf.config.list_physical_devices("GPU")
        config = tf.config.LogicalDeviceConfiguration
        assert tf.config.get_logical_device_configuration(gpus[0]) is None
        tf.config.set_logical_device_configuration(gpus[0], [config(memory_limit=256), config(memory_limit=128)])
        assert tf.config.get_logical_device_configuration(gpus[0]) == [config(256), config(128)]
        assert tf.config.experimental.get_virtual_device_configuration(gpus[0]) == [config(256), config(128)]
        checks = [
            (lambda: tf.config.set_logical_device_configuration(gpus[1], [config(memory_limit=2048)]),
             ValueError, "more than its"),
            (lambda: tf.config.set_logical_device_configuration(gpus[1], [config()]),
             ValueError, "Setting memory limit is required"),
            (lambda: tf.config.set_logical_device_configuration(gpus[1], [config(memory_limit=-1)]),
             ValueError, "memory_limit = -1"),
            (lambda: tf.config.set_logical_device_configuration(gpus[1], []), ValueError, "non-empty"),
            (lambda: tf.config.set_logical_device_configuration(gpus[1], [256]), TypeError, "int"),
            (lambda: tf.config.experimental.set_memory_growth(gpus[0], True),
             ValueError, "Cannot set memory growth on device when virtual devices configured"),
        ]
        for call, error_type, text in checks:
            try:
                call()
                raise AssertionError(f"accepted; expected {text}")
            except error_type as error:
                assert text in str(error), error
        assert tf.config.get_logical_device_configuration(gpus[1]) is None  # the refused splits left no trace
        logical = tf.config.list_logical_devices("SIM")
        assert [d.tp_name for d in logical] == ["sim:0", "sim:1", "sim:2"], logical
        info = {row["name"]: row for row in tf._tensorpool.devices_info()}
        assert [info[n]["physical"] for n in ("sim:0", "sim:1", "sim:2")] == ["sim:0", "sim:0", "sim:1"]
        assert [info[n]["capacity_bytes"] for n in ("sim:0", "sim:1")] == [256 << 20, 128 << 20]
        tf.config.set_logical_device_configuration(gpus[0], [config(256), config(128)])  # unchanged: no error
        try:
            tf.config.set_logical_device_configuration(gpus[0], [config(memory_limit=64)])
            raise AssertionError("changed the split after initialisation")
        except RuntimeError as error:
            assert str(error) == "Virtual devices cannot be modified after being initialized", error
        """
    )


def test_memory_info_counts_and_resets_the_peak():
    run_checks(
        """
        from tensorpool.config import experimental
        assert experimental.get_memory_info("sim:1") == {"current": 0, "peak": 0}
        host = tf.constant(np.ones(1 << 20, dtype=np.float32))
        on_device = host.to("sim:1")
        on_device.numpy()  # waits for the copy: its task on the stream holds the buffer until it has run
        info = experimental.get_memory_info("sim:1")
        assert info["current"] >= 4 << 20 and info["peak"] >= info["current"], info
        # Every accepted name form gives the same counters.
        device = tf.config.list_logical_devices("SIM")[1]
        for name in ["/device:SIM:1", "/job:localhost/replica:0/task:0/device:SIM:1", "GPU:1", "SIM:1", device]:
            assert experimental.get_memory_info(name) == info, name
        assert experimental.get_memory_usage("sim:1") == info["current"]
        del on_device
        after = experimental.get_memory_info("sim:1")
        assert after["current"] < info["current"] and after["peak"] == info["peak"], (info, after)
        experimental.reset_memory_stats("/device:SIM:1")
        assert experimental.get_memory_info("sim:1") == {"current": after["current"], "peak": after["current"]}
        assert experimental.get_memory_info("sim:0") == {"current": 0, "peak": 0}
        """
    )


def test_unknown_and_malformed_device_names_raise_value_error():
    run_checks(
        """
        from tensorpool.config import experimental
        for call, text in [
            (lambda: experimental.get_memory_info("sim:7"),
             "'sim:7' (sim:7) does not exist: this process has cpu:0, sim:0, sim:1; set TP_SIM_DEVICES=8"),
            (lambda: experimental.reset_memory_stats("GPU:2"),
             "the n-th accelerator, and this process has sim:0, sim:1"),
            (lambda: experimental.get_memory_info("/physical_device:OPENCL:0"), "opencl:0"),
            (lambda: experimental.get_memory_info("cuda:0"), "no CUDA"),
            (lambda: experimental.get_memory_info("tpu:0"), "is not a device name"),
            (lambda: tf.config.set_visible_devices(["sim:0", "sim:0"]), "listed twice"),
            (lambda: tf.config.get_logical_device_configuration("sim:5"), "sim:5"),
            (lambda: experimental.get_memory_info(tf.config.list_physical_devices("SIM")[0]),
             "is a physical device; pass a logical one"),
            (lambda: experimental.set_memory_growth(tf.config.list_logical_devices("SIM")[0], True),
             "is a logical device; pass a physical one"),
        ]:
            try:
                call()
                raise AssertionError(f"accepted; expected {text}")
            except ValueError as error:
                assert text in str(error), error
        try:
            experimental.get_memory_info(3)
            raise AssertionError("accepted an int")
        except TypeError as error:
            assert "device" in str(error), error
        """
    )


@pytest.mark.parametrize("module", ["tensorpool.config", "tensorpool.config.experimental"])
def test_public_names_exist(module):
    import importlib

    loaded = importlib.import_module(module)
    for name in loaded.__all__:
        assert hasattr(loaded, name), f"{module}.{name}"
