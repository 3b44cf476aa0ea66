# SPDX-License-Identifier: Apache-2.0
"""tf.keras.datasets.mnist: LeCun's handwritten digits, from IDX files on disk (or Keras's mnist.npz)."""

import os

import numpy as np

from tensorpool.keras.datasets import _idx

__all__ = ["load_data"]

# Where the files are looked for when no path is given: beside Fashion-MNIST's Debian directory.
DEFAULT_DIRECTORY = "/usr/share/datasets/mnist"

_HOW_TO_GET = (
    "Debian packages no MNIST dataset (`apt-cache search mnist` finds only dataset-fashion-mnist, which "
    "tf.keras.datasets.fashion_mnist reads). Put train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, "
    f"t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz in {DEFAULT_DIRECTORY}, or set TP_MNIST_DIR to "
    "their directory, or pass load_data(path=DIR) or load_data(path='mnist.npz') (the file Keras downloads)")


def load_data(path=None):
    """((x_train, y_train), (x_test, y_test)) as uint8 arrays, (60000, 28, 28) images and 0..9 labels.

    `path`: a directory holding the four IDX files (read without a copy into numpy), or a Keras mnist.npz;
    default $TP_MNIST_DIR, else /usr/share/datasets/mnist. FileNotFoundError says where to put the files.
    """
    location = os.fspath(path or os.environ.get("TP_MNIST_DIR") or DEFAULT_DIRECTORY)
    if location.endswith(".npz"):
        if not os.path.isfile(location):
            raise FileNotFoundError(f"MNIST: {location} does not exist. {_HOW_TO_GET}")
        with np.load(location) as archive:
            return (archive["x_train"], archive["y_train"]), (archive["x_test"], archive["y_test"])
    return _idx.load(location, "MNIST", _HOW_TO_GET)
