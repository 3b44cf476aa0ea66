# SPDX-License-Identifier: Apache-2.0
"""tf.distribute.experimental: the parameter-server strategy (asynchronous, train/parameter_server.hpp)."""

from tensorpool import _runtime
from tensorpool import _tensorpool as _native_module
from tensorpool.distribute import MultiWorkerMirroredStrategy, Strategy, _accelerators_or_cpu, _device_names

__all__ = ["ParameterServerStrategy", "MultiWorkerMirroredStrategy"]


class ParameterServerStrategy(Strategy):
    """Asynchronous training: the variables and the optimizer state live on `parameter_device` (cpu:0 by
    default); each worker device runs its own loop (pull the variables, compute its batch's gradients, push
    them), and the server applies each worker's gradients as they arrive. `workers`: the worker devices (every
    accelerator by default); `max_staleness` K: a worker waits while it is more than K pushes ahead of the
    slowest (None: unbounded). Under mpirun, rank 0 serves and ranks 1.. are the workers. TensorFlow's
    cluster_resolver and variable_partitioner must be left unset. num_replicas_in_sync is 1, as TensorFlow's:
    no step's gradients are summed across workers."""

    def __init__(self, cluster_resolver=None, variable_partitioner=None, *, workers=None, parameter_device="cpu:0",
                 max_staleness=None):
        if cluster_resolver is not None or variable_partitioner is not None:
            raise ValueError(
                "ParameterServerStrategy: cluster_resolver and variable_partitioner are not supported; give the "
                "worker devices (workers=['sim:0', 'sim:1']) and the parameter_device, or run under mpirun"
            )
        if max_staleness is not None and (
            isinstance(max_staleness, bool) or not isinstance(max_staleness, int) or max_staleness < 0
        ):
            raise ValueError(
                f"ParameterServerStrategy: max_staleness = {max_staleness!r}; give a whole number >= 0 (0: workers "
                "move in rounds) or None (unbounded)"
            )
        names = _accelerators_or_cpu() if workers is None else _device_names(workers, "ParameterServerStrategy: worker")
        self._parameter_device = _device_names([parameter_device], "ParameterServerStrategy: parameter_device")[0]
        self._max_staleness = max_staleness
        super().__init__(names)

    @property
    def parameter_device(self):
        """Our name of the device holding the variables."""
        return self._parameter_device

    @property
    def num_replicas_in_sync(self):
        return 1

    def _native(self):
        _runtime.ensure_configured()
        return _native_module.Strategy.parameter_server(self._tp_devices, self._parameter_device, self._max_staleness)

    def __repr__(self):
        return (
            f"ParameterServerStrategy(workers={self._tp_devices}, parameter_device={self._parameter_device!r}, "
            f"max_staleness={self._max_staleness})"
        )
