#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layering rule of docs/architecture (lower never includes upper), checked on every #include.

Usage: check_layering.py ROOT    (ROOT: the repository; prints each violation as FILE:LINE: RULE: ...,
                                  exits 1 when there is one, 0 otherwise)

Layers, low to high (a file may include its own layer and any lower one):
  0 memory, core   leaf utilities; they include each other (Buffer holds a MemoryResource, memory throws
                   core's errors), so they share one rank
  1 device         backend-neutral Device, Stream, DeviceManager
  2 arbiter        memory quotas across sessions and processes: an adaptor over a memory stack, so it needs
                   only memory and core
  3 profile
  4 ops            eager ops, and the kernel seam tensorpool/ops/kernel_table.hpp
  5 graph
  6 compile        the passes from a graph to an executable: the placer and the static memory planner
  7 runtime        Session, the executor
  8 data
  9 distribute
 10 train
 11 report         the memory reports over a trained model: the per-tensor estimate, the out-of-memory advice,
                   the memory summary, the profiler's output files (shared by the CLI and the Python package)
 12 tools          the CLI (tools/)
 12 python         the Python package's bindings (src/python/): a front end beside the CLI

A file's layer is its folder: src/<layer>/..., include/tensorpool/<layer>/..., tools/...; an included file's
layer is that of the file the include resolves to (next to the includer, then include/, then src/; a header
that resolves to none of them is a system or third-party one and is not checked).

Rules:
  backend-include  only src/backend/ includes a backend's headers (src/backend/<name>/...): everything else
                   reaches a backend through Device and the kernel table
  backend-reach    src/backend/<name>/ includes device, memory, core, profile, its own folder, the kernel
                   seam tensorpool/ops/kernel_table.hpp, and (sim only) the cpu backend whose kernels it runs
  upward-include   a layer includes a higher one

Exceptions are listed in ALLOWED below, each with its reason; one that no longer matches anything is reported
(rule stale-allowance), so the list cannot outlive the code it excuses.
"""

from __future__ import annotations

import pathlib
import re
import sys
from dataclasses import dataclass

LAYERS = {
    "memory": 0,
    "core": 0,
    "device": 1,
    "arbiter": 2,
    "profile": 3,
    "ops": 4,
    "graph": 5,
    "compile": 6,
    "runtime": 7,
    "data": 8,
    "distribute": 9,
    "train": 10,
    "report": 11,
    "tools": 12,
    "python": 12,
}

# What a backend may include besides its own folder (by layer), and the one ops header that is its seam.
BACKEND_MAY_INCLUDE = {"memory", "core", "device", "profile"}
KERNEL_SEAM = "include/tensorpool/ops/kernel_table.hpp"
# Backends whose headers another backend may include: sim runs the cpu backend's kernels.
BACKEND_MAY_USE_BACKEND = {("sim", "cpu")}

# (including file, included file) pairs, both relative to the root, that the rules refuse but the code needs.
# Each entry says why; keep the list short.
_BUFFER_RETURNS_TO_ITS_DEVICE = (
    "a Buffer's destructor is the one place its bytes return, through its Device (Device::release, a friend), "
    "and Tensor's transfers (from_host, to, copy_to_host) go through the device's streams; core's headers only "
    "forward-declare device::Device and device::Stream, so nothing above core leaks into its interface")
# NCCL is a CUDA library: its communicator implements distribute's Communicator interface but must live in the
# cuda backend (device-specific code only under src/backend/<name>/), and bootstraps across processes over the
# MPI world (ARCHITECTURE.md: "NCCL (CUDA, bootstrapped over MPI)").
_NCCL_COMMUNICATOR_IS_CUDA_CODE = "the NCCL communicator is the cuda backend's implementation of a distribute interface"

ALLOWED: dict[tuple[str, str], str] = {
    ("src/backend/cuda/nccl_communicator.cpp", "include/tensorpool/distribute/mpi.hpp"): _NCCL_COMMUNICATOR_IS_CUDA_CODE,
    ("src/backend/cuda/nccl_communicator.cpp", "include/tensorpool/distribute/nccl.hpp"): _NCCL_COMMUNICATOR_IS_CUDA_CODE,
    ("src/backend/no_cuda/nccl_unavailable.cpp", "include/tensorpool/distribute/nccl.hpp"): _NCCL_COMMUNICATOR_IS_CUDA_CODE,
    ("src/core/buffer.cpp", "include/tensorpool/device/device.hpp"): _BUFFER_RETURNS_TO_ITS_DEVICE,
    ("src/core/buffer.cpp", "include/tensorpool/device/stream.hpp"): _BUFFER_RETURNS_TO_ITS_DEVICE,
    ("src/core/tensor.cpp", "include/tensorpool/device/device.hpp"): _BUFFER_RETURNS_TO_ITS_DEVICE,
    ("src/core/tensor.cpp", "include/tensorpool/device/stream.hpp"): _BUFFER_RETURNS_TO_ITS_DEVICE,
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


@dataclass(frozen=True)
class Violation:
    file: str
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.rule}: {self.message}"


def layer_of(relative: pathlib.PurePosixPath) -> str | None:
    """'memory', ..., 'tools', 'backend/<name>', or None for a file outside the checked folders."""
    parts = relative.parts
    if len(parts) >= 3 and parts[0] == "src" and parts[1] == "backend":
        return "backend/" + parts[2]
    if len(parts) >= 2 and parts[0] == "src" and parts[1] in LAYERS:
        return parts[1]
    if len(parts) >= 3 and parts[0] == "include" and parts[1] == "tensorpool" and parts[2] in LAYERS:
        return parts[2]
    if len(parts) >= 2 and parts[0] == "tools":
        return "tools"
    return None


def resolve(root: pathlib.Path, includer: pathlib.Path, text: str, quoted: bool) -> pathlib.Path | None:
    """The file an include names, relative to the root, or None when it is not the project's."""
    candidates = [includer.parent / text] if quoted else []
    candidates += [root / "include" / text, root / "src" / text]
    for candidate in candidates:
        if candidate.is_file():
            return pathlib.Path(candidate.resolve().relative_to(root.resolve()).as_posix())
    return None


def check_include(file_layer: str, target: str, target_layer: str | None) -> tuple[str, str] | None:
    """(rule, explanation) when a file of `file_layer` may not include `target` (of `target_layer`)."""
    if target_layer is None or target_layer == file_layer:
        return None
    if file_layer.startswith("backend/"):
        name = file_layer.split("/", 1)[1]
        if target_layer.startswith("backend/"):
            other = target_layer.split("/", 1)[1]
            if (name, other) in BACKEND_MAY_USE_BACKEND:
                return None
            return ("backend-reach", f"backend '{name}' includes backend '{other}''s header {target}")
        if target_layer in BACKEND_MAY_INCLUDE or target == KERNEL_SEAM:
            return None
        return ("backend-reach", f"backend '{name}' includes {target} ({target_layer}); a backend reaches only "
                f"device, memory, core, profile and the kernel seam {KERNEL_SEAM}")
    if target_layer.startswith("backend/"):
        return ("backend-include", f"{file_layer} includes the backend header {target}; only src/backend/ may "
                "(reach a backend through Device and the kernel table)")
    if LAYERS[target_layer] > LAYERS[file_layer]:
        return ("upward-include", f"{file_layer} (layer {LAYERS[file_layer]}) includes {target} of the higher "
                f"layer {target_layer} (layer {LAYERS[target_layer]})")
    return None


def source_files(root: pathlib.Path) -> list[pathlib.Path]:
    files = []
    for folder in ("src", "include", "tools"):
        base = root / folder
        if base.is_dir():
            files += [path for path in base.rglob("*") if path.suffix in {".hpp", ".cpp", ".h", ".cc"}]
    return sorted(files)


def check(root: pathlib.Path, allowed: dict[tuple[str, str], str] | None = None) -> list[Violation]:
    allowed = ALLOWED if allowed is None else allowed
    violations: list[Violation] = []
    used: set[tuple[str, str]] = set()
    for path in source_files(root):
        relative = pathlib.PurePosixPath(path.relative_to(root).as_posix())
        file_layer = layer_of(relative)
        if file_layer is None:
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, start=1):
            match = INCLUDE.match(line)
            if not match:
                continue
            resolved = resolve(root, path, match.group(2), quoted=match.group(1) == '"')
            if resolved is None:
                continue
            target = resolved.as_posix()
            problem = check_include(file_layer, target, layer_of(pathlib.PurePosixPath(target)))
            if problem is None:
                continue
            if (str(relative), target) in allowed:
                used.add((str(relative), target))
                continue
            violations.append(Violation(str(relative), number, problem[0], problem[1]))
    for (file, target), reason in allowed.items():
        if (file, target) not in used:
            violations.append(Violation(file, 0, "stale-allowance", f"the allowance for including {target} "
                                        f"matches nothing any more ({reason}); remove it from ALLOWED"))
    return violations


def main(argv: list[str], allowed: dict[tuple[str, str], str] | None = None) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1])
    if not (root / "src").is_dir():
        print(f"check_layering: {root} has no src/ folder; give the repository root", file=sys.stderr)
        return 2
    violations = check(root, allowed)
    for violation in violations:
        print(violation)
    checked = len(source_files(root))
    if violations:
        print(f"check_layering: {len(violations)} violation(s) in {checked} files", file=sys.stderr)
        return 1
    print(f"check_layering: {checked} files follow the layering")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
