// SPDX-License-Identifier: Apache-2.0
#pragma once
// The per-machine file of GemmLibrary::automatic's choices (as FFTW's wisdom or cuDNN's autotune cache): the
// process that first measures a shape class writes its choice there, and later processes on the machine take
// it from there instead of timing again, so the same command chooses the same libraries, and computes the
// same bits, run after run. Without it two timings near a tie could choose differently, and the same seed
// would not reproduce a run.
//
// Location: $TP_CACHE_DIR, else $XDG_CACHE_HOME/tensorpool, else $HOME/.cache/tensorpool; the file is
// gemm-auto.json there. TP_GEMM_CACHE=off, or TP_CACHE_DIR set to the empty string, turns it off (one info
// line says so); a location that cannot be written costs one warning and the process measures as without a
// file. Nothing about the file ever stops a product: a corrupt or truncated file is ignored with a warning
// naming it (and rewritten by the next measurement).
//
// It also keeps auto_gemm_path's choices (which of several ways computes one product, e.g. the bfloat16 GEMM's
// paths), as {"path": name} entries under their own class names.
//
// An entry holds for one machine fingerprint (the CPU's model name and the ISA extensions the libraries'
// kernels use, the OpenBLAS and oneDNN builds, the rule that chose) and one shape class; entries with
// another fingerprint are kept in the file but never used. Writes replace the file atomically (a temporary
// file in the same directory, then rename), so a process never reads a half-written file; two processes
// writing at once each merge into what they read, so one may lose the other's newest entry, never corrupt
// the file.

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/cpu/kernels/gemm_auto.hpp"

namespace tp::backend::cpu {

class GemmAutoCache {
 public:
  // The cache the environment names (TP_GEMM_CACHE, TP_CACHE_DIR, XDG_CACHE_HOME, HOME), with this machine's
  // entries read from its file. Logs the notes and warnings above; never throws for the file's sake.
  GemmAutoCache();

  // This machine's entry for `shape_class`, if the file held one when read (or this process stored one).
  [[nodiscard]] std::optional<GemmAutoChoice> find(const std::string& shape_class) const;

  // Records `choice` for `shape_class`: merged into the file as it is now (this machine's entry for the class
  // replaced, every other entry kept), then the file replaced atomically. A write that fails logs one
  // warning and turns the file off for the rest of the process.
  void store(const std::string& shape_class, const GemmAutoChoice& choice);

  // The same for a choice among named ways to compute one product (auto_gemm_path in gemm_auto.hpp), kept
  // under its own class names beside the library choices.
  [[nodiscard]] std::optional<std::string> find_path(const std::string& product_class) const;
  void store_path(const std::string& product_class, const std::string& path);

  // The file, or empty when the cache is off.
  [[nodiscard]] std::filesystem::path file() const;

 private:
  mutable std::mutex mutex_;  // guards everything below: find and store may come from any thread
  std::filesystem::path file_;
  nlohmann::json machine_;                         // this machine's fingerprint, as entries hold it
  std::map<std::string, GemmAutoChoice> entries_;  // by shape class, this machine's only
  std::map<std::string, std::string> paths_;       // by product class, this machine's only

  // Merges `choice` for `shape_class` into the file (as store does); "" or what failed.
  std::string write_entry(const std::string& shape_class, const nlohmann::json& choice);
};

}  // namespace tp::backend::cpu
