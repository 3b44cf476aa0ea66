# SPDX-License-Identifier: Apache-2.0
"""tf.keras Sequential: compile, fit, evaluate, predict, and the errors bad inputs raise."""

import numpy as np
import pytest

import tensorpool as tf

FEATURES = 20
CLASSES = 4


def separable(examples=512, seed=0):
    """Features in [0, 1) (float64, as x / 255.0 gives) whose class is the argmax of a fixed projection."""
    rng = np.random.default_rng(seed)
    x = rng.random((examples, FEATURES))
    projection = np.random.default_rng(99).normal(size=(FEATURES, CLASSES))
    y = np.argmax((x - 0.5) @ projection, axis=1).astype(np.int64)
    return x, y


def mlp(metrics=("accuracy",), optimizer="adam", hidden=32):
    model = tf.keras.models.Sequential(
        [
            tf.keras.layers.Dense(hidden, activation="relu", input_shape=(FEATURES,)),
            tf.keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=list(metrics) or None)
    return model


def test_fit_learns_and_returns_keras_history():
    x, y = separable()
    model = mlp(optimizer=tf.keras.optimizers.Adam(learning_rate=0.01))
    history = model.fit(x, y, batch_size=32, epochs=4, validation_data=(x[:128], y[:128]), verbose=0)
    assert history is model.history
    assert history.epoch == [0, 1, 2, 3]
    assert sorted(history.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert all(len(values) == 4 for values in history.history.values())
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert history.history["accuracy"][-1] > 0.6


def test_evaluate_agrees_with_predict():
    x, y = separable()
    model = mlp()
    model.fit(x, y, epochs=2, verbose=0)
    loss, accuracy = model.evaluate(x, y, batch_size=64, verbose=0)
    probabilities = model.predict(x, batch_size=50)
    assert probabilities.shape == (len(x), CLASSES) and probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert accuracy == pytest.approx(np.mean(np.argmax(probabilities, axis=1) == y), abs=1e-9)
    expected_loss = -np.mean(np.log(np.clip(probabilities[np.arange(len(y)), y], 1e-7, 1)))
    assert loss == pytest.approx(expected_loss, rel=1e-3)
    assert model.evaluate(x, y, batch_size=64, verbose=0, return_dict=True) == {"loss": loss, "accuracy": accuracy}


def test_without_metrics_only_the_loss():
    x, y = separable(128)
    model = mlp(metrics=())
    history = model.fit(x, y, epochs=1, verbose=0)
    assert list(history.history) == ["loss"]
    loss = model.evaluate(x, y, verbose=0)
    assert isinstance(loss, float) and loss > 0


def test_float64_and_float32_features_train_identically():
    x, y = separable(256)
    first, second = mlp(), mlp()
    first.fit(x, y, epochs=1, verbose=0)
    second.fit(x.astype(np.float32), y.astype(np.uint8), epochs=1, verbose=0)
    for a, b in zip(first.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert len(first.get_weights()) == 4 and first.get_weights()[0].shape == (FEATURES, 32)


def test_input_layer_add_and_optimizer_objects():
    x, y = separable(128)
    model = tf.keras.Sequential()
    model.add(tf.keras.Input(shape=(FEATURES,)))
    model.add(tf.keras.layers.Dense(16, activation="relu"))
    model.add(tf.keras.layers.Dense(CLASSES, activation="softmax"))
    assert model.input_shape == (None, FEATURES) and model.output_shape == (None, CLASSES)
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.5), loss="sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="get_weights: the model has no variables yet"):
        model.get_weights()
    model.fit(x, y, epochs=1, verbose=0)
    before = model.get_weights()
    model.fit(x, y, epochs=1, verbose=0)
    after = model.get_weights()
    assert not np.array_equal(before[0], after[0])
    adam = mlp(optimizer=tf.keras.optimizers.Adam(learning_rate=0.01))
    assert adam.fit(x, y, epochs=1, verbose=0).history["loss"][0] > 0


def test_verbose_prints_the_progress_bar(capfd):
    x, y = separable(128)
    model = mlp()
    model.fit(x, y, epochs=2, verbose=1)
    out = capfd.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out and "loss: " in out and "accuracy: " in out
    model.fit(x, y, epochs=1, verbose=0)
    assert capfd.readouterr().out == ""


def test_bad_inputs_name_the_argument():
    x, y = separable(64)
    model = mlp()
    with pytest.raises(ValueError, match=r"fit: x has 19 features per example; the model's input_shape is \(20,\)"):
        model.fit(x[:, :19], y, verbose=0)
    with pytest.raises(ValueError, match="x holds 64 examples but y holds 63"):
        model.fit(x, y[:63], verbose=0)
    with pytest.raises(TypeError, match="fit: y has dtype"):
        model.fit(x, np.array(["a"] * 64), verbose=0)
    with pytest.raises(TypeError, match="fit: x has dtype"):
        model.fit(np.array([["a"] * FEATURES] * 64), y, verbose=0)
    with pytest.raises(ValueError, match="class 7, but the last layer has 4 units"):
        model.fit(x, np.full(64, 7), verbose=0)
    with pytest.raises(ValueError, match="fit: batch_size 0"):
        model.fit(x, y, batch_size=0, verbose=0)
    with pytest.raises(ValueError, match="predict: x has 3 features"):
        model.predict(x[:, :3])
    with pytest.raises(ValueError, match="optimizer 'adagrad'"):
        mlp(optimizer="adagrad")
    with pytest.raises(ValueError, match="activation 'tanh'"):
        tf.keras.layers.Dense(4, activation="tanh")
    uncompiled = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(FEATURES,))])
    with pytest.raises(RuntimeError, match="compile"):
        uncompiled.fit(x, y)
    shapeless = tf.keras.Sequential([tf.keras.layers.Dense(4)])
    with pytest.raises(ValueError, match="input shape is unknown"):
        shapeless.compile(optimizer="adam", loss="sparse_categorical_crossentropy")


