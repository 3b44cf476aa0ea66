# SPDX-License-Identifier: Apache-2.0
"""tf.keras.callbacks: the Callback base, History, ModelCheckpoint and BackupAndRestore.

fit() runs the C++ loop (train/fit.hpp) with the GIL released; _Dispatcher is what its C++ bridge calls at the
hooks. Per-batch hooks (on_train_batch_end / on_batch_end) cost the loop a call into Python per step, so they
are called only when some callback defines them, and then fit runs one step at a time (the callback sees the
variables after exactly that step). Setting `self.model.stop_training = True` stops at that hook.
"""

import os
import shutil
import weakref

import numpy as np

__all__ = ["Callback", "History", "ModelCheckpoint", "BackupAndRestore"]


class Callback:
    def __init__(self):
        self._model = None
        self.params = {}

    # The model is held weakly: model.history refers to its History, and a cycle back would keep the model's
    # device memory until the garbage collector runs.
    @property
    def model(self):
        return None if self._model is None else self._model()

    @model.setter
    def model(self, model):
        self._model = None if model is None else weakref.ref(model)

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        self.on_batch_end(batch, logs=logs)

    def on_batch_end(self, batch, logs=None):
        pass


def _has_batch_hook(callback):
    cls = type(callback)
    return cls.on_train_batch_end is not Callback.on_train_batch_end or cls.on_batch_end is not Callback.on_batch_end


class History(Callback):
    """Records each epoch's logs: .history {'loss': [...], 'accuracy': [...], 'val_loss': ...} and .epoch."""

    def __init__(self):
        super().__init__()
        self.history = {}
        self.epoch = []

    def on_train_begin(self, logs=None):
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(value)


class ModelCheckpoint(Callback):
    """Saves the model (or its weights) at each epoch end into `filepath` (formatted with epoch and the logs,
    e.g. 'ckpt-{epoch:02d}'), as an atomic checkpoint directory model.save / load_model read."""

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False, save_weights_only=False,
                 mode="auto", save_freq="epoch"):
        super().__init__()
        if save_freq != "epoch":
            raise ValueError("ModelCheckpoint: save_freq='epoch' only (BackupAndRestore saves every N steps)")
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"ModelCheckpoint: mode {mode!r} is not 'auto', 'min' or 'max'")
        self.filepath = os.fspath(filepath)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self._greater = mode == "max" or (mode == "auto" and "acc" in monitor)
        self.best = -np.inf if self._greater else np.inf

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        path = self.filepath.format(epoch=epoch + 1, **logs)
        if self.save_best_only:
            current = logs.get(self.monitor)
            if current is None:
                raise KeyError(f"ModelCheckpoint: monitor '{self.monitor}' is not in the logs ({sorted(logs)})")
            better = current > self.best if self._greater else current < self.best
            if not better:
                return
            self.best = current
        if self.verbose:
            print(f"\nEpoch {epoch + 1}: saving model to {path}")
        if self.save_weights_only:
            self.model.save_weights(path)
        else:
            self.model.save(path)


class BackupAndRestore(Callback):
    """fit() checkpoints into `backup_dir` (at each epoch end, or every `save_freq` steps) and, when a
    checkpoint is there, resumes from it at the same step: fit's own atomic checkpoints (train/checkpoint.hpp).
    After a run that completes, the directory is deleted (delete_checkpoint=True), as Keras."""

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True):
        super().__init__()
        if not backup_dir:
            raise ValueError("BackupAndRestore: give a backup_dir")
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"BackupAndRestore: save_freq {save_freq!r} must be 'epoch' or a positive integer")
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = save_freq
        self.delete_checkpoint = delete_checkpoint

    def _every_steps(self):
        return 0 if self.save_freq == "epoch" else self.save_freq

    def _after_success(self):
        if self.delete_checkpoint:
            shutil.rmtree(self.backup_dir, ignore_errors=True)


class _Dispatcher:
    """What the C++ bridge (src/python/train.cpp) calls; each method returns model.stop_training."""

    def __init__(self, callbacks, model, params, metric_key, print_epochs):
        self.print_epochs = print_epochs  # print each epoch's logs (where the C++ progress bar does not)
        self.callbacks = callbacks
        self.model = model
        self.params = params
        self.metric_key = metric_key  # the accuracy's key in the logs, or None without metrics
        for callback in callbacks:
            callback.set_model(model)
            callback.set_params(params)
        self.batch_hooks = any(_has_batch_hook(callback) for callback in callbacks)

    def _on_train_begin(self, epochs, initial_epoch, batches_per_epoch, samples_per_epoch):
        self.params.update(epochs=epochs, steps=batches_per_epoch, initial_epoch=initial_epoch)
        for callback in self.callbacks:
            callback.on_train_begin({})
        return self.model.stop_training

    def _on_epoch_begin(self, epoch):
        for callback in self.callbacks:
            callback.on_epoch_begin(epoch, {})
        return self.model.stop_training

    def _on_batch_end(self, epoch, batch, step, loss, accuracy):
        logs = {"loss": loss}
        if self.metric_key is not None and accuracy is not None:
            logs[self.metric_key] = accuracy
        for callback in self.callbacks:
            callback.on_train_batch_end(batch, logs)
        return self.model.stop_training

    def _on_epoch_end(self, epoch, loss, accuracy, val_loss, val_accuracy, seconds, samples_per_second):
        logs = {"loss": loss}
        if self.metric_key is not None and accuracy is not None:
            logs[self.metric_key] = accuracy
        if val_loss is not None:
            logs["val_loss"] = val_loss
            if self.metric_key is not None and val_accuracy is not None:
                logs["val_" + self.metric_key] = val_accuracy
        if self.print_epochs:
            shown = " - ".join(f"{key}: {value:.4f}" for key, value in logs.items())
            print(f"Epoch {epoch + 1}/{self.params['epochs']} - {seconds:.0f}s - {shown}", flush=True)
        for callback in self.callbacks:
            callback.on_epoch_end(epoch, logs)
        return self.model.stop_training

    def _on_train_end(self):
        for callback in self.callbacks:
            callback.on_train_end({})
