# SPDX-License-Identifier: Apache-2.0
"""tf.distribute: the distribution strategies and their scopes.

Each strategy describes where a model's replicas run; `_native()` gives the C++ description
(_tensorpool.Strategy, train/strategy.hpp) that a model's compile() hands to the runtime. Keras models record
get_strategy() when they are created, so a model built inside `with strategy.scope():` is replicated as the
strategy says (its variables mirrored on every replica's device). Strategies that list devices initialise the
devices' configuration (as TensorFlow's do): tf.config's setters raise RuntimeError afterwards.
"""

import contextlib
import threading

from tensorpool import _runtime
from tensorpool import _tensorpool as _native_module

__all__ = [
    "Strategy",
    "MirroredStrategy",
    "OneDeviceStrategy",
    "MultiWorkerMirroredStrategy",
    "CrossDeviceOps",
    "NcclAllReduce",
    "HierarchicalCopyAllReduce",
    "ReductionToOneDevice",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
    "experimental",
]


class _Scopes(threading.local):
    def __init__(self):
        self.stack = []  # the strategies of the enclosing scopes, innermost last


_scopes = _Scopes()


# --- cross-device ops: how mirrored replicas' gradients are summed ---


class CrossDeviceOps:
    """The collective a MirroredStrategy sums gradients with (its `all_reduce`)."""

    _all_reduce = "ring"

    def __repr__(self):
        return f"{type(self).__name__}()"


class NcclAllReduce(CrossDeviceOps):
    """NCCL where it can serve (cuda devices each on a GPU of its own), else tensorpool's ring: all_reduce "auto"."""

    _all_reduce = "auto"

    def __init__(self, num_packs=1):
        self.num_packs = num_packs


class HierarchicalCopyAllReduce(CrossDeviceOps):
    """The ring all-reduce between the replicas' devices."""

    def __init__(self, num_packs=1):
        self.num_packs = num_packs


class ReductionToOneDevice(CrossDeviceOps):
    """Every replica's gradients summed on the first device, then copied back."""

    _all_reduce = "reduce_to_one"

    def __init__(self, reduce_to_device=None, accumulation_fn=None):
        if reduce_to_device is not None or accumulation_fn is not None:
            raise ValueError(
                "ReductionToOneDevice: reduce_to_device and accumulation_fn are not supported (the sum is made on "
                "the strategy's first device); leave them unset"
            )


def _shard_of(shard):
    if isinstance(shard, _native_module.Shard):
        return shard
    if not isinstance(shard, str):
        raise TypeError(f"shard must be 'auto', 'none', 'optimizer' or 'gradients', not {type(shard).__name__}")
    return _native_module.parse_shard(shard)


def _bucket_bytes(bucket_bytes):
    if bucket_bytes is None:
        return _native_module.Strategy.DEFAULT_BUCKET_BYTES
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes = {bucket_bytes!r}; give a positive number of bytes (e.g. 25 << 20)")
    return bucket_bytes


def _device_names(devices, what):
    """Our names of `devices` (names in any accepted form or LogicalDevices), checked to exist and to be
    distinct; initialises the devices' configuration."""
    if isinstance(devices, str) or hasattr(devices, "tp_name"):
        devices = [devices]
    existing = _runtime.logical_names()
    names = []
    for device in devices:
        name = _runtime.resolve(device, existing, what, "logical")
        if name in names:
            raise ValueError(f"{what} {device!r} ({name}) is listed twice; list each device once (e.g. sim:0, sim:1)")
        names.append(name)
    if not names:
        raise ValueError(f"{what}: the list is empty; give at least one device, or None for every accelerator")
    return names


def _accelerators_or_cpu():
    """The visible accelerators of the first kind there is (the simulated devices, else the opencl ones: a
    strategy mirrors over devices of one kind, as TensorFlow over its GPUs), else cpu:0."""
    names = [name for name in _runtime.logical_names() if _runtime.is_accelerator(name)]
    if not names:
        return ["cpu:0"]
    return [name for name in names if _runtime.kind_of(name) == _runtime.kind_of(names[0])]


# --- strategies ---


class Strategy:
    """The base of the strategies: scope(), num_replicas_in_sync, and _native()."""

    def __init__(self, tp_devices):
        self._tp_devices = list(tp_devices)

    @property
    def tp_devices(self):
        """Our names of this process's replicas' devices ("sim:0", ...)."""
        return list(self._tp_devices)

    @property
    def num_replicas_in_sync(self):
        """Replicas whose gradients are summed at each step."""
        return len(self._tp_devices)

    def _native(self):
        """This strategy as the C++ runtime's description (a fresh _tensorpool.Strategy)."""
        raise NotImplementedError(f"{type(self).__name__} has no native form")

    @contextlib.contextmanager
    def scope(self):
        """Within it, get_strategy() returns this strategy, and Keras models created are replicated by it.
        Entering the scope of a different strategy inside it raises ValueError, as TensorFlow."""
        stack = _scopes.stack
        if stack and stack[-1] is not self and not isinstance(stack[-1], _DefaultStrategy):
            if not isinstance(self, _DefaultStrategy):
                raise ValueError(f"Mixing different tf.distribute.Strategy objects: {self!r} is not {stack[-1]!r}")
        stack.append(self)
        try:
            yield self
        finally:
            stack.pop()

    def __repr__(self):
        return f"{type(self).__name__}(devices={self._tp_devices})"


