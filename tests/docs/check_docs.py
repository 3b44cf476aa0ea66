#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every fenced code block of README.md and docs/*.md is checked by ctest (label `docs`).

The rule, by the fence's language (any other fence, an untagged one included, fails the `docs.fences` test,
so a block nobody runs cannot be added silently):

  cpp   The block's first line names an example program, `// examples/NAME.cpp`; the rest of the block is that
        file or a contiguous run of its lines (compared after removing the common indentation). CMake builds
        every examples/*.cpp (tests/CMakeLists.txt) and ctest runs each one (`docs.example.NAME`) in a fresh
        directory; an example file no block quotes fails too. `docs.fences` checks the quoting.
  python  As cpp, for Python example programs: the first line is `# examples/NAME.py`, the rest a contiguous
        run of that file. tests/python/ runs each one (test_seed_example.py runs examples/seed_keras_mlp.py);
        an examples/*.py file no block quotes fails `docs.fences` too.
  sh    Run by bash (`set -euo pipefail`) from a scratch copy of the repository root (`docs.sh.FILE`), with
        sizes reduced so a block runs in seconds:
          build/bin/tensorpool   a shim runs the real CLI with `train` capped at --epochs 1,
                                 --limit-train max(320, 2 x batch size) and --hidden widths of at most 512, and
                                 `profile` at --steps 2; every other flag is passed as written, so each
                                 invocation must parse and run;
          build/bench/tp_*       a shim runs the real benchmark with its smoke flags (SMOKE_FLAGS below)
                                 replacing the block's values (and without --callgrind);
          bench/backends/*.py    likewise: the real script with its smoke flags (one recorded run per device,
                                 no warm-up), training through the CLI shim above;
          bench/python/*.py      likewise (one run per side, batch 32, 640 examples); build/python and
                                 build/python-venv are the build's package and interpreter;
          build-NAME/            the same build as build/ (the text says how build-NAME was configured);
          /tmp/                  a scratch directory;
          make TARGET            checked, not run (it would rebuild and rerun everything): TARGET must be a rule
                                 of the Makefile;
          cmake ...              checked, not run: each --target must be a target of the build, each -DNAME a
                                 cache entry of it;
          bench/peers/*.py       need PyTorch and a peer outside this repository: each --flag the block passes
                                 must appear in the script's --help;
          pip install .          checked, not run (it builds the library and the extension: minutes):
                                 pyproject.toml must build with scikit-build-core;
          python3 examples/*.py  (or python) runs the example with the build's package (build/python) at
                                 SEED_EPOCHS=1 and SEED_LIMIT=640; any other python3 command runs as written.
        mpirun and every other command run as written.
  text  Program output, formats and synopses: not run.

Usage (ctest runs these; ROOT is the repository root, BUILD the build directory):
  check_docs.py fences ROOT
  check_docs.py sh ROOT BUILD DOC.md
  check_docs.py example BINARY
  check_docs.py estimate-table ROOT BUILD   (the figures of docs/profiling.md's "The estimate is exact" table)
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

LANGUAGES = {"cpp", "python", "sh", "text"}
# The comment that names the example a quoted block comes from, by fence language.
EXAMPLE_HEADER = {"cpp": r"^//\s*(examples/[\w-]+\.cpp)\b", "python": r"^#\s*(examples/[\w-]+\.py)\b"}
# Environment of the examples a sh block runs with python3: a quick run.
PYTHON_EXAMPLE_ENV = {"SEED_EPOCHS": "1", "SEED_LIMIT": "640"}
SKIPPED = 77  # ctest SKIP_RETURN_CODE

# Benchmark binary -> {flag: value (None for a bare flag)}: each replaces the block's value or is added.
SMOKE_FLAGS = {
    "tp_kernel_bench": {"--rounds": "1", "--seconds": "0.001"},
    "tp_intra_op_bench": {"--rounds": "1", "--seconds": "0.001"},
    "tp_batch_bench": {"--rounds": "1"},
    "tp_planner_bench": {"--rounds": "1", "--steps": "1"},
    "tp_profiler_bench": {"--rounds": "1", "--steps": "1", "--pairs": "100"},
    "tp_collective_bench": {"--rounds": "1", "--seconds": "0.001", "--largest": "65536"},
    "tp_replay_bench": {"--trace": "training", "--runs": "1", "--rounds": "1", "--footprint-runs": "1"},
    "tp_replay_worker": {"--rounds": "1"},
}
DROPPED_FLAGS = {"tp_replay_bench": {"--callgrind"}}
# bench/backends/ script -> {flag: value}, as SMOKE_FLAGS.
SCRIPT_SMOKE_FLAGS = {
    "compare_backends.py": {"--runs": "1", "--warmup": "0"},
    "fit_vs_cli.py": {"--runs": "1", "--limit-train": "640", "--batch-sizes": "32"},
}


def doc_files(root):
    docs = os.path.join(root, "docs")
    return [os.path.join(root, "README.md")] + sorted(
        os.path.join(docs, name) for name in os.listdir(docs) if name.endswith(".md"))


def fenced_blocks(path):
    """Yields (line number, language, body lines) for each fenced block; an unclosed fence is an error."""
    lines = open(path, encoding="utf-8").read().split("\n")
    index = 0
    while index < len(lines):
        opening = re.match(r"^(\s*)(`{3,}|~{3,})(.*)$", lines[index])
        if not opening:
            index += 1
            continue
        indent, fence, info = opening.groups()
        start = index
        body = []
        index += 1
        while index < len(lines) and not re.match(r"^\s*" + re.escape(fence) + r"\s*$", lines[index]):
            body.append(lines[index][len(indent):] if lines[index].startswith(indent) else lines[index])
            index += 1
        if index == len(lines):
            raise SystemExit(f"{path}:{start + 1}: fence {fence} is never closed")
        index += 1
        yield start + 1, info.strip(), body


def relative(root, path):
    return os.path.relpath(path, root)


def dedented(lines):
    return textwrap.dedent("\n".join(lines)).split("\n")


def quoted_in(block, file_lines):
    """True when `block` is a contiguous run of `file_lines` once both lose their common indentation."""
    if not block:
        return False
    wanted = dedented(block)
    for start in range(len(file_lines) - len(block) + 1):
        if dedented(file_lines[start:start + len(block)]) == wanted:
            return True
    return False


def check_fences(root):
    failures = []
    quoted = set()
    counts = {}
    for path in doc_files(root):
        for line, language, body in fenced_blocks(path):
            where = f"{relative(root, path)}:{line}"
            counts[language] = counts.get(language, 0) + 1
            if language not in LANGUAGES:
                failures.append(f"{where}: fence language {language!r} is not one of {sorted(LANGUAGES)}: tag "
                                "program output, formats and synopses `text`, commands `sh`, C++ `cpp`")
                continue
            if language not in EXAMPLE_HEADER:
                continue
            named = re.match(EXAMPLE_HEADER[language], body[0]) if body else None
            if not named:
                header = "// examples/NAME.cpp" if language == "cpp" else "# examples/NAME.py"
                failures.append(f"{where}: a {language} block starts with `{header}`, the program it is "
                                "taken from (the tests run that file)")
                continue
            example = os.path.join(root, named.group(1))
            if not os.path.isfile(example):
                failures.append(f"{where}: {named.group(1)} does not exist")
                continue
            quoted.add(os.path.realpath(example))
            file_lines = open(example, encoding="utf-8").read().split("\n")
            if not any(line.strip() for line in body[1:]) or not quoted_in(body[1:], file_lines):
                failures.append(f"{where}: the block's lines after the first are not a contiguous run of "
                                f"{named.group(1)}: copy them from the file (the file is what ctest builds and runs)")
    examples = os.path.join(root, "examples")
    for name in sorted(os.listdir(examples)) if os.path.isdir(examples) else []:
        path = os.path.realpath(os.path.join(examples, name))
        if name.endswith((".cpp", ".py")) and path not in quoted:
            failures.append(f"examples/{name}: no block of README.md or docs/*.md quotes it; quote it or remove it")
    print("fenced blocks: " + ", ".join(f"{count} {language or 'untagged'}" for language, count in sorted(counts.items())))
    for failure in failures:
        print("FAIL " + failure)
    return 1 if failures else 0


# ---- sh blocks -------------------------------------------------------------------------------------------

def shim(path, kind):
    with open(path, "w", encoding="utf-8") as out:
        out.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(__file__))} "
                  f"shim {kind} \"$@\"\n")
    os.chmod(path, 0o755)


def python_shim(path, kind):
    """A shim for a script the block runs as `python3 SCRIPT`: Python code, not a shell script."""
    with open(path, "w", encoding="utf-8") as out:
        out.write(f"import os, sys\nos.execv(sys.executable, [sys.executable, {os.path.abspath(__file__)!r}, "
                  f"'shim', {kind!r}] + sys.argv[1:])\n")
    os.chmod(path, 0o755)


def sandbox(root, build, scratch, text):
    """The repository root as a block sees it: sources linked, traces copied (blocks write there), build/
    holding shims."""
    work = os.path.join(scratch, "work")
    os.makedirs(work)
    for name in os.listdir(root):
        if name in ("bench",) or name.startswith("build") or name.startswith(".git"):
            continue
        os.symlink(os.path.join(root, name), os.path.join(work, name))
    os.makedirs(os.path.join(work, "bench"))
    for name in os.listdir(os.path.join(root, "bench")):
        source = os.path.join(root, "bench", name)
        if name == "traces":
            shutil.copytree(source, os.path.join(work, "bench", name))
        elif name == "peers":
            os.makedirs(os.path.join(work, "bench", name))
            for script in os.listdir(source):
                shim(os.path.join(work, "bench", name, script), "peer:" + os.path.join(source, script))
        elif name in ("backends", "python"):
            os.makedirs(os.path.join(work, "bench", name))
            for script in os.listdir(source):
                if script in SCRIPT_SMOKE_FLAGS:
                    python_shim(os.path.join(work, "bench", name, script), "script:" + os.path.join(source, script))
                else:
                    os.symlink(os.path.join(source, script), os.path.join(work, "bench", name, script))
        else:
            os.symlink(source, os.path.join(work, "bench", name))
    os.makedirs(os.path.join(work, "build", "bin"))
    os.makedirs(os.path.join(work, "build", "bench"))
    shim(os.path.join(work, "build", "bin", "tensorpool"), "tensorpool:" + os.path.join(build, "bin", "tensorpool"))
    for name in ("python", "python-venv"):  # the Python package the build assembled, and its interpreter
        if os.path.isdir(os.path.join(build, name)):
            os.symlink(os.path.join(build, name), os.path.join(work, "build", name))
    for name in set(re.findall(r"\bbuild[\w-]*/bench/(tp_\w+)", text)):
        real = os.path.join(build, "bench", name)
        if os.access(real, os.X_OK):
            shim(os.path.join(work, "build", "bench", name), "bench:" + real)
    for name in set(re.findall(r"\b(build-[\w-]+)/", text)):
        if not os.path.exists(os.path.join(work, name)):
            os.symlink("build", os.path.join(work, name))
    tools = os.path.join(scratch, "shims")
    os.makedirs(tools)
    shim(os.path.join(tools, "make"), "make:" + root)
    shim(os.path.join(tools, "cmake"), "cmake:" + build)
    if re.search(r"\bpip3? install\b|\bpython3? (-m pip|examples/)", text):
        shim(os.path.join(tools, "pip"), "pip:" + root)
        shim(os.path.join(tools, "pip3"), "pip:" + root)
        shim(os.path.join(tools, "python"), "python:" + build)
        shim(os.path.join(tools, "python3"), "python:" + build)
    os.makedirs(os.path.join(scratch, "tmp"))
    return work, tools


