// SPDX-License-Identifier: Apache-2.0
#include "backend/cpu/kernels/gemm_auto_cache.hpp"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include "tensorpool/core/log.hpp"

namespace tp::backend::cpu {
namespace {

constexpr std::string_view kLogComponent = "cpu";
constexpr std::string_view kFileName = "gemm-auto.json";
// The rule that turns two timings into a choice (gemm_auto.cpp: what is timed, the margin oneDNN must win
// by). Part of the fingerprint: a new rule must not inherit the old rule's choices, so it changes with it.
// 2: the file also holds the bfloat16 GEMM's path choices ({"path": name}), which rule 1's binaries would
// have dropped as malformed entries of their own machine.
constexpr int kChoiceRule = 2;

// The ISA extensions whose presence changes which kernels OpenBLAS or oneDNN run, as /proc/cpuinfo names
// them (x86 "flags", Arm "Features"); the rest of a CPU's flags do not move the choice.
constexpr std::array kGemmIsaFlags = {"avx",      "avx2",     "fma",      "f16c",        "avx512f",     "avx512dq",
                                      "avx512cd", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                                      "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",    "amx_fp16",    "asimd",
                                      "asimdhp",  "sve",      "sve2",     "bf16",        "i8mm"};

// The value of the first "name<tabs>: value" line of /proc/cpuinfo whose name is one of `names`, or "".
std::string cpuinfo_value(const std::string& cpuinfo, std::initializer_list<std::string_view> names) {
  std::istringstream lines(cpuinfo);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string_view name(line.data(), colon);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
    for (const std::string_view wanted : names) {
      if (name == wanted) {
        const std::size_t value = line.find_first_not_of(' ', colon + 1);
        return value == std::string::npos ? std::string() : line.substr(value);
      }
    }
  }
  return {};
}

// What a choice depends on besides the shape: the CPU, the ISA extensions the libraries' kernels use, each
// library's build and the kernels it selected here, and the rule. Entries match it by equality.
nlohmann::json machine_fingerprint() {
  std::string cpuinfo;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    cpuinfo += line;
    cpuinfo += '\n';
  }
  std::string cpu = cpuinfo_value(cpuinfo, {"model name"});
  if (cpu.empty()) cpu = cpuinfo_value(cpuinfo, {"CPU implementer"}) + " " + cpuinfo_value(cpuinfo, {"CPU part"});
  std::string all_flags = " ";
  all_flags += cpuinfo_value(cpuinfo, {"flags", "Features"});
  all_flags += ' ';
  std::string isa;
  for (const std::string_view flag : kGemmIsaFlags) {
    std::string needle = " ";
    needle += flag;
    needle += ' ';
    if (all_flags.find(needle) == std::string::npos) continue;
    if (!isa.empty()) isa += ' ';
    isa += flag;
  }
  const dnnl_version_t* dnnl = dnnl_version();
  std::ostringstream onednn;
  onednn << dnnl->major << '.' << dnnl->minor << '.' << dnnl->patch << " (" << dnnl->hash << ") isa "
         << static_cast<int>(dnnl_get_effective_cpu_isa());
  return {{"cpu", cpu},
          {"isa", isa},
          {"openblas", std::string(openblas_get_config()) + " core " + openblas_get_corename()},
          {"onednn", onednn.str()},
          {"rule", kChoiceRule}};
}

// The directory the environment names, or empty with `why_off` saying why there is none.
std::filesystem::path cache_directory(std::string& why_off) {
  if (const char* setting = std::getenv("TP_GEMM_CACHE"); setting != nullptr) {
    const std::string_view value(setting);
    if (value == "off") {
      why_off = "TP_GEMM_CACHE=off";
      return {};
    }
    if (value != "on") {
      TP_LOG(warning, kLogComponent, "TP_GEMM_CACHE='", value,
             "' is neither 'off' nor 'on': the GEMM auto cache stays on (set TP_GEMM_CACHE=off to turn it off)");
    }
  }
  if (const char* directory = std::getenv("TP_CACHE_DIR"); directory != nullptr) {
    if (*directory == '\0') why_off = "TP_CACHE_DIR is set to the empty string";
    return directory;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::filesystem::path(xdg) / "tensorpool";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "tensorpool";
  }
  why_off = "none of TP_CACHE_DIR, XDG_CACHE_HOME and HOME is set";
  return {};
}

