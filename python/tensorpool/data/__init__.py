# SPDX-License-Identifier: Apache-2.0
"""tf.data: Dataset over numpy arrays.

A Dataset holds (features, labels) examples in host memory and the pipeline that turns them into batches, run
by the C++ runtime (data/dataset.hpp): shuffle -> batch -> prefetch. As there, the stages always run in that
order whatever the order of the calls (TensorFlow runs them in call order), and shuffle() permutes the whole
dataset each epoch (TensorFlow's buffer_size is accepted and ignored: a buffer as large as the dataset).
model.fit/evaluate take a batched Dataset; _native() gives the _tensorpool.Dataset they run on.
"""

import random

import numpy as np

from tensorpool import _runtime, _tensorpool

__all__ = ["Dataset", "AUTOTUNE", "experimental"]

AUTOTUNE = -1
_AUTOTUNE_DEPTH = 2  # the prefetch depth AUTOTUNE stands for (`tensorpool train` prefetches 2 batches)


class experimental:  # noqa: N801  (TensorFlow's tf.data.experimental namespace)
    AUTOTUNE = AUTOTUNE


def _features_array(x, where, what="x"):
    """`x` as a C-contiguous numpy array the runtime takes: uint8 (kept as bytes), float32 or float64 (stored as
    float32 once); other numbers become float32. TypeError/ValueError naming `what`."""
    try:
        array = np.asarray(x)
    except Exception as error:  # noqa: BLE001  (numpy raises many kinds for a value that is no array)
        raise TypeError(f"{where}: {what} must be a numpy array (or convertible to one): {error}") from None
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{where}: {what} has dtype {array.dtype}; give numbers (float32, float64 or uint8)")
    if array.ndim < 1 or array.shape[0] == 0:
        raise ValueError(f"{where}: {what} has shape {array.shape}; give at least one example (examples first)")
    if array.ndim > 4:
        raise ValueError(f"{where}: {what} has {array.ndim} dimensions; at most 4 are supported (examples first)")
    if array.dtype not in (np.uint8, np.float32, np.float64):
        array = array.astype(np.float32)
    return np.ascontiguousarray(array)


def _labels_array(y, where, what="y"):
    """`y` as int32 (or uint8) class labels, one per example: integer arrays, or floats holding whole numbers
    (Keras casts them); an (N, 1) column is flattened, as Keras's sparse cross-entropy does."""
    try:
        array = np.asarray(y)
    except Exception as error:  # noqa: BLE001
        raise TypeError(f"{where}: {what} must be a numpy array of class labels: {error}") from None
    if array.ndim == 2 and array.shape[1] == 1:
        array = array.reshape(-1)
    if array.ndim != 1:
        raise ValueError(
            f"{where}: {what} has shape {array.shape}; give one integer class label per example, shape (N,)"
        )
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise TypeError(f"{where}: {what} has dtype {array.dtype} with non-integer values; give class labels")
    elif array.dtype.kind not in "iub":
        raise TypeError(f"{where}: {what} has dtype {array.dtype}; give integer class labels (int32, int64, uint8)")
    if array.dtype == np.uint8:
        return np.ascontiguousarray(array)
    if array.size and (array.min() < 0 or array.max() > np.iinfo(np.int32).max):
        raise ValueError(f"{where}: {what} holds labels outside 0..2^31-1 (min {array.min()}, max {array.max()})")
    return np.ascontiguousarray(array.astype(np.int32))


def _targets_array(y, where, what="y"):
    """`y` as float regression targets, one row per example (float32 or float64; other numbers become
    float32)."""
    try:
        array = np.asarray(y)
    except Exception as error:  # noqa: BLE001
        raise TypeError(f"{where}: {what} must be a numpy array of targets: {error}") from None
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{where}: {what} has dtype {array.dtype}; give numeric targets")
    if array.ndim < 1 or array.ndim > 4:
        raise ValueError(f"{where}: {what} has shape {array.shape}; give one row of targets per example")
    if array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float32)
    return np.ascontiguousarray(array)