def run_sh(root, build, doc):
    blocks = [(line, body) for line, language, body in fenced_blocks(doc) if language == "sh"]
    if not blocks:
        print(f"{relative(root, doc)}: no sh blocks")
        return 0
    missing = sorted({name for _, body in blocks for name in re.findall(r"\bbuild[\w-]*/bench/(tp_\w+)", "\n".join(body))
                      if not os.access(os.path.join(build, "bench", name), os.X_OK)})
    if missing and not os.path.isdir(os.path.join(build, "bench")):
        print(f"SKIPPED: {relative(root, doc)} runs benchmarks and this build has none (TP_BUILD_BENCH=OFF)")
        return SKIPPED
    if missing:
        print(f"{relative(root, doc)} runs benchmarks that are not built: {', '.join(missing)} "
              f"(cmake --build {build} --target {' '.join(missing)})")
        return 1
    failures = 0
    for line, body in blocks:
        with tempfile.TemporaryDirectory(prefix="tp-doc-sh-") as scratch:
            text = "\n".join(body).replace("/tmp/", os.path.join(scratch, "tmp") + "/")
            work, tools = sandbox(root, build, scratch, text)
            environment = dict(os.environ, PATH=tools + os.pathsep + os.environ.get("PATH", ""),
                               TP_DOCS_SCRATCH=scratch)
            print(f"---- {relative(root, doc)}:{line}\n{chr(10).join(body)}", flush=True)
            started = time.monotonic()
            result = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=work, env=environment,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
            tail = result.stdout if len(result.stdout) < 6000 else "...\n" + result.stdout[-6000:]
            print(tail, end="" if tail.endswith("\n") or not tail else "\n")
            verdict = "ok" if result.returncode == 0 else f"FAIL (exit {result.returncode})"
            print(f"---- {relative(root, doc)}:{line}: {verdict} in {time.monotonic() - started:.1f} s", flush=True)
            failures += result.returncode != 0
    return 1 if failures else 0