// The file's entries as JSON: empty when there is no file; nullopt, with `problem` set, when it cannot be
// read or is not a cache (not JSON, truncated, or not an object with an "entries" array).
std::optional<nlohmann::json> read_entries(const std::filesystem::path& file, std::string& problem) {
  std::error_code error;
  if (!std::filesystem::exists(file, error)) return nlohmann::json::array();
  std::ifstream in(file);
  if (!in) {
    problem = "cannot be opened";
    return std::nullopt;
  }
  try {
    nlohmann::json contents = nlohmann::json::parse(in);
    if (!contents.is_object() || !contents.contains("entries") || !contents.at("entries").is_array()) {
      problem = "is JSON but not a GEMM auto cache: no \"entries\" array";
      return std::nullopt;
    }
    return std::move(contents.at("entries"));
  } catch (const nlohmann::json::exception& parse_error) {
    problem = std::string("is not valid JSON (") + parse_error.what() + ")";
    return std::nullopt;
  }
}

// An entry's choice, or nullopt when a field is missing or wrong.
std::optional<GemmAutoChoice> choice_from_json(const nlohmann::json& json) {
  try {
    const std::string library = json.at("library").get<std::string>();
    if (library != "openblas" && library != "onednn") return std::nullopt;
    return GemmAutoChoice{.shape = {.m = json.at("m").get<std::int64_t>(),
                                    .n = json.at("n").get<std::int64_t>(),
                                    .k = json.at("k").get<std::int64_t>(),
                                    .transpose_a = json.at("transpose_a").get<bool>() ? Transpose::yes : Transpose::no,
                                    .transpose_b = json.at("transpose_b").get<bool>() ? Transpose::yes : Transpose::no},
                          .library = library == "onednn" ? GemmLibrary::onednn : GemmLibrary::openblas,
                          .openblas_gflops = json.at("openblas_gflops").get<double>(),
                          .onednn_gflops = json.at("onednn_gflops").get<double>(),
                          .cached = true};
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

// Whether `entry` is this machine's (its fingerprint equals `machine`).
bool of_machine(const nlohmann::json& entry, const nlohmann::json& machine) {
  return entry.is_object() && entry.value("machine", nlohmann::json()) == machine;
}

// This machine's entry: its class and either a library choice or a path's name; nullopt when it is malformed.
struct Entry {
  std::string shape_class;
  std::optional<GemmAutoChoice> choice;
  std::string path;  // when choice is empty
};

std::optional<Entry> parse_entry(const nlohmann::json& entry) {
  const auto shape_class = entry.find("class");
  const auto choice = entry.find("choice");
  if (shape_class == entry.end() || !shape_class->is_string() || choice == entry.end() || !choice->is_object()) {
    return std::nullopt;
  }
  if (const auto path = choice->find("path"); path != choice->end()) {
    if (!path->is_string() || path->get<std::string>().empty()) return std::nullopt;
    return Entry{
        .shape_class = shape_class->get<std::string>(), .choice = std::nullopt, .path = path->get<std::string>()};
  }
  std::optional<GemmAutoChoice> parsed = choice_from_json(*choice);
  if (!parsed) return std::nullopt;
  return Entry{.shape_class = shape_class->get<std::string>(), .choice = parsed, .path = {}};
}

nlohmann::json choice_to_json(const GemmAutoChoice& choice) {
  return {{"library", std::string(name_of(choice.library))},
          {"m", choice.shape.m},
          {"n", choice.shape.n},
          {"k", choice.shape.k},
          {"transpose_a", choice.shape.transpose_a == Transpose::yes},
          {"transpose_b", choice.shape.transpose_b == Transpose::yes},
          {"openblas_gflops", choice.openblas_gflops},
          {"onednn_gflops", choice.onednn_gflops}};
}

void warn_corrupt(const std::filesystem::path& file, const std::string& problem) {
  TP_LOG(warning, kLogComponent, "the GEMM auto cache ", file.string(), " ", problem,
         ": ignored, and rewritten with this process's measurements (delete the file if this repeats)");
}

// Writes `contents` to `file` through a temporary file in the same directory and a rename, so a reader sees
// the old file or the new one, never a part. Returns "" or what failed.
std::string replace_file(const std::filesystem::path& file, const nlohmann::json& contents) {
  static std::atomic<int> sequence{0};
  std::error_code error;
  std::filesystem::create_directories(file.parent_path(), error);
  if (error) return "cannot create the directory " + file.parent_path().string() + ": " + error.message();
  const std::filesystem::path temporary =
      file.parent_path() / (file.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                            std::to_string(sequence.fetch_add(1, std::memory_order_relaxed)));
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << contents.dump(2) << '\n';
    out.close();
    if (!out) {
      std::filesystem::remove(temporary, error);
      return "cannot write " + temporary.string();
    }
  }
  std::filesystem::rename(temporary, file, error);
  if (error) {
    std::string why = "cannot rename " + temporary.string() + " to " + file.string() + ": " + error.message();
    std::filesystem::remove(temporary, error);
    return why;
  }
  return {};
}

}  // namespace