class Dataset:
    """Examples and their pipeline; every method returns a new Dataset sharing the examples."""

    def __init__(self, native, batched=False, targets=None):
        self._dataset = native
        self._batched = batched
        self._targets = targets  # float targets: their shape per example; None: integer class labels
        self._epochs_iterated = 0

    @staticmethod
    def from_tensor_slices(tensors):
        """A dataset of the examples of `(features, labels)`: features with examples first (uint8, or numbers
        stored as float32); labels one integer class per example, or float regression targets (float labels:
        one row per example, for a mean-squared-error model)."""
        if not isinstance(tensors, tuple) or len(tensors) != 2:
            raise TypeError(
                "Dataset.from_tensor_slices: give a (features, labels) tuple of arrays with the same first dimension"
            )
        features = _features_array(tensors[0], "Dataset.from_tensor_slices", "features")
        floats = np.asarray(tensors[1]).dtype.kind == "f"
        if floats:
            labels = _targets_array(tensors[1], "Dataset.from_tensor_slices", "labels")
        else:
            labels = _labels_array(tensors[1], "Dataset.from_tensor_slices", "labels")
        if features.shape[0] != labels.shape[0]:
            raise ValueError(
                f"Dataset.from_tensor_slices: features hold {features.shape[0]} examples {features.shape} but "
                f"labels hold {labels.shape[0]}"
            )
        if floats:
            return Dataset(_tensorpool.Dataset.with_targets(features, labels), targets=labels.shape[1:])
        return Dataset(_tensorpool.Dataset.from_numpy(features, labels))

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True):
        """Shuffles the examples each epoch (a permutation that is a function of the seed and the epoch).
        buffer_size is checked and otherwise ignored: the whole dataset is permuted."""
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, (int, np.integer)) or buffer_size == 0:
            raise ValueError(f"Dataset.shuffle: buffer_size {buffer_size!r} must be a positive integer")
        if not reshuffle_each_iteration:
            raise ValueError("Dataset.shuffle: reshuffle_each_iteration=False is not supported; epochs reshuffle")
        if seed is None:
            seed = random.getrandbits(63)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"Dataset.shuffle: seed {seed!r} must be a non-negative integer or None")
        return Dataset(self._dataset.shuffle(int(seed)), self._batched, self._targets)

    def batch(self, batch_size, drop_remainder=False):
        """Batches of `batch_size` examples; the last one smaller unless drop_remainder."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"Dataset.batch: batch_size {batch_size!r} must be a positive integer")
        return Dataset(self._dataset.batch(int(batch_size), bool(drop_remainder)), True, self._targets)

    def prefetch(self, buffer_size):
        """Assembles up to `buffer_size` batches ahead on a background thread (AUTOTUNE: 2)."""
        if buffer_size == AUTOTUNE:
            buffer_size = _AUTOTUNE_DEPTH
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, (int, np.integer)) or buffer_size < 0:
            raise ValueError(f"Dataset.prefetch: buffer_size {buffer_size!r} must be >= 0 or tf.data.AUTOTUNE")
        return Dataset(self._dataset.prefetch(int(buffer_size)), self._batched, self._targets)

    def cardinality(self):
        """Elements per epoch: batches when batched, else examples."""
        return self._dataset.batches_per_epoch if self._batched else self._dataset.size

    def __len__(self):
        return int(self.cardinality())

    def __iter__(self):
        """One epoch's elements as numpy (features float32, labels int32): batches, or single examples when
        unbatched. Each iteration is the next epoch (a shuffled dataset visits a new order)."""
        _runtime.ensure_configured()  # batches are staged on cpu:0: the devices get built now
        epoch = self._epochs_iterated
        self._epochs_iterated += 1
        for features, labels in self._dataset.epoch_batches(epoch):
            if self._batched:
                yield features, labels
            else:
                for row in range(features.shape[0]):
                    yield features[row], labels[row]

    @property
    def example_shape(self):
        return tuple(self._dataset.example_dims)

    def _native(self):
        return self._dataset

    def __repr__(self):
        kind = f"batch {self._dataset.batch_size}" if self._batched else "unbatched"
        return f"<Dataset: {self._dataset.size} examples {self.example_shape}, {kind}>"
