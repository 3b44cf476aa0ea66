# SPDX-License-Identifier: Apache-2.0
"""The memory profiler as a context manager (tensorpool.profiler).

    with tensorpool.profiler.profile("logs/run1") as prof:
        model.fit(x, y, epochs=1)
    print(prof.summary)

records every allocation and free of the devices while the block runs and, when it ends, writes into the
directory the files `tensorpool train --profile DIR` writes (the same library code, report/profile_output):
snapshot.json, trace.json (Chrome trace), trace-<device>.csv (one per device, for `tensorpool replay`),
report.html and summary.txt (docs/profiling.md). A refused allocation inside the block also writes
oom_snapshot.json at the moment of the failure, while everything that was live is still live.

TensorFlow's names work too: tensorpool.profiler.experimental.start(logdir) / stop(), and
tensorpool.profiler.experimental.Profile(logdir) as a context manager (they write our files, not
TensorBoard's).
"""

from __future__ import annotations

import json
import os
import sys
import types
from typing import Any, Dict, List, Optional

from tensorpool import _runtime
from tensorpool import _tensorpool as _native

__all__ = ["profile", "start", "stop", "experimental", "OOM_SNAPSHOT_FILE"]

OOM_SNAPSHOT_FILE = "oom_snapshot.json"
_DEFAULT_MAX_EVENTS = 1 << 16


class profile:
    """Records the devices' memory while the `with` block runs and writes the report files into `logdir`.

    devices                the devices to record (names: ours or TensorFlow's); default all (cpu:0 always)
    max_events_per_device  the ring of recorded events per device; older ones are dropped and counted

    Attributes after the block: `summary` (summary.txt's text), `files` (the paths written).
    """

    def __init__(self, logdir, devices=None, *, max_events_per_device: int = _DEFAULT_MAX_EVENTS) -> None:
        if not isinstance(logdir, (str, os.PathLike)):
            raise TypeError(f"logdir must be a path (str or os.PathLike), not {type(logdir).__name__}")
        if isinstance(max_events_per_device, bool) or not isinstance(max_events_per_device, int):
            raise TypeError(f"max_events_per_device must be an int, not {type(max_events_per_device).__name__}")
        if max_events_per_device < 1:
            raise ValueError(f"max_events_per_device must be >= 1, not {max_events_per_device}")
        if isinstance(devices, str):
            devices = [devices]
        self.logdir = os.fspath(logdir)
        self._devices = None if devices is None else list(devices)
        self._max_events = max_events_per_device
        self._profiler = None
        self.summary: Optional[str] = None
        self.files: List[str] = []

    def __enter__(self) -> "profile":
        self.start()
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        if exc_type is None:
            self.stop()
            return False
        # The block raised: write what was recorded, but never let a write error hide the block's exception.
        try:
            self.stop(reason=f"exception: {exc_type.__name__}")
        except Exception as writing:  # noqa: BLE001
            print(f"tensorpool.profiler: the profile was not written: {writing}", file=sys.stderr)
        return False

    def start(self) -> None:
        """Starts recording (the `with` statement calls it)."""
        if self._profiler is not None:
            raise RuntimeError(f"the profiler of {self.logdir!r} is already recording")
        _runtime.ensure_configured()
        names = list(_native.memory_device_names())
        if self._devices is not None:
            names = [_runtime.resolve(device, names) for device in self._devices]
        os.makedirs(self.logdir, exist_ok=True)
        self._profiler = _native.MemoryProfiler(names, self._max_events,
                                                os.path.join(self.logdir, OOM_SNAPSHOT_FILE))

    def stop(self, reason: str = "end of profile") -> str:
        """Writes the files and stops recording; returns summary.txt's text."""
        if self._profiler is None:
            raise RuntimeError(f"the profiler of {self.logdir!r} is not recording")
        try:
            self.summary = self._profiler.write(self.logdir, reason)
        finally:
            self._profiler.close()
            self._profiler = None
        # One trace per snapshot entry (a device's shared memory is an entry of its own).
        with open(os.path.join(self.logdir, "snapshot.json"), encoding="utf-8") as written:
            devices = [entry["device"] for entry in json.load(written)["devices"]]
        self.files = [os.path.join(self.logdir, name)
                      for name in ("snapshot.json", "trace.json", "report.html", "summary.txt")]
        self.files += [os.path.join(self.logdir, _trace_file_name(device)) for device in devices]
        return self.summary

    @property
    def recording(self) -> bool:
        return self._profiler is not None

    def snapshot(self, reason: str = "requested") -> Dict[str, Any]:
        """The recording so far as snapshot.json's dict (events, peak breakdown, high-water marks, tensors)."""
        if self._profiler is None:
            raise RuntimeError(f"the profiler of {self.logdir!r} is not recording")
        return json.loads(self._profiler.snapshot_json(reason))

    def set_planned_peaks(self, model, batch_size: int) -> None:
        """Shows a compiled model's planned peak per device next to the measured one (as train --profile)."""
        if self._profiler is None:
            raise RuntimeError(f"the profiler of {self.logdir!r} is not recording")
        from tensorpool import memory  # the model checks are memory's

        self._profiler.set_planned_peaks(memory._compiled(model), memory._batch(batch_size))


def _trace_file_name(device: str) -> str:
    """"sim:0" -> "trace-sim_0.csv" (report::trace_file_name)."""
    return "trace-" + device.replace(":", "_").replace("/", "_") + ".csv"


_active: Optional[profile] = None


def start(logdir, devices=None, *, max_events_per_device: int = _DEFAULT_MAX_EVENTS) -> None:
    """tf.profiler.experimental.start: starts the process's profiler, writing into `logdir` at stop()."""
    global _active
    if _active is not None:
        raise RuntimeError(f"a profiler is already running (logdir {_active.logdir!r}); stop() it first")
    session = profile(logdir, devices, max_events_per_device=max_events_per_device)
    session.start()
    _active = session


def stop() -> str:
    """tf.profiler.experimental.stop: writes the files of the profiler start() began; returns the summary."""
    global _active
    if _active is None:
        raise RuntimeError("no profiler is running: call tensorpool.profiler.start(logdir) first")
    session, _active = _active, None
    return session.stop()


experimental = types.SimpleNamespace(start=start, stop=stop, Profile=profile)