GemmAutoCache::GemmAutoCache() {
  std::string why_off;
  const std::filesystem::path directory = cache_directory(why_off);
  if (!why_off.empty()) {
    TP_LOG(info, kLogComponent, "GEMM auto cache off (", why_off,
           "): each process measures its own choices, so runs may differ in the last bits");
    return;
  }
  file_ = directory / kFileName;
  machine_ = machine_fingerprint();
  std::string problem;
  const std::optional<nlohmann::json> entries = read_entries(file_, problem);
  if (!entries) {
    warn_corrupt(file_, problem);
    return;
  }
  for (const nlohmann::json& entry : *entries) {
    if (!of_machine(entry, machine_)) continue;
    std::optional<Entry> parsed = parse_entry(entry);
    if (!parsed) {
      warn_corrupt(file_, "holds a malformed entry: " + entry.dump());
      entries_.clear();
      paths_.clear();
      return;
    }
    if (parsed->choice) {
      entries_.insert_or_assign(std::move(parsed->shape_class), *parsed->choice);
    } else {
      paths_.insert_or_assign(std::move(parsed->shape_class), std::move(parsed->path));
    }
  }
}

std::optional<GemmAutoChoice> GemmAutoCache::find(const std::string& shape_class) const {
  const std::lock_guard lock(mutex_);
  const auto found = entries_.find(shape_class);
  if (found == entries_.end()) return std::nullopt;
  return found->second;
}

std::optional<std::string> GemmAutoCache::find_path(const std::string& product_class) const {
  const std::lock_guard lock(mutex_);
  const auto found = paths_.find(product_class);
  if (found == paths_.end()) return std::nullopt;
  return found->second;
}

void GemmAutoCache::store(const std::string& shape_class, const GemmAutoChoice& choice) {
  const std::lock_guard lock(mutex_);
  if (file_.empty() || !write_entry(shape_class, choice_to_json(choice)).empty()) return;
  GemmAutoChoice stored = choice;
  stored.cached = true;
  entries_.insert_or_assign(shape_class, stored);
}

void GemmAutoCache::store_path(const std::string& product_class, const std::string& path) {
  const std::lock_guard lock(mutex_);
  if (file_.empty() || !write_entry(product_class, {{"path", path}}).empty()) return;
  paths_.insert_or_assign(product_class, path);
}

std::string GemmAutoCache::write_entry(const std::string& shape_class, const nlohmann::json& choice) {
  std::string failed;
  try {
    // The file as it is now (another process may have added entries since this one read it); a corrupt one
    // was warned about when read and is replaced.
    std::string problem;
    nlohmann::json entries = read_entries(file_, problem).value_or(nlohmann::json::array());
    nlohmann::json merged = nlohmann::json::array();
    for (nlohmann::json& entry : entries) {
      // This machine's entries stay unless malformed (warned about when read) or for this class (replaced).
      if (of_machine(entry, machine_)) {
        const std::optional<Entry> parsed = parse_entry(entry);
        if (!parsed || parsed->shape_class == shape_class) continue;
      }
      merged.push_back(std::move(entry));
    }
    merged.push_back({{"machine", machine_}, {"class", shape_class}, {"choice", choice}});
    failed = replace_file(file_, {{"entries", std::move(merged)}});
  } catch (const std::exception& error) {  // out of memory, or text JSON cannot hold: the choice stays unsaved
    failed = error.what();
  }
  if (!failed.empty()) {
    TP_LOG(warning, kLogComponent, "GEMM auto cache not saved (", failed,
           "): this process goes on measuring, and later ones measure again; point TP_CACHE_DIR at a writable "
           "directory, or set TP_GEMM_CACHE=off");
    file_.clear();
  }
  return failed;
}

std::filesystem::path GemmAutoCache::file() const {
  const std::lock_guard lock(mutex_);
  return file_;
}

}  // namespace tp::backend::cpu
