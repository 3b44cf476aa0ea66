# SPDX-License-Identifier: Apache-2.0
"""Tensors and dtypes: numpy in and out without copies for host memory, copies from device memory, DLPack,
dtype mapping both ways, lifetimes, and the errors bad values raise."""

import gc
import sys
import time

import numpy as np
import pytest

import tensorpool as tf


# --- dtypes ---

def test_dtype_objects_are_interned_and_named():
    assert tf.constant(np.zeros(2, np.float32)).dtype is tf.float32
    names = {tf.float32: "float32", tf.float16: "float16", tf.bfloat16: "bfloat16", tf.float64: "float64",
             tf.int32: "int32", tf.int64: "int64", tf.uint8: "uint8", tf.bool: "bool"}
    for dtype, name in names.items():
        assert dtype.name == name
        assert dtype == name and not (dtype != name)
        assert tf.as_dtype(name) is dtype
    assert tf.half is tf.float16 and tf.double is tf.float64
    assert tf.float32.size == 4 and tf.bfloat16.size == 2
    assert tf.float32.is_floating and not tf.int32.is_floating and tf.uint8.is_integer
    assert hash(tf.float32) == hash(tf.as_dtype("f32"))


def test_dtypes_map_to_numpy_both_ways():
    for numpy_dtype in (np.float32, np.float16, np.float64, np.int32, np.int64, np.uint8, np.bool_):
        dtype = tf.as_dtype(numpy_dtype)
        assert np.dtype(dtype.as_numpy_dtype) == np.dtype(numpy_dtype)
        t = tf.constant(np.ones(3, numpy_dtype))
        assert t.dtype is dtype
        assert t.numpy().dtype == np.dtype(numpy_dtype)
    # numpy has no bfloat16: it maps to float32.
    assert tf.bfloat16.as_numpy_dtype is np.float32


def test_unknown_dtypes_raise_type_error_naming_the_argument():
    with pytest.raises(TypeError, match="dtype"):
        tf.as_dtype("float8")
    with pytest.raises(TypeError, match="dtype"):
        tf.as_dtype(np.complex64)
    with pytest.raises(TypeError, match="dtype"):
        tf.constant([1.0], dtype=object())
    with pytest.raises(TypeError, match="value"):
        tf.constant(np.zeros(2, np.complex64))
    with pytest.raises(TypeError, match="value"):
        tf.constant(np.zeros(2, np.int16))


# --- numpy in: borrowed, not copied ---

def test_constant_borrows_a_contiguous_array_and_writes_show_both_ways():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = tf.constant(array)
    assert t.shape == (3, 4) and t.dtype is tf.float32 and t.device == "cpu:0" and t.shares_host_memory
    view = t.numpy()
    assert np.shares_memory(view, array)
    array[1, 2] = 100.0  # through the source array ...
    assert t.numpy()[1, 2] == 100.0  # ... read through the tensor
    view[2, 3] = -5.0  # through the tensor's view ...
    assert array[2, 3] == -5.0  # ... read through the source array


def test_borrowed_array_lives_as_long_as_the_tensor():
    array = np.arange(1000, dtype=np.int64)
    before = sys.getrefcount(array)
    t = tf.constant(array)
    assert sys.getrefcount(array) == before + 1  # the tensor's buffer holds the array
    weak_view = array[:10]
    del array
    gc.collect()
    np.testing.assert_array_equal(t.numpy()[:10], np.arange(10))
    assert np.shares_memory(t.numpy(), weak_view)
    array_again = weak_view.base
    count = sys.getrefcount(array_again)
    del t
    gc.collect()
    assert sys.getrefcount(array_again) == count - 1  # the buffer let go of it


def test_view_keeps_the_tensor_alive():
    t = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    view = t.numpy()
    before = sys.getrefcount(t)
    another = t.numpy()
    assert sys.getrefcount(t) == before + 1  # each view holds the Tensor
    del t, another
    gc.collect()
    np.testing.assert_array_equal(view, [[1.0, 2.0], [3.0, 4.0]])
    view[0, 0] = 9.0  # still writable memory of the (now unnamed) tensor
    assert view[0, 0] == 9.0


def test_readonly_arrays_give_readonly_views():
    array = np.arange(4, dtype=np.float32)
    array.flags.writeable = False
    view = tf.constant(array).numpy()
    assert np.shares_memory(view, array)
    assert not view.flags.writeable


def test_non_contiguous_and_converted_values_are_copied_once():
    base = np.arange(20, dtype=np.float32).reshape(4, 5)
    strided = base[:, ::2]
    t = tf.constant(strided)
    np.testing.assert_array_equal(t.numpy(), strided)
    assert not np.shares_memory(t.numpy(), base)
    converted = tf.constant(np.arange(4, dtype=np.int32), dtype=tf.float32)
    assert converted.dtype is tf.float32
    np.testing.assert_array_equal(converted.numpy(), [0, 1, 2, 3])


def test_python_values_take_tensorflow_default_dtypes():
    assert tf.constant(1.5).dtype is tf.float32 and tf.constant(1.5).shape == ()
    assert tf.constant([1, 2, 3]).dtype is tf.int32
    assert tf.constant([1, 2**40]).dtype is tf.int64
    assert tf.constant([True, False]).dtype is tf.bool
    assert tf.constant(np.float64(2.0)).dtype is tf.float64  # numpy values keep their dtype
    assert float(tf.constant(2.5)) == 2.5 and int(tf.constant(7)) == 7
    assert len(tf.constant([[1, 2], [3, 4], [5, 6]])) == 3


