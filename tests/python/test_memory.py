# SPDX-License-Identifier: Apache-2.0
"""tensorpool.memory and tensorpool.profiler: the library's reports (report/, profile/) from Python.

The estimate is `tensorpool estimate`'s (checked row by row against the CLI's JSON when the CLI is built); the
summary after fit() measures what the step allocated; the profiler writes train --profile's files.
"""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import tensorpool as tf


def _mlp(hidden=512, inputs=784):
    model = tf.keras.models.Sequential([
        tf.keras.layers.Dense(hidden, activation="relu", input_shape=(inputs,)),
        tf.keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _data(examples, inputs):
    rng = np.random.default_rng(0)
    return rng.random((examples, inputs), dtype=np.float32), rng.integers(0, 10, examples).astype(np.int32)


@pytest.fixture(scope="module")
def trained():
    """A small MLP fitted for one epoch of 64 examples at batch 16, on the default strategy's device."""
    model = _mlp(hidden=32, inputs=20)
    x, y = _data(64, 20)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    return model


def _cli():
    build = os.environ.get("TP_BUILD_DIR") or str(pathlib.Path(tf.__file__).resolve().parents[2])
    path = pathlib.Path(build) / "bin" / "tensorpool"
    return path if path.exists() else None


def test_estimate_rows_are_the_plans_tensors():
    model = _mlp(hidden=32, inputs=20)
    estimate = tf.memory.estimate(model, 8)
    assert estimate.batch_size == 8
    device = model._native.devices[0]
    rows = {row["name"]: row for row in estimate.rows}
    kernel = rows["dense/kernel"]
    assert (kernel["kind"], kernel["placement"], kernel["shape"], kernel["dtype"]) == (
        "parameter", "variable", [20, 32], "float32")
    assert kernel["bytes"] == 20 * 32 * 4 and kernel["allocated_bytes"] >= kernel["bytes"]
    assert rows["dense/kernel/adam_m"]["kind"] == "optimizer_state"
    assert any(row["kind"] == "activation" and row["placement"] in ("in arena", "in place") for row in estimate.rows)
    # Totals: the planned peak is the variables plus the arena, per device.
    (entry,) = estimate.devices
    assert entry["device"] == device and estimate.totals == {device: entry["planned_peak_bytes"]}
    assert entry["planned_peak_bytes"] == entry["variable_bytes"] + entry["arena_bytes"]
    assert entry["variable_bytes"] == sum(row["bytes"] for row in estimate.rows if row["placement"] == "variable")
    assert estimate.fits and entry["fits"]
    # The arena grows with the batch; the variables do not.
    larger = tf.memory.estimate(model, 64)
    assert larger.devices[0]["arena_bytes"] > entry["arena_bytes"]
    assert larger.devices[0]["variable_bytes"] == entry["variable_bytes"]
    text = str(estimate)
    assert text.startswith("Memory estimate of one training step at batch 8")
    assert "dense/kernel" in text and f"planned peak on {device}" in text
    assert repr(estimate).startswith("<Estimate batch_size=8")


def test_estimate_matches_the_cli():
    cli = _cli()
    if cli is None:
        pytest.skip("the tensorpool CLI is not built (TP_BUILD_TOOLS=OFF)")
    model = _mlp()  # the CLI's model: 784 -> 512 relu -> 10 softmax, Adam, float32
    device = model._native.devices[0]
    ours = tf.memory.estimate(model, 32)
    env = dict(os.environ, TP_SIM_DEVICES="2")
    done = subprocess.run([str(cli), "estimate", "--devices", device, "--strategy", "one", "--batch-size", "32",
                           "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    theirs = json.loads(done.stdout)

    def comparable(rows):  # the arena's row is named after the session ("train/arena", "keras/arena")
        return [{key: value for key, value in row.items() if row["kind"] != "step_arena" or key != "name"}
                for row in rows]

    assert comparable(ours.rows) == comparable(theirs["tensors"])
    for mine, cli_device in zip(ours.devices, theirs["devices"]):
        for key in ("planned_peak_bytes", "planned_peak_allocated_bytes", "arena_bytes", "variable_bytes",
                    "lower_bound_bytes", "fits", "bytes_by_kind"):
            assert mine[key] == cli_device[key], key


def test_estimate_under_another_strategy():
    model = _mlp(hidden=32, inputs=20)
    one = tf.memory.estimate(model, 16)
    mirrored = tf.memory.estimate(model, 16, strategy=tf.distribute.MirroredStrategy(["sim:0", "sim:1"],
                                                                                     shard="none"))
    assert set(one.totals) == {model._native.devices[0]}
    assert set(mirrored.totals) == {"sim:0", "sim:1"}
    # Every replica holds all the variables; ZeRO-1 divides the optimizer state between the two.
    plain = mirrored.devices[0]["bytes_by_kind"]
    assert plain["parameter"] == one.devices[0]["bytes_by_kind"]["parameter"]
    assert plain["optimizer_state"] == 2 * plain["parameter"]
    sharded = tf.memory.estimate(model, 16, strategy=tf.distribute.MirroredStrategy(["sim:0", "sim:1"],
                                                                                    shard="optimizer"))
    assert sharded.devices[0]["bytes_by_kind"]["optimizer_state"] == plain["optimizer_state"] // 2
    # The default, shard="auto", takes ZeRO-1 here: Adam on two sim devices folds the all-reduce into the update.
    default = tf.memory.estimate(model, 16, strategy=tf.distribute.MirroredStrategy(["sim:0", "sim:1"]))
    assert default.devices[0]["bytes_by_kind"]["optimizer_state"] == plain["optimizer_state"] // 2


def test_estimate_refuses_bad_arguments():
    model = _mlp(hidden=8, inputs=4)
    with pytest.raises(ValueError, match="batch_size"):
        tf.memory.estimate(model, 0)
    with pytest.raises(TypeError, match="batch_size"):
        tf.memory.estimate(model, 2.5)
    uncompiled = tf.keras.models.Sequential([tf.keras.layers.Dense(4, input_shape=(3,))])
    with pytest.raises(ValueError, match="compile"):
        tf.memory.estimate(uncompiled, 8)
    with pytest.raises(TypeError, match="model"):
        tf.memory.estimate("a model", 8)


def test_memory_summary_of_a_trained_model(trained):
    device = trained._native.devices[0]
    text = tf.memory.memory_summary(model=trained, batch_size=16)
    assert text.startswith("\nMemory summary\n")
    assert f"  {device}: peak in use" in text and "parameters" in text and "step arena" in text
    stats = tf.memory.memory_stats(model=trained, batch_size=16)[device]
    # The summary's fragmentation is the stack's, in the text and the dict alike.
    now = tf.memory.memory_stats(device)[device]
    assert stats["fragmentation"] == now["fragmentation"]
    assert stats["internal_fragmentation_bytes"] == now["internal_fragmentation_bytes"]
    assert f"fragmentation {100 * now['fragmentation']:.1f}% external" in text
    # Trained: the variables are live (parameters 20x32 + 32 + 32x10 + 10 floats), Adam's moments twice that.
    assert stats["parameter_bytes"] == (20 * 32 + 32 + 32 * 10 + 10) * 4
    assert stats["optimizer_state_bytes"] == 2 * stats["parameter_bytes"]
    assert stats["peak_in_use_bytes"] >= stats["parameter_bytes"] + stats["optimizer_state_bytes"]
    assert stats["planned_peak_bytes"] == tf.memory.estimate(trained, 16).totals[device]
    assert stats["largest_tensors"] and stats["largest_tensors"][0]["bytes"] >= stats["largest_tensors"][-1]["bytes"]
    # One device's block, named in either spelling.
    assert tf.memory.memory_summary(device, model=trained, batch_size=16) == text
    with pytest.raises(ValueError, match="cpu:0"):
        tf.memory.memory_summary("cpu:0", model=trained, batch_size=16)


def test_device_summary_and_stats(trained):
    device = trained._native.devices[0]
    table = tf.memory.memory_summary(device)
    assert table.startswith(f"Memory summary of {device}") and "in use" in table
    assert "external frag." in table and "internal frag." in table
    everything = tf.memory.memory_summary()
    assert table.splitlines()[0] in everything and "Memory summary of cpu:0" in everything
    stats = tf.memory.memory_stats(device)[device]
    assert stats["num_allocs"] > 0 and stats["peak_bytes_in_use"] >= stats["bytes_in_use"] > 0
    assert stats["bytes_limit"] is not None and 0.0 <= stats["fragmentation"] <= 1.0
    # One definition: 1 - largest free block / (reserved - in use), and in use - requested beside it.
    free = stats["bytes_reserved"] - stats["bytes_in_use"]
    assert 0 <= stats["largest_free_block"] <= free
    assert stats["fragmentation"] == (1.0 - stats["largest_free_block"] / free if free else 0.0)
    assert stats["internal_fragmentation_bytes"] == stats["bytes_in_use"] - stats["bytes_requested"]
    assert set(tf.memory.memory_stats()) >= {"cpu:0", device}
    with pytest.raises(ValueError, match="sim:42"):
        tf.memory.memory_summary("sim:42")


def test_memory_snapshot(trained):
    device = trained._native.devices[0]
    snapshot = tf.memory.memory_snapshot(reason="test")
    assert snapshot["reason"] == "test"
    entries = {entry["device"]: entry for entry in snapshot["devices"]}
    assert {"cpu:0", device} <= set(entries)
    # The trained model's variables are live tensors of its device, with their tags.
    names = json.dumps(entries[device])
    assert "dense/kernel" in names
    one = tf.memory.memory_snapshot(device)
    assert [entry["device"] for entry in one["devices"]][0] == device
    with pytest.raises(TypeError):
        tf.memory.memory_snapshot(reason=3)


def test_profile_writes_the_cli_files(tmp_path):
    x, y = _data(32, 20)
    with tf.profiler.profile(tmp_path / "run") as profiler:
        assert profiler.recording
        trained = _mlp(hidden=32, inputs=20)  # its variables and arena are allocated while recording
        profiler.set_planned_peaks(trained, 16)
        trained.fit(x, y, batch_size=16, epochs=1, verbose=0)
        live = profiler.snapshot()
        assert live["devices"]
    assert not profiler.recording
    device = trained._native.devices[0]
    run = tmp_path / "run"
    for name in ("snapshot.json", "trace.json", "report.html", "summary.txt", "trace-cpu_0.csv",
                 "trace-" + device.replace(":", "_") + ".csv"):
        assert (run / name).is_file(), name
        assert str(run / name) in profiler.files
    assert profiler.summary == (run / "summary.txt").read_text()
    snapshot = json.loads((run / "snapshot.json").read_text())
    assert snapshot["reason"] == "end of profile"
    entry = next(entry for entry in snapshot["devices"] if entry["device"] == device)
    # The fit ran inside the block: its allocations and frees were recorded.
    assert len(entry["events"]) > 0
    assert entry["planned_peak_bytes"] == tf.memory.estimate(trained, 16).totals[device]
    # The device's RMM trace (for `tensorpool replay`) holds the variables' and the arena's allocations.
    trace = (run / ("trace-" + device.replace(":", "_") + ".csv")).read_text().splitlines()
    assert trace[0].startswith("Thread,Time,Action") and sum(",allocate," in line for line in trace) >= 4
    assert "traceEvents" in (run / "trace.json").read_text()


def test_profiler_start_stop_and_errors(tmp_path):
    tf.profiler.experimental.start(str(tmp_path / "a"), devices=["cpu:0"])
    with pytest.raises(RuntimeError, match="already running"):
        tf.profiler.start(str(tmp_path / "b"))
    # One profiler per device: a second over the same device is the runtime's InvalidArgument.
    with pytest.raises(tf.errors.InvalidArgumentError, match="cpu:0"):
        with tf.profiler.profile(tmp_path / "c", devices="cpu:0"):
            pass
    summary = tf.profiler.experimental.stop()
    assert "cpu:0" in summary and (tmp_path / "a" / "snapshot.json").is_file()
    with pytest.raises(RuntimeError, match="no profiler"):
        tf.profiler.stop()
    with pytest.raises(TypeError, match="logdir"):
        tf.profiler.profile(42)
    with pytest.raises(ValueError, match="max_events_per_device"):
        tf.profiler.profile(tmp_path, max_events_per_device=0)
    # An exception in the block still writes the files, and is not replaced.
    with pytest.raises(KeyError):
        with tf.profiler.profile(tmp_path / "d", devices=["cpu:0"]):
            raise KeyError("inside")
    assert json.loads((tmp_path / "d" / "snapshot.json").read_text())["reason"] == "exception: KeyError"
