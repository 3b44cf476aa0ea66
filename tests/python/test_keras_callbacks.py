# SPDX-License-Identifier: Apache-2.0
"""tf.keras callbacks: hooks, exceptions, Ctrl-C, stop_training, ModelCheckpoint and BackupAndRestore."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import tensorpool as tf

FEATURES = 8


def data(examples=96):
    rng = np.random.default_rng(5)
    x = rng.random((examples, FEATURES))
    return x, (x[:, 0] > 0.5).astype(np.int32)


def model():
    result = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(16, activation="relu", input_shape=(FEATURES,)),
            tf.keras.layers.Dense(2, activation="softmax"),
        ]
    )
    result.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return result


class Recorder(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.calls = []

    def on_train_begin(self, logs=None):
        self.calls.append(("train_begin",))

    def on_epoch_begin(self, epoch, logs=None):
        self.calls.append(("epoch_begin", epoch))

    def on_train_batch_end(self, batch, logs=None):
        self.calls.append(("batch_end", batch, sorted(logs)))

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append(("epoch_end", epoch, sorted(logs)))

    def on_train_end(self, logs=None):
        self.calls.append(("train_end",))


def test_hooks_run_in_keras_order_with_logs():
    x, y = data()
    recorder = Recorder()
    net = model()
    net.fit(x, y, batch_size=32, epochs=2, validation_data=(x, y), callbacks=[recorder], verbose=0)
    batch = ["accuracy", "loss"]
    epoch = ["accuracy", "loss", "val_accuracy", "val_loss"]
    expected = [("train_begin",)]
    for index in range(2):
        expected += [("epoch_begin", index)] + [("batch_end", b, batch) for b in range(3)]
        expected += [("epoch_end", index, epoch)]
    assert recorder.calls == expected + [("train_end",)]
    assert recorder.model is net and recorder.params["epochs"] == 2 and recorder.params["steps"] == 3


class Boom(Exception):
    pass


def test_a_raising_callback_stops_training_with_its_exception():
    x, y = data()
    seen = []

    class Raiser(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(batch)
            if batch == 1:
                raise Boom("stop here")

    net = model()
    with pytest.raises(Boom, match="stop here"):
        net.fit(x, y, batch_size=16, epochs=3, callbacks=[Raiser()], verbose=0)
    assert seen == [0, 1]
    loss, accuracy = net.evaluate(x, y, verbose=0)  # the model is intact and usable
    assert np.isfinite(loss) and all(np.all(np.isfinite(w)) for w in net.get_weights())


def test_sigint_from_a_callback_raises_keyboard_interrupt():
    x, y = data()
    seen = []

    class Interrupter(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(batch)
            if batch == 2:
                os.kill(os.getpid(), signal.SIGINT)

    net = model()
    with pytest.raises(KeyboardInterrupt):
        net.fit(x, y, batch_size=16, epochs=3, callbacks=[Interrupter()], verbose=0)
    assert seen[-1] in (2, 3) and len(seen) <= 4
    assert np.isfinite(net.evaluate(x, y, verbose=0)[0])


def test_sigint_from_another_thread_stops_the_cpp_loop():
    # One epoch of 200000 one-example steps (seconds of work) and no Python callback: only the C++ bridge's
    # signal check at each step's end can stop it early.
    rng = np.random.default_rng(1)
    x = rng.random((200000, FEATURES))
    y = (x[:, 0] > 0.5).astype(np.int32)
    net = model()
    net.fit(x[:64], y[:64], epochs=1, verbose=0)
    before = net.get_weights()
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            net.fit(x, y, batch_size=1, epochs=1, verbose=0)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 8  # the whole epoch takes far longer
    after = net.get_weights()
    assert not np.array_equal(before[0], after[0])  # steps ran and their updates are kept
    assert all(np.all(np.isfinite(w)) for w in after)
    assert np.isfinite(net.evaluate(x[:64], y[:64], verbose=0)[0])


def test_stop_training_ends_fit_normally():
    x, y = data()

    class StopAfterTwo(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                self.model.stop_training = True

    history = model().fit(x, y, epochs=10, callbacks=[StopAfterTwo()], verbose=0)
    assert history.epoch == [0, 1]


def test_model_checkpoint_saves_loadable_models(tmp_path):
    x, y = data()
    net = model()
    pattern = str(tmp_path / "model-{epoch:02d}")
    net.fit(x, y, epochs=2, callbacks=[tf.keras.callbacks.ModelCheckpoint(pattern)], verbose=0)
    assert sorted(os.listdir(tmp_path)) == ["model-01", "model-02"]
    restored = tf.keras.models.load_model(tmp_path / "model-02")
    np.testing.assert_array_equal(restored.predict(x), net.predict(x))
    best = tf.keras.callbacks.ModelCheckpoint(str(tmp_path / "best"), monitor="loss", save_best_only=True,
                                              save_weights_only=True)
    net.fit(x, y, epochs=2, callbacks=[best], verbose=0)
    assert os.path.isdir(tmp_path / "best") and best.best < np.inf


def test_backup_and_restore_resumes_at_the_same_step(tmp_path):
    x, y = data(96)
    backup = str(tmp_path / "backup")
    reference = model()
    reference.fit(x, y, batch_size=16, epochs=2, verbose=0)

    class CrashAtStep(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps = 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if self.steps == 8:  # epoch 1, batch 1; the backup holds step 6 (save_freq=3)
                raise Boom("crash")

    crashed = model()
    with pytest.raises(Boom):
        crashed.fit(x, y, batch_size=16, epochs=2, verbose=0,
                    callbacks=[tf.keras.callbacks.BackupAndRestore(backup, save_freq=3), CrashAtStep()])
    assert os.path.isfile(os.path.join(backup, "latest"))
    resumed = model()  # as a restarted program builds it
    history = resumed.fit(x, y, batch_size=16, epochs=2, verbose=0,
                          callbacks=[tf.keras.callbacks.BackupAndRestore(backup, save_freq=3)])
    assert resumed._fit_result["resumed_from_step"] == 6 and resumed._fit_result["steps"] == 12
    assert history.epoch == [1]
    for a, b in zip(resumed.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not os.path.exists(backup)  # deleted after the run completed, as Keras
