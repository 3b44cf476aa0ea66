# SPDX-License-Identifier: Apache-2.0
"""TensorFlow's exception classes (tf.errors), raised for the C++ runtime's errors.

The extension's translator (src/python/errors.cpp) maps the runtime's typed errors onto these classes:

    tp::InvalidArgument      -> InvalidArgumentError   (also a ValueError)
    tp::OutOfMemoryError     -> ResourceExhaustedError (also a MemoryError), with the out-of-memory report
    other tp::Error          -> InternalError          (also a RuntimeError)

Each class also derives from the Python built-in that fits, so `except ValueError` / `except MemoryError`
handles them as code written without tensorpool expects.
"""

from __future__ import annotations

from typing import Any, Optional

# TensorFlow's error codes (tf.errors.*: the values of tensorflow/core/protobuf/error_codes.proto).
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16


class OpError(Exception):
    """The base of the runtime's errors, as tf.errors.OpError.

    Built either with the message alone, `OpError("...")`, or with TensorFlow's positional arguments,
    `OpError(node_def, op, message, error_code)`.
    """

    _default_code = UNKNOWN

    def __init__(self, *args: Any) -> None:
        if len(args) == 1:
            node_def, op, message, error_code = None, None, args[0], None
        elif 3 <= len(args) <= 4:
            node_def, op, message = args[:3]
            error_code = args[3] if len(args) == 4 else None
        else:
            raise TypeError(f"{type(self).__name__}() takes (message) or (node_def, op, message[, error_code]); "
                            f"got {len(args)} arguments")
        super().__init__(message)
        self._message = str(message)
        self._node_def = node_def
        self._op = op
        self._error_code = self._default_code if error_code is None else error_code

    @property
    def message(self) -> str:
        """The error's text: for a runtime error, the C++ message with its [component] prefix."""
        return self._message

    @property
    def node_def(self) -> Any:
        return self._node_def

    @property
    def op(self) -> Any:
        return self._op

    @property
    def error_code(self) -> int:
        return self._error_code

    def __str__(self) -> str:
        return self._message


class InvalidArgumentError(OpError, ValueError):
    """A value that can never work (a bad size, shape, configuration...): tp::InvalidArgument."""

    _default_code = INVALID_ARGUMENT


class ResourceExhaustedError(OpError, MemoryError):
    """A device's memory could not serve a request: tp::OutOfMemoryError, with its report.

    Attributes (None / empty when the runtime did not know them):
      tensor           what the failed request was for ("dense/kernel", "train/arena"...)
      tensor_kind      its kind ("parameter", "step_arena", "activation"...)
      device           the device that refused ("sim:0")
      allocator        the allocator that refused ("bfc")
      requested_bytes  the size asked for; rounded_bytes after the allocator's rounding
      limit_bytes, in_use_bytes, reserved_bytes, free_bytes
      largest_free_block, fragmentation (0..1), internal_fragmentation_bytes: the fragmentation of the free
                       memory the allocator holds, as tensorpool.memory.memory_stats gives it: 1 - largest free
                       block / (reserved - in use), and the bytes lost to rounding (in use - requested)
      live_tensors     the largest live allocations, largest first: dicts with name, op, kind, shape, dtype,
                       step, bytes
      cause            "fragmentation" (enough free in total, no block large enough), "shortage" (not enough
                       free), "exceeds_limit" (the request alone is larger than the limit) or "held_elsewhere"
                       (the memory below refused though nothing of this stack is in use)
      suggestion       the concrete fix (e.g. the largest batch size that fits) when the workload is known
      report           the full report text (the same as str(error))
    """

    _default_code = RESOURCE_EXHAUSTED

    tensor: Optional[str] = None
    tensor_kind: Optional[str] = None
    device: Optional[str] = None
    allocator: Optional[str] = None
    requested_bytes: Optional[int] = None
    rounded_bytes: Optional[int] = None
    limit_bytes: Optional[int] = None
    in_use_bytes: Optional[int] = None
    reserved_bytes: Optional[int] = None
    free_bytes: Optional[int] = None
    largest_free_block: Optional[int] = None
    fragmentation: Optional[float] = None
    internal_fragmentation_bytes: Optional[int] = None
    cause: Optional[str] = None
    suggestion: Optional[str] = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.live_tensors: list = []

    @property
    def report(self) -> str:
        """The full out-of-memory report, as the CLI prints it."""
        return self.message


class InternalError(OpError, RuntimeError):
    """Any other runtime error (a device refusing an operation, malformed input files...)."""

    _default_code = INTERNAL


class UnavailableError(OpError, RuntimeError):
    """A service (a worker, the parameter server) cannot be reached."""

    _default_code = UNAVAILABLE


def _out_of_memory(message: str, fields: dict) -> ResourceExhaustedError:
    """Builds the ResourceExhaustedError for a tp::OutOfMemoryError (called by the extension's translator)."""
    error = ResourceExhaustedError(None, None, message)
    live = fields.pop("live_tensors", [])
    for name, value in fields.items():
        setattr(error, name, value)
    error.live_tensors = list(live)
    return error


__all__ = [
    "OpError", "InvalidArgumentError", "ResourceExhaustedError", "InternalError", "UnavailableError",
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
]
