#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layering checker fails on trees that break each rule, naming file, line and rule, and passes a clean
one: so its pass on the real tree (the layering.check test) means something."""

from __future__ import annotations

import contextlib
import io
import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import check_layering  # noqa: E402


class LayeringCheckTest(unittest.TestCase):
    def setUp(self) -> None:
        self._directory = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self._directory.name)
        # A clean miniature of the project: each file includes only what the rules allow.
        self.write("include/tensorpool/core/tensor.hpp", "#include <vector>\n")
        self.write("include/tensorpool/memory/memory_resource.hpp", '#include "tensorpool/core/tensor.hpp"\n')
        self.write("include/tensorpool/device/device.hpp", '#include "tensorpool/memory/memory_resource.hpp"\n')
        self.write("include/tensorpool/ops/kernel_table.hpp", '#include "tensorpool/device/device.hpp"\n')
        self.write("include/tensorpool/runtime/session.hpp", '#include "tensorpool/ops/kernel_table.hpp"\n')
        self.write("src/backend/cpu/kernels/gemm.hpp", "#include <cstdint>\n")
        self.write("src/backend/cpu/cpu_device.cpp",
                   '#include "backend/cpu/kernels/gemm.hpp"\n#include "tensorpool/device/device.hpp"\n'
                   '#include "tensorpool/ops/kernel_table.hpp"\n')
        self.write("src/backend/sim/sim_device.cpp", '#include "backend/cpu/kernels/gemm.hpp"\n')
        self.write("src/runtime/executor.hpp", '#include "tensorpool/runtime/session.hpp"\n')
        self.write("src/runtime/session.cpp", '#include "runtime/executor.hpp"\n#include "tensorpool/core/tensor.hpp"\n')
        self.write("tools/tensorpool/main.cpp", '#include "tensorpool/runtime/session.hpp"\n#include "local.hpp"\n')
        self.write("tools/tensorpool/local.hpp", "\n")

    def tearDown(self) -> None:
        self._directory.cleanup()

    def write(self, relative: str, text: str) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def run_main(self) -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = check_layering.main(["check_layering.py", str(self.root)], allowed={})
        return code, out.getvalue()

    def violations(self) -> list[str]:
        return [str(violation) for violation in check_layering.check(self.root, allowed={})]

    def test_a_clean_tree_passes(self) -> None:
        self.assertEqual(self.violations(), [])
        self.assertEqual(self.run_main()[0], 0)

    def test_a_runtime_file_including_a_backend_header_fails_naming_file_line_and_rule(self) -> None:
        self.write("src/runtime/session.cpp",
                   '#include "runtime/executor.hpp"\n\n#include "backend/cpu/kernels/gemm.hpp"\n')
        found = self.violations()
        self.assertEqual(len(found), 1, found)
        self.assertTrue(found[0].startswith("src/runtime/session.cpp:3: backend-include:"), found)
        self.assertIn("src/backend/cpu/kernels/gemm.hpp", found[0])

    def test_a_public_header_or_tool_including_a_backend_header_fails(self) -> None:
        self.write("include/tensorpool/device/device.hpp", '#include "backend/cpu/kernels/gemm.hpp"\n')
        self.write("tools/tensorpool/local.hpp", '#include "backend/cpu/kernels/gemm.hpp"\n')
        found = self.violations()
        self.assertEqual(sorted(line.split(": ")[0] for line in found),
                         ["include/tensorpool/device/device.hpp:1", "tools/tensorpool/local.hpp:1"], found)
        self.assertTrue(all(": backend-include: " in line for line in found), found)

    def test_a_lower_layer_including_a_higher_one_fails(self) -> None:
        self.write("include/tensorpool/memory/memory_resource.hpp", '#include "tensorpool/runtime/session.hpp"\n')
        found = self.violations()
        self.assertEqual(len(found), 1, found)
        self.assertTrue(found[0].startswith("include/tensorpool/memory/memory_resource.hpp:1: upward-include:"))
        self.assertIn("runtime", found[0])

    def test_the_passes_sit_between_graph_and_runtime_and_the_arbiter_below_both(self) -> None:
        # The session uses the passes and the arbiter; a pass reaching the session, or the arbiter reaching a
        # graph, turns the data path upside down.
        self.write("include/tensorpool/graph/graph.hpp", '#include "tensorpool/ops/kernel_table.hpp"\n')
        self.write("include/tensorpool/arbiter/memory_arbiter.hpp",
                   '#include "tensorpool/memory/memory_resource.hpp"\n')
        self.write("include/tensorpool/compile/placer.hpp",
                   '#include "tensorpool/graph/graph.hpp"\n#include "tensorpool/arbiter/memory_arbiter.hpp"\n')
        self.write("src/runtime/session.cpp",
                   '#include "tensorpool/compile/placer.hpp"\n#include "tensorpool/arbiter/memory_arbiter.hpp"\n')
        self.assertEqual(self.violations(), [])
        self.write("src/compile/placer.cpp", '#include "tensorpool/compile/placer.hpp"\n\n'
                   '#include "tensorpool/runtime/session.hpp"\n')
        self.write("src/arbiter/memory_arbiter.cpp", '#include "tensorpool/graph/graph.hpp"\n')
        found = self.violations()
        self.assertEqual(sorted(line.split(": ")[0] for line in found),
                         ["src/arbiter/memory_arbiter.cpp:1", "src/compile/placer.cpp:3"], found)
        self.assertTrue(all(": upward-include: " in line for line in found), found)

    def test_a_backend_reaching_above_the_kernel_seam_fails(self) -> None:
        self.write("src/backend/cpu/cpu_device.cpp", '#include "tensorpool/runtime/session.hpp"\n')
        self.write("src/backend/cpu/other.cpp", '#include "backend/sim/sim.hpp"\n')
        self.write("src/backend/sim/sim.hpp", "\n")
        found = self.violations()
        self.assertEqual(sorted(line.split(": ")[0] for line in found),
                         ["src/backend/cpu/cpu_device.cpp:1", "src/backend/cpu/other.cpp:1"], found)
        self.assertTrue(all(": backend-reach: " in line for line in found), found)

    def test_main_exits_1_and_prints_the_violation(self) -> None:
        self.write("src/core/shape.cpp", '#include "tensorpool/ops/kernel_table.hpp"\n')
        code, out = self.run_main()
        self.assertEqual(code, 1)
        self.assertIn("src/core/shape.cpp:1: upward-include:", out)
        self.write("src/core/shape.cpp", "\n")
        self.assertEqual(self.run_main()[0], 0)

    def test_an_allowance_excuses_its_pair_and_a_stale_one_fails(self) -> None:
        self.write("src/core/shape.cpp", '#include "tensorpool/device/device.hpp"\n')
        pair = ("src/core/shape.cpp", "include/tensorpool/device/device.hpp")
        self.assertEqual(check_layering.check(self.root, allowed={pair: "a reason"}), [])
        self.write("src/core/shape.cpp", "\n")
        found = [str(violation) for violation in check_layering.check(self.root, allowed={pair: "a reason"})]
        self.assertEqual(len(found), 1, found)
        self.assertIn("stale-allowance", found[0])

    def test_the_real_allowances_name_files_of_the_repository(self) -> None:
        root = pathlib.Path(__file__).resolve().parents[2]
        for file, target in check_layering.ALLOWED:
            self.assertTrue((root / file).is_file(), file)
            self.assertTrue((root / target).is_file(), target)


if __name__ == "__main__":
    unittest.main()
