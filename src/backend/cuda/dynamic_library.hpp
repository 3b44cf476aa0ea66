// SPDX-License-Identifier: Apache-2.0
#pragma once
// A shared library the CUDA backend loads at run time instead of linking (cuBLASLt, NCCL): binaries that never
// use it never map it, and a machine without it still runs everything else. Opened with RTLD_LOCAL (its
// symbols stay out of the global namespace) and never closed: the objects made through it (handles, plans,
// communicators) live until the process exits.
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tp::backend::cuda {

class DynamicLibrary {
 public:
  // The first of `names` that dlopen accepts. tp::DeviceError of `component`, "cannot load <what> (<names>):
  // <the last dlerror>; <fix>", when none does.
  static DynamicLibrary open(std::string_view component, std::string_view what, const std::vector<std::string>& names,
                             std::string_view fix);

  // Sets `function` to the library's `symbol`. tp::DeviceError "<what> (<path>) has no function <symbol>:
  // <fix>" when it lacks it (another library under that name, or an older version).
  template <typename Function>
  void bind(const char* symbol, Function& function) const {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): dlsym's result is the function's address
    function = reinterpret_cast<Function>(address_of(symbol));
  }

  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  DynamicLibrary(void* handle, std::string component, std::string what, std::string path, std::string fix);
  [[nodiscard]] void* address_of(const char* symbol) const;

  void* handle_;
  std::string component_;
  std::string what_;
  std::string path_;
  std::string fix_;
};

// The Table that load() builds for `key`, built on the first call for that key that succeeds (a failed load
// throws and is tried again by the next call, so a corrected environment variable takes effect). Tables are
// kept for the process's lifetime, so the references stay valid past the destructors that still call them.
template <typename Table>
const Table& load_once(const std::string& key, Table (*load)()) {
  static std::mutex mutex;
  static auto* tables = new std::map<std::string, Table>();  // NOLINT(cppcoreguidelines-owning-memory): leaked
  const std::scoped_lock lock(mutex);
  auto found = tables->find(key);
  if (found == tables->end()) found = tables->emplace(key, load()).first;
  return found->second;
}

}  // namespace tp::backend::cuda
