#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The format checker fails on a tree with a misformatted file or a file without its SPDX line, naming each,
and passes a clean one: so its pass on the real tree (the format.check test) means something."""

from __future__ import annotations

import pathlib
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import check_format  # noqa: E402

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]


class FormatCheckTest(unittest.TestCase):
    def setUp(self) -> None:
        self.clang_format = shutil.which(f"clang-format-{check_format.wanted_major(REPOSITORY)}") or \
            shutil.which("clang-format")
        if self.clang_format is None or \
                check_format.installed_major(self.clang_format) != check_format.wanted_major(REPOSITORY):
            self.skipTest("the clang-format that .clang-format is written for is not installed")
        self._directory = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self._directory.name)
        shutil.copy(REPOSITORY / ".clang-format", self.root / ".clang-format")
        self.write("src/core/clean.cpp", "// SPDX-License-Identifier: Apache-2.0\nint clean() { return 1; }\n")
        self.write("scripts/tool.sh", "#!/bin/sh\n# SPDX-License-Identifier: Apache-2.0\necho ok\n")

    def tearDown(self) -> None:
        self._directory.cleanup()

    def write(self, name: str, text: str) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def problems(self) -> list[str]:
        return check_format.check(self.root, self.clang_format)

    def test_a_clean_tree_passes(self) -> None:
        self.assertEqual(self.problems(), [])

    def test_a_misformatted_file_is_named_with_the_fix(self) -> None:
        self.write("src/core/messy.cpp", "// SPDX-License-Identifier: Apache-2.0\nint  messy( ){return 2;}\n")
        problems = self.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("src/core/messy.cpp: format:", problems[0])
        self.assertIn("clang-format -i src/core/messy.cpp", problems[0])

    def test_a_file_without_its_license_line_is_named(self) -> None:
        self.write("src/backend/opencl/kernels/k.cl", "__kernel void k() {}\n")
        self.write("tests/CMakeLists.txt", "add_test(NAME x COMMAND y)\n")
        problems = sorted(self.problems())
        self.assertEqual([problem.split(":", 2)[:2] for problem in problems],
                         [["src/backend/opencl/kernels/k.cl", " spdx"], ["tests/CMakeLists.txt", " spdx"]])

    def test_the_license_line_may_follow_a_shebang_only_within_three_lines(self) -> None:
        self.write("tests/late.py", "#!/usr/bin/env python3\n\n\n# SPDX-License-Identifier: Apache-2.0\n")
        self.assertEqual([problem.split(":")[0] for problem in self.problems()], ["tests/late.py"])

    def test_a_library_source_that_writes_to_stderr_is_named(self) -> None:
        noisy = "// SPDX-License-Identifier: Apache-2.0\n#include <cstdio>\nvoid noisy() { std::fprintf(stderr, \"x\\n\"); }\n"
        self.write("src/train/noisy.cpp", noisy)
        self.write("src/core/log.cpp", noisy)  # the logger's sink may
        self.write("tools/tensorpool/main.cpp", noisy)  # and so may the tool, outside the library
        self.write("src/core/quiet.hpp", "// SPDX-License-Identifier: Apache-2.0\n// Says so on stderr.\n")
        problems = self.problems()
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("src/train/noisy.cpp: stderr: line 3 writes to stderr directly", problems[0])


if __name__ == "__main__":
    unittest.main()