def test_shape_argument_reshapes_or_broadcasts():
    assert tf.constant([1, 2, 3, 4], shape=(2, 2)).numpy().tolist() == [[1, 2], [3, 4]]
    assert tf.constant(7.0, shape=[2, 3]).numpy().tolist() == [[7.0] * 3] * 2
    with pytest.raises(ValueError, match="shape"):
        tf.constant([1, 2, 3], shape=(2, 2))
    with pytest.raises(ValueError, match="shape"):
        tf.constant([1, 2], shape=(-1, 2))


def test_bad_values_raise_naming_the_argument():
    with pytest.raises(TypeError, match="value"):
        tf.constant("text")
    with pytest.raises(ValueError, match="value"):
        tf.constant([[1, 2], [3]])
    with pytest.raises(TypeError, match="dtype"):
        tf.constant([1.5, 2.0], dtype=tf.int32)
    with pytest.raises(ValueError, match="shape"):
        tf.constant(np.zeros((2, 3), np.float32)).reshape([4, 2])


def test_empty_and_scalar_tensors():
    empty = tf.constant(np.zeros((0, 3), np.float32))
    assert empty.shape == (0, 3) and empty.numpy().shape == (0, 3)
    scalar = tf.constant(np.float32(3.0))
    assert scalar.shape == () and scalar.numpy() == 3.0
    with pytest.raises(TypeError):
        len(scalar)


def test_convert_to_tensor():
    t = tf.constant([1.0, 2.0])
    assert tf.convert_to_tensor(t) is t
    with pytest.raises(ValueError, match="dtype"):
        tf.convert_to_tensor(t, dtype=tf.int32)
    assert tf.convert_to_tensor([1, 2], dtype_hint=tf.float32).dtype is tf.float32
    assert tf.convert_to_tensor([1.5], dtype_hint=tf.int32).dtype is tf.float32  # the hint does not fit: ignored
    assert tf.is_tensor(t) and not tf.is_tensor(np.zeros(1))


# --- bfloat16 ---

def test_bfloat16_rounds_to_nearest_even_and_comes_out_as_float32():
    values = np.array([1.0, 1.0 / 3.0, -2.5, 1e-3, 65504.0], np.float32)
    t = tf.constant(values, dtype=tf.bfloat16)
    assert t.dtype is tf.bfloat16 and t.nbytes == 2 * values.size
    out = t.numpy()
    assert out.dtype == np.float32
    # Reference: round the float32 bits to their top 16, ties to even.
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    np.testing.assert_array_equal(out, rounded.astype(np.uint32).view(np.float32))
    assert out[1] != values[1]  # 1/3 is not a bfloat16


# --- device memory: copies on the stream ---

def test_device_tensors_copy_to_numpy():
    host = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    on_device = host.to("sim:0")
    assert on_device.device == "sim:0" and not on_device.shares_host_memory
    copy = on_device.numpy()
    np.testing.assert_array_equal(copy, host.numpy())
    copy[0, 0] = 50.0  # a copy: the device tensor is unchanged
    assert on_device.numpy()[0, 0] == 0.0
    np.testing.assert_array_equal(on_device.to("cpu:0").numpy(), host.numpy())
    with pytest.raises(ValueError, match="copy"):
        on_device.__array__(copy=False)
    np.testing.assert_array_equal(np.asarray(on_device), host.numpy())
    with pytest.raises(ValueError):  # a tp::InvalidArgument: the device does not exist
        host.to("sim:99")


# --- DLPack ---

def test_dlpack_shares_host_memory():
    array = np.arange(8, dtype=np.int32)
    t = tf.constant(array)
    assert t.__dlpack_device__() == (1, 0)
    imported = np.from_dlpack(t)
    assert np.shares_memory(imported, array)
    imported[3] = 99
    assert t.numpy()[3] == 99
    copied = np.from_dlpack(t, copy=True)
    assert not np.shares_memory(copied, array)
    # numpy arrays read through DLPack by tensorpool as well (any object with __dlpack__).
    again = tf.constant(imported)
    assert np.shares_memory(again.numpy(), array)


def test_dlpack_of_device_memory_copies_unless_told_not_to():
    on_device = tf.constant(np.arange(4, dtype=np.float32)).to("sim:1")
    np.testing.assert_array_equal(np.from_dlpack(on_device), [0, 1, 2, 3])
    with pytest.raises(BufferError, match="sim:1"):
        on_device.__dlpack__(copy=False)


def test_dlpack_exports_bfloat16_as_it_is():
    capsule = tf.constant([1.0, 2.0], dtype=tf.bfloat16).__dlpack__()
    assert type(capsule).__name__ == "PyCapsule"


def test_borrowed_arrays_are_released_when_a_stream_drops_the_last_reference():
    # The copy to sim:0 runs on the device's stream thread, which holds the source buffer until the copy has
    # read it; dropping the host tensor at once may leave that thread the last holder, without the GIL. The
    # array must still be released, exactly once.
    arrays = [np.full(4096, i, dtype=np.float32) for i in range(50)]
    before = [sys.getrefcount(a) for a in arrays]
    copies = [tf.constant(a).to("sim:0") for a in arrays]
    for index, copy in enumerate(copies):
        assert copy.numpy()[0] == index  # waits for the copy
    for _ in range(1000):  # let the main thread run any release the stream threads left pending
        if [sys.getrefcount(a) for a in arrays] == before:
            break
        time.sleep(0.001)
    assert [sys.getrefcount(a) for a in arrays] == before
