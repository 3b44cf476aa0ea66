// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checks, before a run does any work, that it can write its outputs where the flags say: a run that trains
// for minutes and then fails to save its results loses them. Nothing is created or changed by a check: a
// file's directory (or a directory's nearest existing ancestor) receives a probe file that is removed at once.
#include <string>

namespace tp::cli {

// `path` names a file the run will write (created or replaced): refuses a directory, a file the process may
// not open for writing, and a missing or unwritable parent directory. Throws tp::InvalidArgument naming
// `flag`, the path and the OS's reason; an empty path passes (the output is off).
void check_writable_file(const std::string& path, const char* flag, const char* command);

// `path` names a directory the run will create if needed and write files into: refuses a path that is (or
// lies under) something other than a directory, and a nearest existing ancestor the process cannot create
// files in. Throws like check_writable_file.
void check_writable_directory(const std::string& path, const char* flag, const char* command);

}  // namespace tp::cli
