# SPDX-License-Identifier: Apache-2.0
"""tf.config: devices, visibility, logical splits and memory growth.

As TensorFlow: configure before the devices are initialised (by list_logical_devices, a strategy, a model's
compile, get_memory_info), after which the setters raise RuntimeError with TensorFlow's messages. Devices are
named as TensorFlow names them (`.name`, `.device_type`) and as tensorpool does (`.tp_name`: "sim:0").
device_type "GPU" selects every accelerator (the sim and opencl devices). docs/python.md lists the differences.
"""

from tensorpool import _runtime

__all__ = [
    "PhysicalDevice",
    "LogicalDevice",
    "LogicalDeviceConfiguration",
    "list_physical_devices",
    "list_logical_devices",
    "get_visible_devices",
    "set_visible_devices",
    "get_logical_device_configuration",
    "set_logical_device_configuration",
    "experimental",
]


class _Device:
    __slots__ = ("name", "device_type", "tp_name")

    def __init__(self, name, device_type, tp_name):
        self.name = name
        self.device_type = device_type
        self.tp_name = tp_name

    def __eq__(self, other):
        return type(self) is type(other) and self.name == other.name and self.device_type == other.device_type

    def __hash__(self):
        return hash((type(self).__name__, self.name, self.device_type))

    def __iter__(self):  # TensorFlow's devices are (name, device_type) namedtuples
        return iter((self.name, self.device_type))

    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r}, device_type={self.device_type!r})"


class PhysicalDevice(_Device):
    """A physical device: name '/physical_device:SIM:0', device_type 'SIM', tp_name 'sim:0'."""

    __slots__ = ()
    _level = "physical"

    @classmethod
    def _of(cls, tp_name):
        return cls(_runtime.physical_tf_name(tp_name), _runtime.tf_type(_runtime.kind_of(tp_name)), tp_name)


class LogicalDevice(_Device):
    """A device the runtime places work on: name '/job:localhost/replica:0/task:0/device:SIM:0', device_type
    'SIM', tp_name 'sim:0'."""

    __slots__ = ()
    _level = "logical"

    @classmethod
    def _of(cls, tp_name):
        return cls(_runtime.logical_tf_name(tp_name), _runtime.tf_type(_runtime.kind_of(tp_name)), tp_name)


class LogicalDeviceConfiguration:
    """One logical device carved from a physical one: `memory_limit` in MiB (as TensorFlow), required.
    experimental_priority and experimental_device_ordinal are TensorFlow's and must be left unset."""

    def __init__(self, memory_limit=None, experimental_priority=None, experimental_device_ordinal=None):
        if experimental_priority is not None or experimental_device_ordinal is not None:
            raise ValueError(
                "LogicalDeviceConfiguration: experimental_priority and experimental_device_ordinal are not "
                "supported by tensorpool; leave them unset"
            )
        self.memory_limit = memory_limit
        self.experimental_priority = None
        self.experimental_device_ordinal = None

    def __eq__(self, other):
        return isinstance(other, LogicalDeviceConfiguration) and self.memory_limit == other.memory_limit

    def __hash__(self):
        return hash(self.memory_limit)

    def __repr__(self):
        return f"LogicalDeviceConfiguration(memory_limit={self.memory_limit})"


def _filtered(names, device_type):
    return [name for name in names if _runtime.matches_type(name, device_type)]


def list_physical_devices(device_type=None):
    """The physical devices (cpu:0, the simulated devices, the OpenCL devices), of `device_type` ('CPU',
    'SIM', 'OPENCL', or 'GPU' for every accelerator) when given. Does not initialise the devices."""
    return [PhysicalDevice._of(name) for name in _filtered(_runtime.physical_names(), device_type)]


def list_logical_devices(device_type=None):
    """The devices work is placed on (after set_visible_devices and the logical splits). Initialises the
    devices' configuration: later changes raise RuntimeError."""
    return [LogicalDevice._of(name) for name in _filtered(_runtime.logical_names(), device_type)]


