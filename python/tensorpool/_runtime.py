# SPDX-License-Identifier: Apache-2.0
"""The process's devices: configured once, before the first is materialised.

The C++ DeviceManager (device/device_manager.hpp) builds the devices at its first use and refuses changes after
that. tf.config's settings (visible devices, logical splits, memory growth) are kept here, keyed by physical
device as TensorFlow keys them, checked against the C++ plan at each call, and handed to the manager once, by
ensure_configured(): the moment TensorFlow would initialise its context. From then on they are frozen and
tf.config's setters raise RuntimeError with TensorFlow's messages.

Names: ours ("cpu:0", "sim:1", "opencl:0") are what the C++ runtime takes. resolve() also reads TensorFlow's
("/physical_device:SIM:0", "/job:localhost/replica:0/task:0/device:SIM:0", "/device:SIM:0", "SIM:0", "/cpu:0")
and "GPU:n", which names the n-th accelerator (sim or opencl devices, in list order).
"""

import re
import threading

from tensorpool import _tensorpool as _native

# Simulated devices a process gets when TP_SIM_DEVICES is unset: as `tensorpool train` defaults to
# (--devices sim:0,sim:1).
DEFAULT_SIM_DEVICES = 2
MIB = 1 << 20

_lock = threading.RLock()  # guards every field below


class _State:
    def __init__(self):
        self.sim = None  # (count, memory bytes) of the simulated devices, fixed at the first look
        self.env_visible = None  # TP_VISIBLE_DEVICES as read then (names), or None
        self.configured = False  # ensure_configured() handed the settings to the manager
        self.visible = None  # physical names (accelerators) in the order given; None: the environment's
        self.logical = {}  # physical name -> memory limits in bytes of its logical devices
        self.growth = {}  # physical name -> bool


_state = _State()


# --- names ---

_TF_PREFIX = re.compile(r"^(/job:[^/]*)?(/replica:\d+)?(/task:\d+)?/?(device:|physical_device:)?", re.IGNORECASE)


def tf_type(kind):
    """TensorFlow's device_type of one of our kinds: "sim" -> "SIM"."""
    return kind.upper()


def kind_of(name):
    return name.split(":", 1)[0]


def physical_tf_name(name):
    kind, index = name.split(":", 1)
    return f"/physical_device:{tf_type(kind)}:{index}"


def logical_tf_name(name):
    kind, index = name.split(":", 1)
    return f"/job:localhost/replica:0/task:0/device:{tf_type(kind)}:{index}"


def is_accelerator(name):
    return kind_of(name) != "cpu"


def matches_type(name, device_type):
    """Whether device `name` is of TensorFlow device_type `device_type` ("GPU" matches every accelerator)."""
    if device_type is None:
        return True
    if not isinstance(device_type, str):
        raise TypeError(f"device_type must be a str such as 'SIM', 'CPU' or 'GPU', not {type(device_type).__name__}")
    wanted = device_type.strip().lower()
    if wanted == "gpu":
        return is_accelerator(name)
    return kind_of(name) == wanted


_KINDS = ("cpu", "sim", "opencl", "cuda", "gpu")


def _parse(spec):
    """(kind, index) of a device name in any accepted form; ValueError naming it when it is none."""
    text = spec.strip()
    rest = _TF_PREFIX.sub("", text, count=1)
    match = re.fullmatch(r"([A-Za-z_]+)(?::(\d+))?", rest)
    if match is None or match.group(1).lower() not in _KINDS:
        raise ValueError(
            f"device {spec!r} is not a device name; write ours ('sim:0', 'cpu:0', 'opencl:0') or TensorFlow's "
            "('/physical_device:SIM:0', '/device:SIM:0', 'GPU:0': the first accelerator)"
        )
    return match.group(1).lower(), int(match.group(2) or 0)


def missing_device_message(spec, name, existing, what="device"):
    """The error for a device that does not exist: the devices there are, and the setting that would give it
    (the advice `tensorpool train --devices` gives, device/missing_device.hpp), or the tf.config call that hides
    it."""
    kind = kind_of(name)
    if kind == "gpu":
        accelerators = ", ".join(device for device in existing if is_accelerator(device)) or "none"
        return (
            f"{what} {spec!r} does not exist: 'GPU:n' names the n-th accelerator, and this process has "
            f"{accelerators}"
        )
    if kind != "cpu" and _state.visible is not None and name in physical_names():
        return (
            f"{what} {spec!r} ({name}) does not exist: this process has {', '.join(existing)}; "
            f"tf.config.set_visible_devices hides it: add {physical_tf_name(name)} there"
        )
    return f"{what} {spec!r} ({name}) does not exist: {_native.missing_device_advice(name, list(existing))}"


def resolve(spec, names, what="device", level=None):
    """Our name of `spec` (a str in any accepted form, or a PhysicalDevice / LogicalDevice) among `names`;
    ValueError naming it and the devices there are when it is not one of them. `level` ("physical" or
    "logical"), when given, refuses a device object of the other level (after a reordering or a split, physical
    sim:1 need not be logical sim:1)."""
    tp_name = getattr(spec, "tp_name", None)
    spec_level = getattr(spec, "_level", None)
    if level is not None and spec_level is not None and spec_level != level:
        raise ValueError(
            f"{what} {spec!r} is a {spec_level} device; pass a {level} one (tf.config.list_{level}_devices()) or "
            "a name"
        )
    if tp_name is not None:
        if tp_name not in names:
            raise ValueError(missing_device_message(getattr(spec, "name", tp_name), tp_name, names, what))
        return tp_name
    if not isinstance(spec, str):
        raise TypeError(f"{what} must be a device name (str) or a tf.config device, not {type(spec).__name__}")
    kind, index = _parse(spec)
    if kind == "gpu":
        accelerators = [name for name in names if is_accelerator(name)]
        if index < len(accelerators):
            return accelerators[index]
        raise ValueError(missing_device_message(spec, f"gpu:{index}", names, what))
    name = f"{kind}:{index}"
    if name not in names:
        raise ValueError(missing_device_message(spec, name, names, what))
    return name