def set_flag(arguments, flag, value):
    """Replaces `flag`'s value (both `--flag v` and `--flag=v`) or appends it."""
    out = []
    found = False
    index = 0
    while index < len(arguments):
        argument = arguments[index]
        if argument == flag or argument.startswith(flag + "="):
            if not found and value is not None:
                out += [flag, value]
            elif not found:
                out.append(flag)
            found = True
            index += 1 if "=" in argument or value is None else 2
            continue
        out.append(argument)
        index += 1
    if not found:
        out += [flag] if value is None else [flag, value]
    return out


def flag_value(arguments, flag):
    for index, argument in enumerate(arguments):
        if argument.startswith(flag + "="):
            return argument.split("=", 1)[1]
        if argument == flag and index + 1 < len(arguments):
            return arguments[index + 1]
    return None


def reduced_cli(arguments):
    command = arguments[0] if arguments else ""
    if command == "train":
        batch = int(flag_value(arguments, "--batch-size") or 32)
        arguments = set_flag(arguments, "--epochs", "1")
        limit = flag_value(arguments, "--limit-train")
        cap = max(320, 2 * batch)
        # 0 (or none) means every example: the cap applies.
        arguments = set_flag(arguments, "--limit-train", str(min(int(limit), cap) if limit and int(limit) > 0 else cap))
        hidden = flag_value(arguments, "--hidden")
        if hidden:
            widths = ",".join(str(min(int(width), 512)) if width.strip().isdigit() else width
                              for width in hidden.split(","))
            arguments = set_flag(arguments, "--hidden", widths)
    elif command == "profile":
        steps = flag_value(arguments, "--steps")
        arguments = set_flag(arguments, "--steps", str(min(int(steps), 2)) if steps else "2")
    return arguments


