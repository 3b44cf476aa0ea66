# SPDX-License-Identifier: Apache-2.0
"""tf.keras.datasets: Fashion-MNIST and MNIST from the Debian dataset packages."""
