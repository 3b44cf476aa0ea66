#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The project's conventions that a tool can hold, checked on every source file of the tree.

Usage: check_format.py ROOT [--clang-format PATH]
  Prints each violation as FILE: RULE: ..., exits 1 when there is one, 0 when there is none, and 77 (ctest's
  skip code for the format.check test) when the clang-format that ROOT/.clang-format was written for is not
  installed (another major version formats differently, so its verdict would be noise).

Rules:
  format   a C++ source (.cpp, .hpp, .h, .cu, .cuh) is as clang-format formats it with ROOT/.clang-format
           (fix: clang-format -i FILE)
  spdx     a source file (C++, OpenCL C, Python, CMake, shell, JavaScript, CSS) names its license in
           "SPDX-License-Identifier: Apache-2.0" within its first three lines
  stderr   the library (src/, include/) writes no diagnostics to stderr itself (std::cerr, std::clog, stderr
           outside comments): they go through the logger, TP_LOG in tensorpool/core/log.hpp, whose default
           sink (src/core/log.cpp) is the one place that writes there
Files: those git tracks under ROOT, or, outside a git checkout, every file under the source folders.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import shutil
import subprocess
import sys

CXX_SUFFIXES = {".cpp", ".hpp", ".h", ".cu", ".cuh"}
SPDX_SUFFIXES = CXX_SUFFIXES | {".cl", ".py", ".cmake", ".sh", ".js", ".css"}
SPDX_NAMES = {"CMakeLists.txt", "Makefile", "install-deps", "run", "run-clang-tidy"}
SOURCE_FOLDERS = ("src", "include", "tests", "tools", "bench", "examples", "cmake", "scripts", ".ci", "python")
SPDX_TAG = "SPDX-License-Identifier: Apache-2.0"
SKIP = 77
STDERR_WRITE = re.compile(r"\bstd::(cerr|clog)\b|\bstderr\b")
LOGGER_SINK = "src/core/log.cpp"


def tracked_files(root: pathlib.Path) -> list[pathlib.Path]:
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True)
        return [root / name for name in listed.stdout.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        files = [root / name for name in ("CMakeLists.txt", "Makefile") if (root / name).is_file()]
        for folder in SOURCE_FOLDERS:
            files += [path for path in (root / folder).rglob("*") if path.is_file()]
        return files


def wanted_major(root: pathlib.Path) -> int | None:
    match = re.search(r"clang-format (\d+)", (root / ".clang-format").read_text())
    return int(match.group(1)) if match else None


def installed_major(clang_format: str) -> int | None:
    try:
        version = subprocess.run([clang_format, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    match = re.search(r"version (\d+)", version)
    return int(match.group(1)) if match else None


def needs_spdx(path: pathlib.Path) -> bool:
    return path.suffix in SPDX_SUFFIXES or path.name in SPDX_NAMES or path.name.endswith(".cmake.in")


def stderr_writes(root: pathlib.Path, path: pathlib.Path) -> list[int]:
    """The lines of a library source that name stderr outside a // comment."""
    relative = path.relative_to(root).as_posix()
    if path.suffix not in CXX_SUFFIXES or not relative.startswith(("src/", "include/")) or relative == LOGGER_SINK:
        return []
    lines = path.read_text(errors="replace").splitlines()
    return [number for number, line in enumerate(lines, 1) if STDERR_WRITE.search(line.split("//", 1)[0])]


def check(root: pathlib.Path, clang_format: str) -> list[str]:
    problems = []
    files = [path for path in tracked_files(root) if path.is_file()]
    for path in files:
        if needs_spdx(path):
            head = path.read_text(errors="replace").split("\n", 3)[:3]
            if not any(SPDX_TAG in line for line in head):
                problems.append(f"{path.relative_to(root)}: spdx: the first three lines do not say '{SPDX_TAG}' "
                                "(add it as a comment on the first line, after a #! line)")
        for number in stderr_writes(root, path):
            problems.append(f"{path.relative_to(root)}: stderr: line {number} writes to stderr directly (fix: "
                            f"TP_LOG from tensorpool/core/log.hpp; only {LOGGER_SINK} writes there)")
    sources = [path for path in files if path.suffix in CXX_SUFFIXES]
    for start in range(0, len(sources), 200):
        batch = sources[start:start + 200]
        result = subprocess.run([clang_format, f"--style=file:{root / '.clang-format'}", "--dry-run",
                                 "--Werror", *map(str, batch)], capture_output=True, text=True)
        if result.returncode != 0:
            reported = sorted({line.split(":", 1)[0] for line in result.stderr.splitlines()
                               if re.match(r"^\S+:\d+:\d+: (error|warning)", line)})
            for name in reported or [" ".join(map(str, batch))]:
                relative = pathlib.Path(name).resolve().relative_to(root.resolve()) if name.startswith("/") else name
                problems.append(f"{relative}: format: not as {clang_format} formats it "
                                f"(fix: clang-format -i {relative})")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("root", type=pathlib.Path)
    parser.add_argument("--clang-format", default=None)
    arguments = parser.parse_args()
    root = arguments.root.resolve()
    wanted = wanted_major(root)
    candidates = [arguments.clang_format] if arguments.clang_format else [f"clang-format-{wanted}", "clang-format"]
    clang_format = next((shutil.which(name) for name in candidates if name and shutil.which(name)), None)
    if clang_format is None or (wanted is not None and installed_major(clang_format) != wanted):
        print(f"check_format: SKIPPED: clang-format {wanted} (which {root / '.clang-format'} is written for) is not "
              "installed; scripts/install-deps installs it", file=sys.stderr)
        return SKIP
    problems = check(root, clang_format)
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_format: {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
