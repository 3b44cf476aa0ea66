# SPDX-License-Identifier: Apache-2.0
"""tf.config.experimental: memory growth, memory counters, and the older names of tf.config's functions."""

from tensorpool import _runtime
from tensorpool import _tensorpool as _native
from tensorpool.config import (
    LogicalDeviceConfiguration,
    get_logical_device_configuration,
    get_visible_devices,
    list_logical_devices,
    list_physical_devices,
    set_logical_device_configuration,
    set_visible_devices,
)

__all__ = [
    "set_memory_growth",
    "get_memory_growth",
    "get_memory_info",
    "get_memory_usage",
    "reset_memory_stats",
    "VirtualDeviceConfiguration",
    "set_virtual_device_configuration",
    "get_virtual_device_configuration",
    "list_physical_devices",
    "list_logical_devices",
    "get_visible_devices",
    "set_visible_devices",
]

# TensorFlow's older names.
VirtualDeviceConfiguration = LogicalDeviceConfiguration
set_virtual_device_configuration = set_logical_device_configuration
get_virtual_device_configuration = get_logical_device_configuration

def _accelerator(device, what):
    name = _runtime.resolve(device, _runtime.physical_names(), what, "physical")
    if not _runtime.is_accelerator(name):
        raise ValueError("Cannot set memory growth on non-GPU and non-Pluggable devices")
    return name


def set_memory_growth(device, enable):
    """Physical accelerator `device` grows its memory on demand (True) or takes its whole budget at first use
    (False, TensorFlow's default). tensorpool's default is True; TP_ALLOW_GROWTH, when set, overrides both.
    RuntimeError once the devices are initialised; ValueError on cpu, an unknown device, or a device with
    logical devices configured."""
    name = _accelerator(device, "set_memory_growth: device")
    enable = bool(enable)
    with _runtime._lock:
        if name in _runtime._state.logical:
            raise ValueError("Cannot set memory growth on device when virtual devices configured")
        if _runtime._state.growth.get(name) == enable:
            return
        _runtime.check_modifiable("Physical")
        _runtime._state.growth[name] = enable


def get_memory_growth(device):
    """Whether physical accelerator `device` grows its memory on demand: TP_ALLOW_GROWTH when set, else what
    set_memory_growth set, else True (tensorpool grows by default; TensorFlow preallocates)."""
    name = _accelerator(device, "get_memory_growth: device")
    override = _native.env_memory_growth()
    if override is not None:
        return override
    return _runtime._state.growth.get(name, True)


def _logical(device, what):
    return _runtime.resolve(device, _runtime.logical_names(), what, "logical")


def get_memory_info(device):
    """{'current': bytes in use, 'peak': the most in use since the start or reset_memory_stats} of device
    `device` ('sim:0', '/device:SIM:0', 'GPU:0' or a LogicalDevice). Initialises the devices."""
    name = _logical(device, "get_memory_info: device")
    current, peak = _native.device_memory_stats(name)
    return {"current": current, "peak": peak}


def get_memory_usage(device):
    """Bytes in use on `device` (TensorFlow's deprecated form of get_memory_info(device)['current'])."""
    return get_memory_info(device)["current"]


def reset_memory_stats(device):
    """Restarts `device`'s peak from the bytes in use now. Initialises the devices."""
    _native.reset_device_peak(_logical(device, "reset_memory_stats: device"))
