# SPDX-License-Identifier: Apache-2.0
"""Tensors and dtypes: numpy in and out, without copies where the memory allows.

tensorpool.float32, ... are the runtime's DType objects (interned: `t.dtype is tf.float32`). constant() and
convert_to_tensor() make tensors on cpu:0 (TensorFlow places them on its default device; here the runtime
moves them where a step needs them). A C-contiguous numpy array of a supported dtype is borrowed, not copied:
the tensor's memory is the array's, and writes through either show in the other. numpy() of a host tensor
is a view that keeps the tensor alive; of a tensor in device memory (sim:N) it is a copy.

dtypes map both ways as numpy names them: float32, float16, float64, int32, int64, uint8, bool. numpy has no
bfloat16 (and ml_dtypes is no dependency): bfloat16 tensors come out as float32 (widened exactly, a copy) and
go in from any float values, rounded to nearest even.
"""

import numpy as np

from tensorpool import _runtime
from tensorpool import _tensorpool as _native

__all__ = [
    "DType",
    "Tensor",
    "as_dtype",
    "bfloat16",
    "bool",
    "constant",
    "convert_to_tensor",
    "double",
    "float16",
    "float32",
    "float64",
    "half",
    "int32",
    "int64",
    "is_tensor",
    "uint8",
]

DType = _native.DType
Tensor = _native.Tensor

float32 = _native.float32
float16 = half = _native.float16
bfloat16 = _native.bfloat16
float64 = double = _native.float64
int32 = _native.int32
int64 = _native.int64
uint8 = _native.uint8
bool = _native.bool  # noqa: A001  (TensorFlow's name: tf.bool)

_ALIASES = {"half": "float16", "double": "float64", "float": "float32"}
_BY_NUMPY = {np.dtype(d.as_numpy_dtype): d for d in (float32, float16, float64, int32, int64, uint8, bool)}
_ACCEPTED = "float32, float16, bfloat16, float64, int32, int64, uint8 or bool"


def as_dtype(value, argument="dtype"):
    """The DType `value` names: a DType, a name ("float32", "f32", "half"), or a numpy dtype or scalar type.

    Raises TypeError naming `argument` for anything else (as tf.as_dtype does).
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        try:
            return _native.dtype_from_name(_ALIASES.get(value, value))
        except ValueError:
            raise TypeError(f"{argument}: {value!r} is not a tensorpool dtype; use {_ACCEPTED}") from None
    try:
        numpy_dtype = np.dtype(value)
    except TypeError:
        raise TypeError(f"{argument}: {value!r} is not a dtype; use {_ACCEPTED}") from None
    found = _BY_NUMPY.get(numpy_dtype)
    if found is None:
        raise TypeError(f"{argument}: numpy dtype {numpy_dtype} has no tensorpool dtype; use {_ACCEPTED}")
    return found


def is_tensor(value):
    return isinstance(value, Tensor)


def _as_array(value):
    """`value` as a numpy array, sharing its memory where it is an array already (numpy, DLPack, buffer)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, Tensor):
        return value.numpy()
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        try:
            return np.from_dlpack(value)
        except (BufferError, RuntimeError, TypeError) as error:
            raise TypeError(f"value: cannot read {type(value).__name__} through DLPack on the host: {error}") from None
    try:
        array = np.asarray(value)
    except ValueError as error:  # ragged nested lists
        raise ValueError(f"value: cannot make a tensor of {type(value).__name__}: {error}") from None
    if array.dtype.kind in "OUSVMmc":
        raise TypeError(f"value: cannot make a tensor of {array.dtype} values ({type(value).__name__}); "
                        f"use numbers of {_ACCEPTED}")
    return array


def _default_dtype(array, from_python):
    """TensorFlow's inference: Python floats become float32 and ints int32 (int64 when they do not fit);
    numpy arrays keep their dtype."""
    if from_python and array.dtype.kind == "f":
        return float32
    if from_python and array.dtype.kind in "iu":
        info = np.iinfo(np.int32)
        fits = array.size == 0 or (array.min() >= info.min and array.max() <= info.max)
        return int32 if fits else int64
    found = _BY_NUMPY.get(array.dtype)
    if found is None:
        raise TypeError(f"value: numpy dtype {array.dtype} has no tensorpool dtype; pass dtype= one of {_ACCEPTED}")
    return found


def _check_cast(array, dtype):
    if array.dtype.kind == "f" and not dtype.is_floating and array.size > 0:
        raise TypeError(f"dtype: cannot convert {array.dtype} values to {dtype.name} without losing the fraction; "
                        f"round them first (numpy.rint) or pass a float dtype")


def _shaped(array, shape):
    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"shape: expected a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"shape: dimensions must be >= 0, got {dims}")
    count = int(np.prod(dims, dtype=np.int64))
    if array.size == count:
        return array.reshape(dims)
    if array.size == 1:
        return np.broadcast_to(array.reshape(()), dims)
    raise ValueError(f"shape: value has {array.size} elements, shape {dims} has {count}")


def constant(value, dtype=None, shape=None, name=None):
    """A cpu:0 tensor of `value` (a scalar, nested lists, a numpy array or any DLPack array).

    A C-contiguous numpy array whose dtype is `dtype` (or any supported dtype when dtype is None) is borrowed
    without a copy; anything else is converted once. `shape` reshapes (same count) or broadcasts a single value.
    `name` is accepted for TensorFlow's signature. Raises TypeError naming `value` or `dtype` for types that do
    not convert, ValueError naming `value` or `shape` for shapes that do not fit.
    """
    del name
    _runtime.ensure_configured()
    from_python = not isinstance(value, (np.ndarray, np.generic, Tensor)) and not hasattr(value, "__dlpack__")
    array = _as_array(value)
    target = as_dtype(dtype) if dtype is not None else _default_dtype(array, from_python)
    _check_cast(array, target)
    if shape is not None:
        array = _shaped(array, shape)
    if target == bfloat16:
        return Tensor._from_float32_as_bfloat16(np.array(array, dtype=np.float32, order="C", copy=None))
    array = np.array(array, dtype=target.as_numpy_dtype, order="C", copy=None)
    return Tensor._from_array(array, readonly=not array.flags.writeable)


def convert_to_tensor(value, dtype=None, dtype_hint=None, name=None):
    """`value` itself when it is a Tensor (of `dtype`, if given), else constant(value, dtype).

    dtype_hint is used when dtype is None and the value converts to it; a Tensor of another dtype than `dtype`
    raises ValueError, as TensorFlow does.
    """
    if isinstance(value, Tensor):
        if dtype is not None and as_dtype(dtype) != value.dtype:
            raise ValueError(f"dtype: conversion requested {as_dtype(dtype).name} for a tensor of {value.dtype.name}")
        return value
    if dtype is None and dtype_hint is not None:
        try:
            return constant(value, dtype=dtype_hint, name=name)
        except TypeError:
            pass
    return constant(value, dtype=dtype, name=name)
