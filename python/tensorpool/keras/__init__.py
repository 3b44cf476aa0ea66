# SPDX-License-Identifier: Apache-2.0
"""tf.keras: Sequential models, Dense layers, optimizers, losses, metrics and callbacks.

docs/python.md ("tf.keras") lists what matches Keras and what differs.
"""

from tensorpool.keras import callbacks, datasets, layers, losses, metrics, mixed_precision, models, optimizers
from tensorpool.keras.layers import Input, InputLayer
from tensorpool.keras.models import Sequential, load_model

__all__ = [
    "Input",
    "InputLayer",
    "Sequential",
    "callbacks",
    "datasets",
    "layers",
    "load_model",
    "losses",
    "metrics",
    "mixed_precision",
    "models",
    "optimizers",
]