def test_strategy_scope_replicates_the_model():
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = mlp()
    assert len(model._native.devices) == strategy.num_replicas_in_sync
    x, y = separable(128)
    assert model.fit(x, y, epochs=1, verbose=0).history["loss"][0] > 0
    outside = mlp()
    assert len(outside._native.devices) == 1


def test_parameter_server_fit_prints_one_line_per_epoch(capfd):
    strategy = tf.distribute.experimental.ParameterServerStrategy()
    with strategy.scope():
        model = mlp()
    assert model._native.strategy_name == "parameter_server"
    x, y = separable(128)
    history = model.fit(x, y, epochs=2, verbose=1)
    out = capfd.readouterr().out
    assert "Epoch 1/2 - " in out and "Epoch 2/2 - " in out and "accuracy: " in out
    assert len(history.history["loss"]) == 2


def test_mean_squared_error_learns_a_linear_map():
    rng = np.random.default_rng(2)
    x = rng.random((256, 3))
    y = x @ np.array([1.5, -2.0, 0.5]) + 0.25  # (N,) targets of a one-unit output
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.2), loss="mse")
    history = model.fit(x, y, batch_size=16, epochs=20, verbose=0)
    assert list(history.history) == ["loss"]
    assert history.history["loss"][-1] < 0.01 < history.history["loss"][0]
    loss = model.evaluate(x, y, verbose=0)
    predictions = model.predict(x)
    assert loss == pytest.approx(np.mean((predictions[:, 0] - y) ** 2), rel=1e-3)
    dataset = tf.data.Dataset.from_tensor_slices((x, y.reshape(-1, 1))).batch(32)
    assert model.evaluate(dataset, verbose=0) == pytest.approx(loss, rel=1e-5)
    with pytest.raises(ValueError, match=r"y has targets of shape \(2,\) per example; the last layer gives \(1,\)"):
        model.fit(x, np.stack([y, y], axis=1), verbose=0)
    with pytest.raises(ValueError, match="needs float targets; the Dataset holds class labels"):
        model.fit(tf.data.Dataset.from_tensor_slices((x, np.zeros(256, np.int32))).batch(8), verbose=0)
    classifier = mlp()
    with pytest.raises(ValueError, match="labels are float targets"):
        classifier.fit(tf.data.Dataset.from_tensor_slices((rng.random((8, FEATURES)), rng.random(8))).batch(4))
    with pytest.raises(ValueError, match="accuracy needs loss='sparse_categorical_crossentropy'"):
        model.compile(optimizer="sgd", loss="mse", metrics=["accuracy"])
