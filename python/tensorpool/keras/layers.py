# SPDX-License-Identifier: Apache-2.0
"""tf.keras.layers: Dense (activations relu, softmax, linear) and the input layer (train/layers.hpp).

Layer names follow Keras: "dense", "dense_1", ... unique in the process, or the `name=` given; the variables
are "<name>/kernel" and "<name>/bias" (kernel Glorot-uniform, bias zeros, as Keras).
"""

import itertools

from tensorpool.keras import mixed_precision

__all__ = ["Layer", "Dense", "InputLayer", "Input"]

_counters = {}


def _unique_name(prefix):
    count = _counters.setdefault(prefix, itertools.count())
    index = next(count)
    return prefix if index == 0 else f"{prefix}_{index}"


def _shape_tuple(shape, where):
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"{where}: shape must be a tuple of positive integers such as (784,), not {shape!r}") from None
    if not shape or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise ValueError(f"{where}: shape {shape!r} must be a non-empty tuple of positive integers such as (784,)")
    return shape


class Layer:
    def __init__(self, name=None, prefix="layer"):
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"{type(self).__name__}: name must be a non-empty str")
        self.name = name or _unique_name(prefix)

    def get_config(self):
        return {"name": self.name}


class InputLayer(Layer):
    """The model's input: examples of `shape` (without the batch dimension)."""

    def __init__(self, shape=None, batch_size=None, name=None, input_shape=None, **kwargs):
        if shape is None:
            shape = input_shape
        if shape is None:
            raise ValueError("InputLayer: give shape=, e.g. InputLayer(shape=(784,))")
        if kwargs:
            raise TypeError(f"InputLayer: unsupported arguments {sorted(kwargs)}")
        super().__init__(name, "input_layer")
        self.input_shape = _shape_tuple(shape, "InputLayer")
        self.batch_size = batch_size

    @property
    def shape(self):
        return (self.batch_size,) + self.input_shape

    def get_config(self):
        return {"name": self.name, "shape": list(self.input_shape)}


def Input(shape=None, batch_size=None, name=None, dtype=None):  # noqa: N802  (Keras's name)
    """The input of a Sequential model: Sequential([Input(shape=(784,)), Dense(...)])."""
    if dtype not in (None, "float32"):
        raise ValueError(f"Input: dtype {dtype!r}; inputs are float32")
    return InputLayer(shape=shape, batch_size=batch_size, name=name)


_ACTIVATIONS = ("linear", "relu", "softmax")


class Dense(Layer):
    """Dense(units, activation=None|'relu'|'softmax'|'linear', use_bias=True, input_shape=None, dtype=None)."""

    def __init__(self, units, activation=None, use_bias=True, input_shape=None, name=None, dtype=None,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        if kwargs:
            raise TypeError(f"Dense: unsupported arguments {sorted(kwargs)}")
        if isinstance(units, bool) or not isinstance(units, int) or units < 1:
            raise ValueError(f"Dense: units {units!r} must be a positive integer")
        if activation is None:
            activation = "linear"
        if not isinstance(activation, str) or activation not in _ACTIVATIONS:
            raise ValueError(f"Dense: activation {activation!r} is not 'relu', 'softmax' or 'linear' (or None)")
        if kernel_initializer != "glorot_uniform" or bias_initializer != "zeros":
            raise ValueError("Dense: only kernel_initializer='glorot_uniform' and bias_initializer='zeros'")
        super().__init__(name, "dense")
        self.units = units
        self.activation = activation
        self.use_bias = bool(use_bias)
        self.input_shape = None if input_shape is None else _shape_tuple(input_shape, "Dense: input_shape")
        # The policy when the layer is created (Keras's rule), or its own dtype=.
        self.dtype_policy = mixed_precision.global_policy() if dtype is None else mixed_precision._policy_of(dtype)

    def count_params(self, inputs):
        return inputs * self.units + (self.units if self.use_bias else 0)

    def get_config(self):
        return {"name": self.name, "units": self.units, "activation": self.activation, "use_bias": self.use_bias,
                "dtype": self.dtype_policy.name}

    def __repr__(self):
        return f"<Dense {self.name}: {self.units} {self.activation}>"