class _DefaultStrategy(Strategy):
    """The strategy outside every scope: one replica on the first accelerator (cpu:0 without one)."""

    def __init__(self):
        super().__init__([])

    @property
    def tp_devices(self):
        return _accelerators_or_cpu()[:1]

    @property
    def num_replicas_in_sync(self):
        return 1

    def _native(self):
        _runtime.ensure_configured()
        return _native_module.Strategy.one_device("")

    def scope(self):
        # Inside another strategy's scope the default's scope is that strategy's (TensorFlow's rule).
        stack = _scopes.stack
        if stack:
            return stack[-1].scope()
        return Strategy.scope(self)

    def __repr__(self):
        return "_DefaultStrategy()"


_default = _DefaultStrategy()


class OneDeviceStrategy(Strategy):
    """One replica on `device` ('sim:0', '/device:SIM:0', 'GPU:0', '/cpu:0' or a LogicalDevice)."""

    def __init__(self, device):
        super().__init__(_device_names([device], "OneDeviceStrategy: device"))

    def _native(self):
        _runtime.ensure_configured()
        return _native_module.Strategy.one_device(self._tp_devices[0])


class MirroredStrategy(Strategy):
    """One replica per device, variables mirrored, gradients summed every step. `devices`: when None, every
    visible accelerator of the first kind (the simulated devices; the opencl ones without any; else cpu:0).
    cross_device_ops: NcclAllReduce (the default: NCCL over cuda devices each on a GPU of its own, else the
    ring), HierarchicalCopyAllReduce (the ring) or ReductionToOneDevice.
    tensorpool's own keywords: `shard` ('auto', the default: ZeRO-1 where the Adam update folds the all-reduce
    in, else none; 'none', 'optimizer': ZeRO-1, 'gradients': ZeRO-2) and `bucket_bytes` (the all-reduce
    buckets)."""

    def __init__(self, devices=None, cross_device_ops=None, *, shard="auto", bucket_bytes=None):
        if cross_device_ops is not None and not isinstance(cross_device_ops, CrossDeviceOps):
            raise TypeError(
                "MirroredStrategy: cross_device_ops must be a tf.distribute.CrossDeviceOps (NcclAllReduce, "
                f"HierarchicalCopyAllReduce, ReductionToOneDevice), not {type(cross_device_ops).__name__}"
            )
        self._all_reduce = (cross_device_ops or NcclAllReduce())._all_reduce
        self._shard = _shard_of(shard)
        self._bucket_bytes = _bucket_bytes(bucket_bytes)
        if devices is None:
            names = _accelerators_or_cpu()
        else:
            names = _device_names(devices, "MirroredStrategy: device")
        super().__init__(names)

    def _native(self):
        _runtime.ensure_configured()
        strategy = _native_module.Strategy.mirrored(self._tp_devices, self._all_reduce, self._shard)
        strategy.bucket_bytes = self._bucket_bytes
        return strategy


class MultiWorkerMirroredStrategy(Strategy):
    """Mirrored across the processes of an `mpirun` job (our MPI world), each worker with its local devices:
    one by default (the first accelerator: sim:0; cpu:0 without one), or `devices` (tensorpool's keyword).
    Every worker feeds the same global batch; gradients are summed over every replica of every worker.
    Without mpirun it is a job of one worker. cluster_resolver and communication_options are TensorFlow's
    and must be left unset (the job is mpirun's)."""

    def __init__(self, cluster_resolver=None, communication_options=None, *, devices=None, shard="none",
                 bucket_bytes=None):
        if cluster_resolver is not None or communication_options is not None:
            raise ValueError(
                "MultiWorkerMirroredStrategy: cluster_resolver and communication_options are not supported; "
                "the workers are the processes of an mpirun job (mpirun -np 2 python train.py)"
            )
        workers = _native_module.launcher_world_size() or 1
        if workers > 1 and not _native_module.mpi_built():
            raise RuntimeError(
                f"MultiWorkerMirroredStrategy: this process is one of {workers} launched by mpirun, but tensorpool "
                "was built without MPI; install an MPI (scripts/install-deps) and rebuild"
            )
        self._workers = workers
        self._shard = _shard_of(shard)
        self._bucket_bytes = _bucket_bytes(bucket_bytes)
        if devices is None:
            names = _accelerators_or_cpu()[:1]
        else:
            names = _device_names(devices, "MultiWorkerMirroredStrategy: device")
        super().__init__(names)

    @property
    def num_replicas_in_sync(self):
        """Replicas of the whole job: workers x local devices."""
        return self._workers * len(self._tp_devices)

    def _native(self):
        _runtime.ensure_configured()
        strategy = _native_module.Strategy.multi_worker(self._tp_devices, self._shard)
        strategy.bucket_bytes = self._bucket_bytes
        return strategy


def get_strategy():
    """The strategy of the innermost `with strategy.scope():`, else the default strategy (one replica on the
    first accelerator)."""
    stack = _scopes.stack
    return stack[-1] if stack else _default


def has_strategy():
    """Whether a strategy's scope (other than the default strategy's) is entered."""
    return bool(_scopes.stack) and not isinstance(_scopes.stack[-1], _DefaultStrategy)


def in_cross_replica_context():
    """Always True: tensorpool runs replicas inside fit(), never in user code (no strategy.run)."""
    return True


from tensorpool.distribute import experimental  # noqa: E402  (uses Strategy above)
