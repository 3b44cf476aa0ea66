# SPDX-License-Identifier: Apache-2.0
"""tensorpool.errors: the runtime's typed errors arrive as TensorFlow's classes (errors.cpp's translator).

An out-of-memory error needs devices with little memory, fixed when the process first uses its devices: those
cases run in a subprocess with TP_SIM_DEVICES=1 and TP_SIM_MEMORY set, and report the exception as JSON.
"""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import tensorpool as tf
from tensorpool import _tensorpool

MIB = 1 << 20

# Fits the MLP's variables (parameters and Adam's moments, about 6 MiB after rounding) in 8 MiB, then trains
# at a batch whose step arena alone is larger than the device: the arena's allocation is refused during fit().
_OOM_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorpool as tf

    batch, phase = int(sys.argv[1]), sys.argv[2]
    model = tf.keras.models.Sequential([
        tf.keras.layers.Dense(512, activation="relu", input_shape=(784,)),
        tf.keras.layers.Dense(10, activation="softmax")])
    x = np.zeros((batch, 784), np.float32)
    y = np.zeros(batch, np.int32)
    try:
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        if phase == "fit":
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
    except MemoryError as error:
        fields = {name: getattr(error, name, None) for name in (
            "tensor", "tensor_kind", "device", "allocator", "requested_bytes", "rounded_bytes", "limit_bytes",
            "in_use_bytes", "reserved_bytes", "free_bytes", "largest_free_block", "fragmentation",
            "internal_fragmentation_bytes", "cause", "suggestion", "live_tensors", "report", "message",
            "error_code")}
        fields["class"] = type(error).__name__
        fields["is_op_error"] = isinstance(error, tf.errors.OpError)
        fields["str"] = str(error)
        if phase == "fit":  # the advice's batch, checked against the replay the estimate makes
            fields["fits"] = {n: tf.memory.estimate(model, n).fits for n in (1, 81, 82, batch)}
        print(json.dumps(fields))
    else:
        print(json.dumps({"class": None}))
    """
)


def _run_out_of_memory(memory: str, batch: int, phase: str) -> dict:
    # BFC's rounding: the figures below are its (the devices' default, the expandable arena, packs tighter).
    env = dict(os.environ, TP_SIM_DEVICES="1", TP_SIM_MEMORY=memory, TP_ALLOCATOR="bfc")
    done = subprocess.run([sys.executable, "-c", _OOM_SCRIPT, str(batch), phase], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_out_of_memory_in_fit_is_resource_exhausted_with_the_report():
    error = _run_out_of_memory("8MiB", 2048, "fit")
    assert error["class"] == "ResourceExhaustedError"
    assert error["is_op_error"]
    assert error["error_code"] == tf.errors.RESOURCE_EXHAUSTED
    # The request: the step's arena (2048 examples: far more than the device holds) on the one device.
    assert error["tensor"].endswith("/arena")
    assert error["tensor_kind"] == "step_arena"
    assert error["device"] == "sim:0"
    assert error["allocator"] == "bfc"
    assert error["limit_bytes"] == 8 * MIB
    assert error["requested_bytes"] > 8 * MIB
    assert error["rounded_bytes"] >= error["requested_bytes"]
    assert error["cause"] == "exceeds_limit"
    # The live tensors are the variables, largest first, with their tags.
    live = error["live_tensors"]
    assert live[0]["bytes"] == 784 * 512 * 4
    assert live[0]["shape"] == [784, 512] and live[0]["dtype"] == "float32"
    assert {row["name"] for row in live} >= {"dense/kernel", "dense/kernel/adam_m", "dense/kernel/adam_v"}
    assert [row["bytes"] for row in live] == sorted((row["bytes"] for row in live), reverse=True)
    assert error["in_use_bytes"] >= sum(row["bytes"] for row in live)
    # Fragmentation as memory_stats gives it: of the reserved free bytes, with the rounding in bytes beside it.
    reserved_free = max(0, error["reserved_bytes"] - error["in_use_bytes"])
    assert 0 <= error["largest_free_block"] <= reserved_free
    assert error["fragmentation"] == (1.0 - error["largest_free_block"] / reserved_free if reserved_free else 0.0)
    assert error["internal_fragmentation_bytes"] is not None and error["internal_fragmentation_bytes"] >= 0
    assert f"fragmentation {100 * error['fragmentation']:.1f}% external" in error["report"]
    # The report is the C++ error's text, which names the cause and the suggestion.
    assert error["report"] == error["message"] == error["str"]
    assert error["report"].startswith("[memory] out of memory on sim:0")
    assert "exceeds the limit" in error["report"]
    # The suggestion is `tensorpool train`'s (report::add_oom_advice): the largest batch that fits, which the
    # estimate's replay confirms (81 fits, 82 does not, the batch that failed does not).
    assert error["suggestion"] and "Suggested fix: " + error["suggestion"] in error["report"]
    # In the package's terms, not the CLI's flags.
    assert error["suggestion"].startswith("batch_size=81 fits")
    assert "tensorpool.memory.estimate(model, 81)" in error["suggestion"] and "--" not in error["suggestion"]
    assert error["fits"] == {"1": True, "81": True, "82": False, "2048": False}


def test_variables_that_do_not_fit_report_a_shortage():
    # 2 MiB: the first kernel (1.5 MiB, rounded to 2 MiB) fills the device; the next variable is refused when
    # the first step materialises them. No batch size can help, and the suggestion says so.
    error = _run_out_of_memory("2MiB", 32, "fit")
    assert error["class"] == "ResourceExhaustedError"
    assert error["tensor_kind"] == "parameter" and error["tensor"].startswith("dense")
    assert error["device"] == "sim:0"
    assert error["cause"] == "shortage"
    assert error["live_tensors"][0]["name"] == "dense/kernel"
    assert error["in_use_bytes"] + error["requested_bytes"] > 2 * MIB
    assert "real shortage" in error["report"]
    assert "no batch size fits" in error["suggestion"] and "TP_SIM_MEMORY" in error["suggestion"]
    assert not any(error["fits"].values())


def test_invalid_argument_from_the_runtime_is_invalid_argument_error():
    # A second profiler over a device already recorded: tp::InvalidArgument from profile::MemoryProfiler.
    tf._runtime.ensure_configured()
    first = _tensorpool.MemoryProfiler(["sim:0"], 16, "")
    try:
        with pytest.raises(tf.errors.InvalidArgumentError) as raised:
            _tensorpool.MemoryProfiler(["sim:0"], 16, "")
    finally:
        first.close()
    assert isinstance(raised.value, ValueError)
    assert raised.value.error_code == tf.errors.INVALID_ARGUMENT
    assert "sim:0" in raised.value.message
    # A device name the manager does not have, through the public API's native call.
    with pytest.raises(ValueError) as bad_device:
        _tensorpool.memory_device_summary("sim:99")
    assert isinstance(bad_device.value, tf.errors.InvalidArgumentError)
    assert "sim:99" in str(bad_device.value)


def test_other_runtime_errors_are_internal_error(tmp_path):
    # tp::DataError: the profile's directory cannot be created (a file is in the way).
    blocker = tmp_path / "file"
    blocker.write_text("x")
    tf._runtime.ensure_configured()
    profiler = _tensorpool.MemoryProfiler(["sim:1"], 16, "")
    try:
        with pytest.raises(tf.errors.InternalError) as raised:
            profiler.write(str(blocker / "profile"), "test")
    finally:
        profiler.close()
    assert isinstance(raised.value, RuntimeError)
    assert raised.value.error_code == tf.errors.INTERNAL
    assert "cannot create the output directory" in str(raised.value)


def test_classes_follow_tensorflow():
    assert issubclass(tf.errors.InvalidArgumentError, (tf.errors.OpError, ValueError))
    assert issubclass(tf.errors.ResourceExhaustedError, tf.errors.OpError)
    assert issubclass(tf.errors.ResourceExhaustedError, MemoryError)
    assert issubclass(tf.errors.InternalError, RuntimeError)
    assert issubclass(tf.errors.UnavailableError, tf.errors.OpError)
    # TensorFlow's constructor (node_def, op, message) and the short one (message).
    error = tf.errors.InvalidArgumentError(None, None, "bad shape")
    assert error.message == "bad shape" and str(error) == "bad shape" and error.op is None
    assert tf.errors.InternalError("broken").message == "broken"
    with pytest.raises(TypeError):
        tf.errors.OpError("a", "b")
    # Built by hand, a ResourceExhaustedError has the attributes, empty.
    exhausted = tf.errors.ResourceExhaustedError(None, None, "no memory")
    assert exhausted.live_tensors == [] and exhausted.suggestion is None and exhausted.report == "no memory"
    # Exceptions cross process boundaries (multiprocessing) by pickling.
    copy = pickle.loads(pickle.dumps(tf.errors.InvalidArgumentError("x")))
    assert isinstance(copy, tf.errors.InvalidArgumentError) and copy.message == "x"