# --- configuration ---


def _sim():
    """(count, memory bytes) of the simulated devices; on the first call, gives the manager the default count
    (unless TP_SIM_DEVICES sets it or the devices exist already)."""
    with _lock:
        if _state.sim is None:
            env = _native.device_env()
            count = env["sim_devices"]
            if not env["sim_devices_set"] and not _native.devices_initialised():
                count = DEFAULT_SIM_DEVICES
                _native.set_sim_devices(count, env["sim_memory_bytes"])
            _state.sim = (count, env["sim_memory_bytes"])
            _state.env_visible = env["visible_devices"]
        return _state.sim


def physical_names():
    """The physical devices (cpu:0, sim:N, opencl:N), before the visible list and logical splits."""
    count, memory = _sim()
    return list(_native.physical_devices(count, memory))


def visible_names():
    """The visible physical devices: cpu:0, then the accelerators set visible (the environment's
    TP_VISIBLE_DEVICES, else all), in their order."""
    with _lock:
        physical = physical_names()
        visible = _state.visible
        if visible is None:
            visible = _state.env_visible
        if visible is None:
            return physical
        return ["cpu:0"] + [name for name in visible if name != "cpu:0"]


def _renumbered(visible):
    """Physical name -> the id it has once visible (renumbered per kind in visible order, as the manager does)."""
    counts = {}
    ids = {}
    for name in visible:
        kind = kind_of(name)
        ids[name] = f"{kind}:{counts.get(kind, 0)}"
        counts[kind] = counts.get(kind, 0) + 1
    return ids


def _logical_plan(visible, logical):
    """[(logical name, physical name)] of a configuration, in the manager's order."""
    counts = {}
    plan = []
    for name in visible:
        kind = kind_of(name)
        for _ in logical.get(name, [None]):
            plan.append((f"{kind}:{counts.get(kind, 0)}", name))
            counts[kind] = counts.get(kind, 0) + 1
    return plan


def check_plan(visible=None, logical=None):
    """Checks a configuration (a visible list of physical names, splits by physical name) as the manager will
    at materialisation; returns its devices. tensorpool.errors.InvalidArgumentError (a ValueError) says what
    is wrong."""
    with _lock:
        count, memory = _sim()
        visible_list = visible if visible is not None else _state.visible
        if visible_list is None:
            visible_list = _state.env_visible
        logical = _state.logical if logical is None else logical
        shown = visible_names() if visible is None else ["cpu:0"] + [n for n in visible if n != "cpu:0"]
        ids = _renumbered(shown)
        splits = [(ids[name], limits) for name, limits in logical.items() if name in ids]
        accelerators = None if visible_list is None else [name for name in visible_list if name != "cpu:0"]
        return list(_native.plan_devices(count, memory, accelerators, splits))


def initialized():
    """Whether the devices' configuration is frozen (handed to the manager, or the devices already built)."""
    with _lock:
        return _state.configured or _native.devices_initialised()


def ensure_configured():
    """Hands tf.config's settings (or the defaults: 2 simulated devices unless TP_SIM_DEVICES is set) to the
    C++ device manager, once; call it before anything materialises a device. Idempotent."""
    with _lock:
        if _state.configured:
            return
        _sim()
        if _native.devices_initialised():
            # Built by a path that did not come here first: the settings can no longer apply.
            if _state.visible is not None or _state.logical or _state.growth:
                raise RuntimeError(
                    "Physical devices cannot be modified after being initialized "
                    "(the devices were built before tf.config's settings could apply)"
                )
            _state.configured = True
            return
        check_plan()
        visible = visible_names()
        if _state.visible is not None:
            _native.set_visible_devices([name for name in visible if name != "cpu:0"])
        ids = _renumbered(visible)
        for name, limits in _state.logical.items():
            if name in ids:
                _native.set_logical_devices(ids[name], limits)
        for logical_name, physical in _logical_plan(visible, _state.logical):
            if physical in _state.growth:
                _native.set_memory_growth(logical_name, _state.growth[physical])
        _state.configured = True


def logical_names():
    """The devices (after the visible list and splits); freezes the configuration, as TensorFlow's
    list_logical_devices initialises its context."""
    ensure_configured()
    return list(_native.planned_devices())


def check_modifiable(what):
    """RuntimeError with TensorFlow's message once the configuration is frozen; `what` is "Physical",
    "Visible" or "Virtual"."""
    if initialized():
        raise RuntimeError(f"{what} devices cannot be modified after being initialized")


# The default simulated devices are given to the manager at import, so that even a path that builds the devices
# without ensure_configured() gets the process's devices `tensorpool train` would. A bad TP_SIM_DEVICES or
# TP_SIM_MEMORY must not break the import: the next call that needs the devices raises it, naming the variable.
try:
    _sim()
except ValueError:
    pass
