# SPDX-License-Identifier: Apache-2.0
"""tf.keras: summary() with bytes, save/load_model, and the mixed-precision global policy."""

import numpy as np
import pytest

import tensorpool as tf

FEATURES = 20


def data(examples=128):
    rng = np.random.default_rng(11)
    x = rng.random((examples, FEATURES))
    return x, (x[:, :3].sum(axis=1) > 1.5).astype(np.int64)


def model(name=None):
    result = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(32, activation="relu", input_shape=(FEATURES,)),
            tf.keras.layers.Dense(2, activation="softmax"),
        ],
        name=name,
    )
    result.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return result


def test_summary_counts_parameters_and_bytes():
    net = model("tiny")
    lines = []
    net.summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert lines[0] == 'Model: "tiny"'
    assert "Param #" in text and "Bytes" in text
    first = next(line for line in lines if "(Dense)" in line and "(None, 32)" in line)
    assert first.split()[-2:] == ["672", "2688"]  # 20 x 32 + 32 parameters, float32
    second = next(line for line in lines if "(None, 2)" in line)
    assert second.split()[-2:] == ["66", "264"]
    assert "Total params: 738 (2.88 KiB)" in text
    assert "Optimizer state" not in text  # no variables before the first step
    x, y = data()
    net.fit(x, y, epochs=1, verbose=0)
    lines.clear()
    net.summary(print_fn=lines.append)
    state = next(line for line in lines if line.startswith("Optimizer state"))
    assert state.startswith("Optimizer state: 5.77 KiB")  # Adam's m and v: 2 x 738 x 4 bytes
    assert net.count_params() == 738


def test_save_and_load_model_round_trip(tmp_path):
    x, y = data()
    net = model()
    net.fit(x, y, epochs=2, verbose=0)
    net.save(tmp_path / "saved")
    loaded = tf.keras.models.load_model(tmp_path / "saved")
    assert [layer.units for layer in loaded.layers] == [32, 2]
    np.testing.assert_array_equal(loaded.predict(x), net.predict(x))
    assert loaded.evaluate(x, y, verbose=0) == net.evaluate(x, y, verbose=0)
    # The optimizer state came back too: one more epoch on each gives the same weights.
    net.fit(x, y, epochs=1, shuffle=False, verbose=0)
    loaded.fit(x, y, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(loaded.get_weights(), net.get_weights()):
        np.testing.assert_array_equal(a, b)
    weights_only = model()
    weights_only.fit(x[:32], y[:32], epochs=1, verbose=0)
    weights_only.load_weights(tmp_path / "saved")
    np.testing.assert_array_equal(weights_only.predict(x), tf.keras.models.load_model(tmp_path / "saved").predict(x))
    with pytest.raises(OSError, match="holds no config.json"):
        tf.keras.models.load_model(tmp_path / "missing")
    other = tf.keras.Sequential([tf.keras.layers.Dense(7, input_shape=(FEATURES,))])
    other.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="does not fit this model"):
        other.load_weights(tmp_path / "saved")
    unsaved = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(FEATURES,))])
    with pytest.raises(RuntimeError, match="compile"):
        unsaved.save(tmp_path / "never")


@pytest.fixture
def policy_reset():
    yield
    tf.keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_global_policy_reaches_the_runtime(policy, policy_reset):
    x, y = data()
    reference = model()
    tf.keras.mixed_precision.set_global_policy(policy)
    assert tf.keras.mixed_precision.global_policy().name == policy
    mixed = model()
    assert mixed._native.policy == policy
    assert all(layer.dtype_policy.name == policy for layer in mixed.layers)
    tf.keras.mixed_precision.set_global_policy("float32")
    reference.fit(x, y, epochs=1, shuffle=False, verbose=0)
    history = mixed.fit(x, y, epochs=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    # The same initial weights and batches, computed in 16 bits: close to float32's, not equal.
    expected, got = reference.predict(x), mixed.predict(x)
    assert not np.array_equal(expected, got)
    np.testing.assert_allclose(got, expected, atol=0.05)
    with pytest.raises(ValueError, match="'float64' is not one of"):
        tf.keras.mixed_precision.set_global_policy("float64")


def test_set_weights_round_trips_get_weights():
    x, y = data()
    source, target = model(), model()
    source.fit(x, y, epochs=1, verbose=0)
    target.fit(x[:32], y[:32], epochs=1, verbose=0)
    assert not np.array_equal(source.predict(x), target.predict(x))
    target.set_weights(source.get_weights())
    np.testing.assert_array_equal(target.predict(x), source.predict(x))
    with pytest.raises(ValueError, match="the model has 4 weights"):
        target.set_weights(source.get_weights()[:3])
    with pytest.raises(ValueError, match=r"dense/kernel has shape \(20, 32\); got \(32, 20\)"):
        target.set_weights([w.T for w in source.get_weights()])
