# SPDX-License-Identifier: Apache-2.0
"""Per-device memory: summaries, snapshots and estimates (tensorpool.memory).

tensorpool's own module (TensorFlow has no counterpart; PyTorch's torch.cuda.memory_summary and
memory_snapshot are the model). Everything here comes from the library's reports, so it says what the CLI
says: `memory_summary(model=...)` is the "Memory summary" `tensorpool train` prints, `estimate()` is
`tensorpool estimate`'s per-tensor table, `memory_snapshot()` is snapshot.json.

Device names are ours ("sim:0", "cpu:0") or TensorFlow's ("/physical_device:SIM:0", "GPU:0").
"""

from __future__ import annotations

import json
import operator
from typing import Any, Dict, List, Optional

from tensorpool import _runtime
from tensorpool import _tensorpool as _native

__all__ = ["memory_summary", "memory_stats", "memory_snapshot", "estimate", "Estimate"]

# Keras's default batch size (Model.fit's batch_size=None), used when a summary is asked without one.
_DEFAULT_BATCH_SIZE = 32


def _device_names(device) -> List[str]:
    """Our names of the devices asked for: all when `device` is None, else the one named."""
    _runtime.ensure_configured()
    names = list(_native.memory_device_names())
    if device is None:
        return names
    return [_runtime.resolve(device, names)]


def _compiled(model, strategy=None):
    """The compiled C++ model (_tensorpool.Sequential) of a tensorpool.keras model, compiled for `strategy`
    when it is not the model's own; ValueError when the model is not compiled."""
    native_class = getattr(_native, "Sequential", ())
    native = getattr(model, "_native", model if isinstance(model, native_class) else None)
    if strategy is not None and strategy is not getattr(model, "_strategy", None):
        compile_native = getattr(model, "_compile_native", None)
        if compile_native is None:
            raise TypeError(f"model must be a tensorpool.keras model to estimate it under a strategy, not "
                            f"{type(model).__name__}")
        return compile_native(strategy)
    if native is None:
        if not hasattr(model, "_native"):
            raise TypeError(f"model must be a tensorpool.keras model, not {type(model).__name__}")
        raise ValueError("model is not compiled: call model.compile(...) before asking for its memory")
    return native


def _batch(batch_size, model=None) -> int:
    if batch_size is None:
        batch_size = getattr(model, "_last_batch_size", None) or _DEFAULT_BATCH_SIZE
    if isinstance(batch_size, bool):
        raise TypeError("batch_size must be an int, not bool")
    try:
        batch_size = operator.index(batch_size)
    except TypeError:
        raise TypeError(f"batch_size must be an int, not {type(batch_size).__name__}") from None
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, not {batch_size}")
    return batch_size


def memory_summary(device=None, *, model=None, batch_size: Optional[int] = None) -> str:
    """The memory summary as text.

    Without `model`: each device's table (or the one `device` names): bytes in use, reserved and requested,
    the largest free block, external and internal fragmentation, allocations, out-of-memory errors, retries;
    current, peak and totals.
    With a compiled `model`: the summary `tensorpool train` prints after training, for the model's devices
    (or the one `device` names): peak in use, reserved, planned peak, external and internal fragmentation, the
    live variables by kind, the step's arena and its largest tensors. `batch_size` is the step's (default: the
    last fit's, else 32).
    """
    if model is None:
        return "".join(_native.memory_device_summary(name) for name in _device_names(device))
    text, _ = _model_summary(model, batch_size, device)
    return text


def memory_stats(device=None, *, model=None, batch_size: Optional[int] = None) -> Dict[str, Dict[str, Any]]:
    """memory_summary()'s dict form: device name -> its figures.

    Without `model`: the memory stack's counters (bytes_in_use, peak_bytes_in_use, bytes_reserved,
    bytes_limit, largest_free_block, fragmentation, internal_fragmentation_bytes, num_allocs, num_ooms...).
    With `model`: the keys of `tensorpool train --summary-json`'s devices (peak_in_use_bytes,
    planned_peak_bytes, fragmentation, internal_fragmentation_bytes, parameter_bytes, optimizer_state_bytes,
    arena_bytes, largest_tensors...). fragmentation is 1 - largest free block / (reserved - in use), 0..1;
    internal_fragmentation_bytes is in use - requested (docs/memory.md, "Fragmentation").
    """
    if model is None:
        return {name: dict(_native.memory_device_stats(name)) for name in _device_names(device)}
    _, devices = _model_summary(model, batch_size, device)
    return {entry["device"]: entry for entry in devices}


