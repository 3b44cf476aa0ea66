// SPDX-License-Identifier: Apache-2.0
#pragma once
// Runs the built `tensorpool` binary (bin/ next to the test's own directory, or $TP_CLI) through a shell and
// captures its exit code and combined output, for the CLI tests.

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tp::cli::testing {

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline std::filesystem::path cli_path() {
  if (const char* overridden = std::getenv("TP_CLI")) return overridden;
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "bin" / "tensorpool";
}

// `prefix` goes before the binary (e.g. "env -u VAR"); the arguments after it.
inline CliRun run_cli(const std::string& arguments, const std::string& prefix = "") {
  const std::string command = prefix + " '" + cli_path().string() + "' " + arguments + " 2>&1";
  CliRun result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  std::size_t read = 0;
  while ((read = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), read);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace tp::cli::testing
