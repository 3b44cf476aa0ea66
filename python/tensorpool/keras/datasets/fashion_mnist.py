# SPDX-License-Identifier: Apache-2.0
"""tf.keras.datasets.fashion_mnist: Zalando's Fashion-MNIST from the Debian package dataset-fashion-mnist."""

import os

from tensorpool import _tensorpool as _native
from tensorpool.keras.datasets import _idx

__all__ = ["load_data"]


def load_data(path=None):
    """((x_train, y_train), (x_test, y_test)): uint8 arrays of shapes (60000, 28, 28), (60000,), (10000, 28, 28)
    and (10000,), labels 0..9, read from the IDX files without a copy into numpy.

    Keras downloads the files; here they come from the directory `path`, else $TP_FASHION_MNIST_DIR, else where
    the Debian package installs them (/usr/share/datasets/fashion-mnist). FileNotFoundError says what to install.
    """
    directory = path or os.environ.get("TP_FASHION_MNIST_DIR") or _native.fashion_mnist_directory
    return _idx.load(directory, "Fashion-MNIST",
                     f"Install the Debian package: `{_native.fashion_mnist_install_command}` (as root), or pass "
                     "load_data(path=DIR) naming a directory with the four IDX files")