def makefile_targets(root):
    text = open(os.path.join(root, "Makefile"), encoding="utf-8").read()
    return set(re.findall(r"^([\w.-]+)\s*:(?!=)", text, re.MULTILINE))


def build_targets(build):
    listing = os.path.join(build, "CMakeFiles", "TargetDirectories.txt")
    text = open(listing, encoding="utf-8").read() if os.path.exists(listing) else ""
    return set(re.findall(r"/([\w.+-]+)\.dir\s*$", text, re.MULTILINE))


def cache_entries(build):
    text = open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8").read()
    return set(re.findall(r"^([\w-]+):\w+=", text, re.MULTILINE))


def run_shim(kind, arguments):
    name, _, target = kind.partition(":")
    if name == "tensorpool":
        arguments = reduced_cli(arguments)
        print("[docs] tensorpool " + shlex.join(arguments), file=sys.stderr, flush=True)
        os.execv(target, [target] + arguments)
    if name == "bench":
        binary = os.path.basename(target)
        arguments = [a for a in arguments if a not in DROPPED_FLAGS.get(binary, set())]
        for flag, value in SMOKE_FLAGS.get(binary, {}).items():
            arguments = set_flag(arguments, flag, value)
        print(f"[docs] {binary} " + shlex.join(arguments), file=sys.stderr, flush=True)
        os.execv(target, [target] + arguments)
    if name == "script":
        script = os.path.basename(target)
        for flag, value in SCRIPT_SMOKE_FLAGS.get(script, {}).items():
            arguments = set_flag(arguments, flag, value)
        print(f"[docs] {script} " + shlex.join(arguments), file=sys.stderr, flush=True)
        os.execv(sys.executable, [sys.executable, target] + arguments)
    if name == "make":
        targets = [a for a in arguments if not a.startswith("-") and "=" not in a] or ["all"]
        unknown = [t for t in targets if t not in makefile_targets(target)]
        if unknown:
            sys.exit(f"[docs] make: no rule for {', '.join(unknown)} in the Makefile")
        print(f"[docs] make {' '.join(targets)}: a rule of the Makefile (not run by the doc test)")
        return 0
    if name == "cmake":
        if "--build" in arguments:
            index = arguments.index("--target") if "--target" in arguments else -1
            named = [a for a in arguments[index + 1:] if not a.startswith("-")] if index >= 0 else []
            known = build_targets(target)
            unknown = [t for t in named if t not in known]
            if unknown:
                sys.exit(f"[docs] cmake: no target {', '.join(unknown)} in the build")
            print(f"[docs] cmake --build: targets {' '.join(named) or 'all'} exist (not built by the doc test)")
            return 0
        if "-S" in arguments or "-B" in arguments:
            options = [a[2:].split("=")[0].split(":")[0] for a in arguments if a.startswith("-D")]
            unknown = [o for o in options if o not in cache_entries(target)]
            if unknown:
                sys.exit(f"[docs] cmake: {', '.join(unknown)} is not a cache entry of the build")
            print(f"[docs] cmake configure: options {' '.join(options)} exist (not configured by the doc test)")
            return 0
        sys.exit(f"[docs] cmake {shlex.join(arguments)}: a form the doc test does not know; teach check_docs.py")
    if name == "peer":
        help_text = subprocess.run([sys.executable, target, "--help"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True).stdout
        flags = [a.split("=")[0] for a in arguments if a.startswith("--")]
        unknown = [f for f in flags if not re.search(re.escape(f) + r"\b", help_text)]
        if unknown:
            sys.exit(f"[docs] {os.path.basename(target)}: no option {', '.join(unknown)} in its --help")
        print(f"[docs] {os.path.basename(target)}: options {' '.join(flags)} exist (needs PyTorch; not run)")
        return 0
    if name == "pip":
        return check_pip(target, arguments)
    if name == "python":
        return run_python(target, arguments)
    sys.exit(f"[docs] unknown shim {kind}")


def check_pip(root, arguments):
    """`pip install .` from the checkout: checked (pyproject.toml builds with scikit-build-core), not run."""
    if arguments[:1] != ["install"] or arguments[-1:] != ["."]:
        sys.exit(f"[docs] pip {shlex.join(arguments)}: the doc test knows `pip install .` only; teach check_docs.py")
    pyproject = os.path.join(os.getcwd(), "pyproject.toml")
    text = open(pyproject, encoding="utf-8").read() if os.path.exists(pyproject) else ""
    if 'build-backend = "scikit_build_core.build"' not in text:
        sys.exit(f"[docs] pip install .: {pyproject} does not build with scikit-build-core")
    print("[docs] pip install .: pyproject.toml builds with scikit-build-core (not run by the doc test)")
    return 0


def run_python(build, arguments):
    """python3 examples/NAME.py: run with the build's package, shortened; pip through -m: as the pip shim."""
    if arguments[:2] == ["-m", "pip"]:
        return check_pip(None, arguments[2:])
    real = shutil.which("python3", path=os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if not p.endswith("shims"))) or sys.executable
    if arguments and re.match(r"^examples/[\w-]+\.py$", arguments[0]):
        venv = os.path.join(build, "python-venv", "bin", "python")
        package = os.path.join(build, "python")
        if not os.path.isdir(os.path.join(package, "tensorpool")):
            print(f"[docs] python3 {arguments[0]}: not run, this build has no Python package ({package})")
            return 0
        environment = dict(os.environ, PYTHONPATH=package, **PYTHON_EXAMPLE_ENV)
        interpreter = venv if os.access(venv, os.X_OK) else real
        print(f"[docs] {' '.join(f'{k}={v}' for k, v in PYTHON_EXAMPLE_ENV.items())} python3 "
              + shlex.join(arguments), file=sys.stderr, flush=True)
        os.execve(interpreter, [interpreter] + arguments, environment)
    os.execv(real, [real] + arguments)


