// SPDX-License-Identifier: Apache-2.0
#pragma once
// Runs one replay worker as a fresh process (posix_spawn) and reads the one JSON line it prints.
// A fresh process per measurement means no allocator state, page cache of the heap or peak RSS leaks from
// one measurement into the next.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tp::bench {

struct WorkerResult {
  std::optional<nlohmann::json> json;  // the worker's report; empty when it failed
  std::string error;                   // why it failed: exit status, signal, unparsable output
};

// `binary` is an absolute path; `arguments` exclude argv[0]. The worker's stderr passes through.
WorkerResult run_worker(const std::string& binary, const std::vector<std::string>& arguments);

// The directory holding the running executable (/proc/self/exe), where the workers are built.
std::string executable_directory();

}  // namespace tp::bench
