# SPDX-License-Identifier: Apache-2.0
"""tf.keras.datasets: Fashion-MNIST and MNIST from the Debian dataset packages."""

from tensorpool.keras.datasets import fashion_mnist, mnist

__all__ = ["fashion_mnist", "mnist"]