def get_visible_devices(device_type=None):
    """The visible physical devices (cpu:0 is always visible)."""
    return [PhysicalDevice._of(name) for name in _filtered(_runtime.visible_names(), device_type)]


def set_visible_devices(devices, device_type=None):
    """Makes only `devices` (PhysicalDevices or names) visible; with `device_type`, only the visibility of
    devices of that type changes. The visible accelerators are renumbered from 0 in the order given (as
    CUDA_VISIBLE_DEVICES). cpu:0 stays visible. RuntimeError once the devices are initialised."""
    if not isinstance(devices, (list, tuple)):
        devices = [devices]
    physical = _runtime.physical_names()
    with _runtime._lock:
        names = []
        for device in devices:
            name = _runtime.resolve(device, physical, "set_visible_devices: device", "physical")
            if name in names:
                raise ValueError(f"set_visible_devices: {device!r} is listed twice; list each device once")
            names.append(name)
        current = _runtime.visible_names()
        if device_type is not None:
            names = [name for name in current if not _runtime.matches_type(name, device_type)] + names
        wanted = ["cpu:0"] + [name for name in names if name != "cpu:0"]
        if wanted == current:
            return
        _runtime.check_modifiable("Visible")
        _runtime.check_plan(visible=wanted)
        _runtime._state.visible = wanted[1:]


def get_logical_device_configuration(device):
    """The LogicalDeviceConfigurations set for physical `device`, or None."""
    name = _runtime.resolve(
        device, _runtime.physical_names(), "get_logical_device_configuration: device", "physical"
    )
    limits = _runtime._state.logical.get(name)
    if limits is None:
        return None
    return [LogicalDeviceConfiguration(memory_limit=bytes_ // _runtime.MIB) for bytes_ in limits]


def set_logical_device_configuration(device, logical_devices):
    """Splits physical `device` into one logical device per LogicalDeviceConfiguration, each with its
    memory_limit (MiB); the limits together must fit in the device's memory. RuntimeError once the devices
    are initialised; ValueError for a bad device or limit."""
    name = _runtime.resolve(
        device, _runtime.physical_names(), "set_logical_device_configuration: device", "physical"
    )
    if isinstance(logical_devices, LogicalDeviceConfiguration):
        logical_devices = [logical_devices]
    if not isinstance(logical_devices, (list, tuple)) or not logical_devices:
        raise ValueError(
            "set_logical_device_configuration: logical_devices must be a non-empty list of "
            f"LogicalDeviceConfiguration, not {logical_devices!r}"
        )
    limits = []
    for index, config in enumerate(logical_devices):
        if not isinstance(config, LogicalDeviceConfiguration):
            raise TypeError(
                f"set_logical_device_configuration: logical_devices[{index}] is a {type(config).__name__}, not "
                "a LogicalDeviceConfiguration"
            )
        limit = config.memory_limit
        if limit is None:
            raise ValueError(
                f"Setting memory limit is required for {_runtime.tf_type(_runtime.kind_of(name))} virtual devices: "
                f"logical_devices[{index}].memory_limit is None; give it in MiB (e.g. memory_limit=256)"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ValueError(
                f"set_logical_device_configuration: logical_devices[{index}].memory_limit = {limit!r}; give each "
                "logical device a positive whole number of MiB (e.g. memory_limit=256)"
            )
        limits.append(limit * _runtime.MIB)
    with _runtime._lock:
        if _runtime._state.logical.get(name) == limits:
            return
        _runtime.check_modifiable("Virtual")
        if _runtime._state.growth.get(name):
            raise ValueError(
                f"Cannot set virtual device configuration on {device!r} when memory growth is enabled; set the "
                "logical devices instead of memory growth"
            )
        logical = dict(_runtime._state.logical)
        logical[name] = limits
        _runtime.check_plan(logical=logical)
        _runtime._state.logical = logical


from tensorpool.config import experimental  # noqa: E402  (uses the classes above)
