# SPDX-License-Identifier: Apache-2.0
"""tf.keras.datasets: Fashion-MNIST from the Debian package, MNIST from IDX files or Keras's npz, the errors
when the files are missing."""

import gzip
import os
import struct

import numpy as np
import pytest

import tensorpool as tf
from tensorpool.keras.datasets import _idx, fashion_mnist, mnist

FASHION_DIR = "/usr/share/datasets/fashion-mnist"
needs_fashion_mnist = pytest.mark.skipif(
    not os.path.isfile(os.path.join(FASHION_DIR, "train-images-idx3-ubyte.gz")),
    reason=f"Fashion-MNIST is not installed in {FASHION_DIR} (apt-get install dataset-fashion-mnist)")


@needs_fashion_mnist
def test_fashion_mnist_shapes_dtypes_and_label_counts():
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
    assert x_train.shape == (60000, 28, 28) and y_train.shape == (60000,)
    assert x_test.shape == (10000, 28, 28) and y_test.shape == (10000,)
    for array in (x_train, y_train, x_test, y_test):
        assert array.dtype == np.uint8
        assert array.flags.c_contiguous and array.flags.writeable
        assert not array.flags.owndata  # numpy views the bytes the reader produced: no copy
    # The dataset is balanced: 6,000 training and 1,000 test images per class.
    assert np.bincount(y_train, minlength=10).tolist() == [6000] * 10
    assert np.bincount(y_test, minlength=10).tolist() == [1000] * 10
    assert y_train[:5].tolist() == [9, 0, 0, 3, 0]  # the first labels of Zalando's file
    assert x_train.max() == 255 and x_train.min() == 0


def write_idx(path, array):
    code = {np.dtype(np.uint8): 0x08}[array.dtype]
    header = struct.pack(">BBBB", 0, 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(path, "wb") as file:
        file.write(header + array.tobytes())


def small_mnist(directory):
    rng = np.random.default_rng(3)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte.gz": np.array([5, 0, 4, 1, 9], np.uint8),
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (2, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte.gz": np.array([7, 2], np.uint8),
    }
    for name, array in arrays.items():
        write_idx(directory / name, array)
    return arrays


def test_mnist_reads_idx_files_from_a_directory(tmp_path, monkeypatch):
    arrays = small_mnist(tmp_path)
    (x_train, y_train), (x_test, y_test) = mnist.load_data(path=tmp_path)
    np.testing.assert_array_equal(x_train, arrays["train-images-idx3-ubyte.gz"])
    np.testing.assert_array_equal(y_train, [5, 0, 4, 1, 9])
    np.testing.assert_array_equal(x_test, arrays["t10k-images-idx3-ubyte.gz"])
    assert y_test.dtype == np.uint8 and y_test.tolist() == [7, 2]
    monkeypatch.setenv("TP_MNIST_DIR", str(tmp_path))
    assert mnist.load_data()[0][1].tolist() == [5, 0, 4, 1, 9]


def test_mnist_reads_keras_npz(tmp_path):
    path = tmp_path / "mnist.npz"
    np.savez(path, x_train=np.ones((2, 28, 28), np.uint8), y_train=np.array([1, 2], np.uint8),
             x_test=np.zeros((1, 28, 28), np.uint8), y_test=np.array([3], np.uint8))
    (x_train, y_train), (_, y_test) = mnist.load_data(path=str(path))
    assert x_train.shape == (2, 28, 28) and y_train.tolist() == [1, 2] and y_test.tolist() == [3]


def test_installed_mnist_when_present():
    if _idx.missing_files(mnist.DEFAULT_DIRECTORY):
        pytest.skip(f"no MNIST files in {mnist.DEFAULT_DIRECTORY} (Debian packages none; see mnist.load_data)")
    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    assert x_train.shape == (60000, 28, 28) and x_test.shape == (10000, 28, 28)
    assert np.bincount(y_train, minlength=10).sum() == 60000


def test_missing_files_name_what_to_install(tmp_path, monkeypatch):
    monkeypatch.delenv("TP_MNIST_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        fashion_mnist.load_data(path=tmp_path / "absent")
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte"):
        mnist.load_data(path=tmp_path)
    with pytest.raises(FileNotFoundError, match="TP_MNIST_DIR"):
        mnist.load_data(path=tmp_path / "nowhere")


def test_malformed_files_raise_naming_the_file(tmp_path):
    small_mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.array([5, 0, 4, 1], np.uint8))  # one label short
    with pytest.raises(Exception, match="train-labels-idx1-ubyte"):
        mnist.load_data(path=tmp_path)
