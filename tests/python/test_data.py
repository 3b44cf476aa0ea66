# SPDX-License-Identifier: Apache-2.0
"""tf.data.Dataset over numpy arrays, and fit/evaluate on a batched Dataset."""

import numpy as np
import pytest

import tensorpool as tf


def arrays(examples=100, features=6):
    rng = np.random.default_rng(3)
    x = rng.random((examples, features))
    y = rng.integers(0, 3, examples)
    return x, y


def collect(dataset):
    xs, ys = zip(*list(dataset))
    return np.concatenate(xs), np.concatenate(ys)


def test_batches_in_order_without_shuffle():
    x, y = arrays()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    assert len(dataset) == 4
    batches = list(dataset)
    assert [len(labels) for _, labels in batches] == [32, 32, 32, 4]
    features, labels = collect(dataset)
    np.testing.assert_array_equal(features, x.astype(np.float32))
    np.testing.assert_array_equal(labels, y)
    assert labels.dtype == np.int32 and features.dtype == np.float32
    assert [len(labels) for _, labels in dataset.batch(32, drop_remainder=True)] == [32, 32, 32]


def test_shuffle_permutes_each_epoch_by_seed():
    x, y = arrays()
    ids = np.arange(len(y))
    dataset = tf.data.Dataset.from_tensor_slices((x, ids)).shuffle(1000, seed=7).batch(10)
    first = collect(dataset)[1]
    second = collect(dataset)[1]
    assert sorted(first) == list(ids) and sorted(second) == list(ids)
    assert not np.array_equal(first, ids) and not np.array_equal(first, second)
    again = collect(tf.data.Dataset.from_tensor_slices((x, ids)).shuffle(1000, seed=7).batch(10))[1]
    np.testing.assert_array_equal(first, again)
    prefetched = collect(tf.data.Dataset.from_tensor_slices((x, ids)).shuffle(1000, seed=7).batch(10).prefetch(2))
    np.testing.assert_array_equal(prefetched[1], first)
    np.testing.assert_array_equal(prefetched[0], x.astype(np.float32)[first])


def test_uint8_features_keep_their_values_and_unbatched_iterates_examples():
    x = np.arange(12, dtype=np.uint8).reshape(4, 3) * 20
    y = np.array([0, 1, 2, 1], dtype=np.uint8)
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    elements = list(dataset)
    assert len(dataset) == 4 and len(elements) == 4
    np.testing.assert_array_equal(elements[2][0], x[2].astype(np.float32))
    assert elements[3][1] == 1


def test_bad_slices_raise():
    x, y = arrays()
    with pytest.raises(ValueError, match="features hold 100 examples"):
        tf.data.Dataset.from_tensor_slices((x, y[:50]))
    with pytest.raises(TypeError, match=r"\(features, labels\) tuple"):
        tf.data.Dataset.from_tensor_slices(x)
    with pytest.raises(TypeError, match="labels has dtype <U1"):
        tf.data.Dataset.from_tensor_slices((x, np.array(["a"] * 100)))
    with pytest.raises(ValueError, match="batch_size 0"):
        tf.data.Dataset.from_tensor_slices((x, y)).batch(0)


def test_fit_and_evaluate_take_a_batched_dataset():
    x, y = arrays(256)
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="softmax", input_shape=(6,))])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=1).batch(16).prefetch(tf.data.AUTOTUNE)
    history = model.fit(train, epochs=2, validation_data=tf.data.Dataset.from_tensor_slices((x, y)).batch(64),
                        verbose=0)
    assert len(history.history["val_accuracy"]) == 2
    from_dataset = model.evaluate(tf.data.Dataset.from_tensor_slices((x, y)).batch(64), verbose=0)
    from_arrays = model.evaluate(x, y, batch_size=64, verbose=0)
    assert from_dataset == pytest.approx(from_arrays, abs=1e-12)
    np.testing.assert_allclose(model.predict(tf.data.Dataset.from_tensor_slices((x, y)).batch(64)),
                               model.predict(x), rtol=1e-6)
    with pytest.raises(ValueError, match="unbatched Dataset"):
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)), verbose=0)
    with pytest.raises(ValueError, match="batch_size must be None when x is a Dataset"):
        model.fit(train, batch_size=32, verbose=0)
    with pytest.raises(ValueError, match=r"examples have shape \(5,\)"):
        model.fit(tf.data.Dataset.from_tensor_slices((x[:, :5], y)).batch(8), verbose=0)


def test_float_labels_are_regression_targets():
    x, _ = arrays(10)
    targets = np.stack([x[:, 0] * 2, -x[:, 1]], axis=1)  # float64 rows
    dataset = tf.data.Dataset.from_tensor_slices((x, targets)).shuffle(10, seed=3).batch(4)
    features, labels = collect(dataset)
    assert labels.dtype == np.float32 and labels.shape == (10, 2)
    order = [int(np.argmin(np.abs(x[:, 0].astype(np.float32) - row[0]))) for row in features]
    np.testing.assert_array_equal(labels, targets.astype(np.float32)[order])