# ---- the estimate table of docs/profiling.md ----------------------------------------------------------------

def cli_json(cli, arguments):
    result = subprocess.run([cli] + arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise SystemExit(f"tensorpool {shlex.join(arguments)}: exit {result.returncode}\n{result.stderr}")
    return json.loads(result.stdout)


def check_estimate_table(root, build):
    """Every figure of the table under "The estimate is exact" in docs/profiling.md is what the build's
    `estimate --json` and `profile --steps 3 --synthetic --json` give, for each allocator column."""
    cli = os.path.join(build, "bin", "tensorpool")
    text = open(os.path.join(root, "docs", "profiling.md"), encoding="utf-8").read()
    section = text[text.index("**The estimate is exact.**"):]
    rows = re.findall(r"^\| (sim:0(?:,sim:1 \(each\))?) \| (\d+) \|(.*)\|\s*$", section.split("\n\n(")[0], re.MULTILINE)
    if len(rows) < 4:
        print("FAIL docs/profiling.md: the estimate table has fewer than 4 rows")
        return 1
    failures = 0
    for devices_text, batch, cells in rows:
        devices = devices_text.split(" ")[0]
        model = ["--devices", devices, "--batch-size", batch] + (["--strategy", "one"] if "," not in devices else [])
        figures = [int(value.replace(",", "")) for value in re.findall(r"[\d,]+\d", cells)]
        measured = []
        for allocator in ("bfc", "expandable", "system"):
            estimate = cli_json(cli, ["estimate"] + model + ["--allocator", allocator, "--json"])["devices"]
            profile = cli_json(cli, ["profile"] + model + ["--allocator", allocator, "--steps", "3", "--synthetic",
                                                            "--json"])["devices"]
            for planned, real in zip(estimate, profile):
                row = [planned["planned_peak_bytes"], real["measured_peak_requested_bytes"],
                       planned["planned_peak_allocated_bytes"], real["measured_peak_in_use_bytes"]]
                if len(measured) < len(estimate):
                    measured.append({})
                measured[estimate.index(planned)][allocator] = row
        for device in measured:
            bfc, expandable, system = device["bfc"], device["expandable"], device["system"]
            now = bfc + expandable[2:] + system[2:]
            verdict = "ok" if now == figures else "FAIL"
            failures += verdict != "ok"
            print(f"{verdict} {devices_text} batch {batch}: table {figures}, build {now}")
    return 1 if failures else 0


# ---- cpp examples -----------------------------------------------------------------------------------------

def run_example(binary):
    with tempfile.TemporaryDirectory(prefix="tp-doc-example-") as scratch:
        started = time.monotonic()
        result = subprocess.run([binary], cwd=scratch)
        print(f"{os.path.basename(binary)}: exit {result.returncode} in {time.monotonic() - started:.1f} s")
        return result.returncode


def main(argv):
    if len(argv) >= 2 and argv[0] == "shim":
        return run_shim(argv[1], argv[2:])
    if len(argv) == 2 and argv[0] == "fences":
        return check_fences(os.path.abspath(argv[1]))
    if len(argv) == 4 and argv[0] == "sh":
        return run_sh(os.path.abspath(argv[1]), os.path.abspath(argv[2]), os.path.abspath(argv[3]))
    if len(argv) == 3 and argv[0] == "estimate-table":
        return check_estimate_table(os.path.abspath(argv[1]), os.path.abspath(argv[2]))
    if len(argv) == 2 and argv[0] == "example":
        return run_example(os.path.abspath(argv[1]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
