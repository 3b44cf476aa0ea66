# SPDX-License-Identifier: Apache-2.0
"""The four MNIST-format IDX files of a directory as Keras's ((x_train, y_train), (x_test, y_test))."""

import os

from tensorpool import _tensorpool as _native

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def missing_files(directory):
    """The files of FILES found neither gzip-compressed nor plain in `directory`."""
    return [name for name in FILES
            if not os.path.isfile(os.path.join(directory, name + ".gz"))
            and not os.path.isfile(os.path.join(directory, name))]


def load(directory, dataset, how_to_get):
    """Reads `directory`'s four files (uint8 numpy arrays owning the bytes read: no copy); FileNotFoundError
    naming the dataset, the missing files and `how_to_get` when any is missing."""
    directory = os.fspath(directory)
    missing = missing_files(directory)
    if missing:
        where = f"{directory} does not exist" if not os.path.isdir(directory) else \
            f"{directory} lacks {', '.join(name + '[.gz]' for name in missing)}"
        raise FileNotFoundError(f"{dataset}: {where}. {how_to_get}")
    return _native.load_idx_dataset(directory)