def _model_summary(model, batch_size, device):
    native = _compiled(model)
    _runtime.ensure_configured()
    text, encoded = _native.memory_model_summary(native, _batch(batch_size, model))
    devices = json.loads(encoded)
    if device is None:
        return text, devices
    name = _runtime.resolve(device, [entry["device"] for entry in devices], what="device of the model")
    kept = [entry for entry in devices if entry["device"] == name]
    # The text has a header line, then one block per device starting "  <name>:".
    lines = text.splitlines(keepends=True)
    blocks, current = [], None
    for line in lines[2:]:
        if line.startswith("  ") and not line.startswith("    "):
            current = [line]
            blocks.append(current)
        elif current is not None:
            current.append(line)
    chosen = [block for block in blocks if block[0].startswith(f"  {name}:")]
    return "".join(lines[:2]) + "".join("".join(block) for block in chosen), kept


def memory_snapshot(device=None, reason: str = "requested") -> Dict[str, Any]:
    """Every device's memory (or the one `device` names) as snapshot.json's dict: segments with their
    blocks, live tensors with their tags, and, for devices a running tensorpool.profiler records, the events,
    peak breakdown and high-water marks (docs/profiling.md)."""
    if not isinstance(reason, str):
        raise TypeError(f"reason must be a str, not {type(reason).__name__}")
    return json.loads(_native.memory_snapshot_json(_device_names(device), reason))


class Estimate:
    """The per-tensor memory estimate of one training step (`tensorpool estimate`), from the static plan:
    nothing is allocated on the devices.

    rows     one dict per tensor: device, name, kind (parameter, optimizer_state, weight_gradient,
             step_arena, activation, activation_gradient, other), op, shape, dtype, placement (variable,
             arena, in arena, in place, shared, fed in place), bytes, allocated_bytes (after rounding)
    devices  one dict per device: variable_bytes, arena_bytes, lower_bound_bytes, planned_peak_bytes,
             planned_peak_allocated_bytes, limit_bytes, fits, bytes_by_kind, arena_live_at_peak...
    totals   device name -> planned_peak_bytes (what a real step's peak of requested bytes equals)
    fits     every device serves every allocation (replayed through its allocator)
    str()    the table `tensorpool estimate` prints
    """

    def __init__(self, encoded: str, text: str) -> None:
        data = json.loads(encoded)
        self.batch_size: int = data["batch_size"]
        self.rows: List[Dict[str, Any]] = data["tensors"]
        self.devices: List[Dict[str, Any]] = data["devices"]
        self._text = text

    @property
    def totals(self) -> Dict[str, int]:
        return {device["device"]: device["planned_peak_bytes"] for device in self.devices}

    @property
    def fits(self) -> bool:
        return all(device["fits"] for device in self.devices)

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        peaks = ", ".join(f"{name}: {peak}" for name, peak in self.totals.items())
        return f"<Estimate batch_size={self.batch_size} rows={len(self.rows)} planned_peak_bytes={{{peaks}}}>"


def estimate(model, batch_size: int, strategy=None) -> Estimate:
    """The per-tensor estimate of one training step of a compiled model at global `batch_size`, on its
    devices (or compiled again for `strategy` when given and not the model's own): parameters, optimizer
    state, gradients and the step arena's activations, with bytes before and after the allocator's
    rounding, and per device the planned peak and whether it fits the device's limit."""
    _runtime.ensure_configured()
    native = _compiled(model, strategy)
    batch = _batch(batch_size)
    encoded, text = _native.memory_estimate(native, batch)
    return Estimate(encoded, text)
