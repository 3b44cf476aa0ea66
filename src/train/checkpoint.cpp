// SPDX-License-Identifier: Apache-2.0
#include "tensorpool/train/checkpoint.hpp"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "checkpoint_format.hpp"
#include "durable_file.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"

namespace tp::train {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPrefix = "checkpoint-";
constexpr std::string_view kSuffix = ".tpck";
constexpr std::string_view kTemporarySuffix = ".tmp";

// The step of a name "checkpoint-<digits>.tpck", or -1 for any other name.
std::int64_t step_of(std::string_view name) {
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return -1;
  const std::string_view digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return -1;
  std::int64_t step = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return error == std::errc{} && end == digits.data() + digits.size() ? step : -1;
}

struct CheckpointFile {
  std::int64_t step = 0;
  fs::path path{};
};

[[noreturn]] void throw_os_error(std::string_view operation, const fs::path& path, const std::error_code& error) {
  TP_THROW(DeviceError, "train", "checkpoint: ", operation, " '", path.string(), "': ", error.message());
}

// The regular files in `directory` whose names are checkpoint names, newest step first.
std::vector<CheckpointFile> list_checkpoints(const fs::path& directory) {
  std::vector<CheckpointFile> files;
  std::error_code error;
  fs::directory_iterator entries(directory, error);
  if (error) throw_os_error("cannot list", directory, error);
  for (const fs::directory_entry& entry : entries) {
    const std::int64_t step = step_of(entry.path().filename().native());
    if (step >= 0 && entry.is_regular_file(error)) files.push_back({step, entry.path()});
  }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return files;
}

// Temporary files a crashed save left behind. Only regular files with our names: anything else someone put
// there is not ours to delete.
void remove_stale_temporaries(const fs::path& directory) {
  std::error_code error;
  fs::directory_iterator entries(directory, error);
  if (error) throw_os_error("cannot list", directory, error);
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : entries) {
    const std::string name = entry.path().filename().native();
    if (!name.ends_with(kTemporarySuffix)) continue;
    const std::string_view stem = std::string_view(name).substr(0, name.size() - kTemporarySuffix.size());
    if ((stem == kLatestFileName || step_of(stem) >= 0) && entry.is_regular_file(error)) stale.push_back(entry.path());
  }
  for (const fs::path& path : stale) {
    if (!fs::remove(path, error) && error) throw_os_error("cannot remove the stale temporary file", path, error);
  }
}

// Deletes checkpoints beyond `keep` once the new one is durable: kept are `newest` and the keep - 1 highest
// steps below it. Higher steps than `newest` belong to a run abandoned by a resume from an earlier
// checkpoint and go too, so the fallback order of load_latest_checkpoint (by step) stays meaningful. A file
// that cannot be deleted is reported as a warning: the save itself has succeeded.
void apply_retention(const fs::path& directory, const CheckpointFile& newest, std::size_t keep) {
  std::size_t kept = 1;
  for (const CheckpointFile& file : list_checkpoints(directory)) {
    if (file.path.filename() == newest.path.filename()) continue;
    if (file.step < newest.step && kept < keep) {
      ++kept;
      continue;
    }
    std::error_code error;
    if (!fs::remove(file.path, error) && error) {
      TP_LOG(warning, "train", "checkpoint: cannot delete old checkpoint '", file.path.string(),
             "': ", error.message());
    }
  }
}

void ensure_directory(const fs::path& directory) {
  std::error_code error;
  if (fs::exists(directory, error) && !fs::is_directory(directory, error)) {
    TP_THROW(DeviceError, "train", "checkpoint: '", directory.string(), "' exists and is not a directory");
  }
  fs::create_directories(directory, error);
  if (error) throw_os_error("cannot create the directory", directory, error);
}

}  // namespace

std::string checkpoint_file_name(std::int64_t step) {
  return std::string(kPrefix) + std::to_string(step) + std::string(kSuffix);
}

fs::path save_checkpoint(const fs::path& directory, const CheckpointState& state, const CheckpointOptions& options) {
  if (options.keep == 0) TP_THROW(InvalidArgument, "train", "checkpoint: keep must be at least 1");
  detail::validate_checkpoint(state);  // before anything touches the disk
  ensure_directory(directory);
  remove_stale_temporaries(directory);

  const CheckpointFile newest{state.step, directory / checkpoint_file_name(state.step)};
  {
    detail::DurableFileWriter writer(newest.path, "checkpoint");
    detail::encode_checkpoint(state,
                              [&writer](const std::uint8_t* data, std::size_t size) { writer.write(data, size); });
    writer.commit();
  }
  // Only now may `latest` move: it must never name a file that is not whole on disk.
  detail::write_file_durably(directory / kLatestFileName, newest.path.filename().native() + "\n", "checkpoint");
  apply_retention(directory, newest, options.keep);
  return newest.path;
}

CheckpointState load_checkpoint(const fs::path& file) {
  const std::vector<std::uint8_t> bytes = detail::read_whole_file(file, "checkpoint");
  return detail::decode_checkpoint(bytes, file.string());
}

namespace {

// The file `latest` names. Throws tp::DataError naming `latest` when its content is not one checkpoint file
// name (a path elsewhere is refused too: the pointer only ever names a sibling).
fs::path read_latest_pointer(const fs::path& latest) {
  const std::vector<std::uint8_t> bytes = detail::read_whole_file(latest, "checkpoint pointer");
  std::string_view name(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.remove_suffix(1);
  if (step_of(name) < 0) {
    TP_THROW(DataError, "train", latest.string(), ": corrupted checkpoint pointer: expected one line \"", kPrefix,
             "<step>", kSuffix, "\", got ", bytes.size(), " bytes that are not");
  }
  fs::path file = latest.parent_path() / fs::path(std::string(name));
  std::error_code error;
  if (!fs::exists(file, error) && !error) {
    TP_THROW(DataError, "train", latest.string(), ": names ", name, ", which does not exist");
  }
  return file;
}

// An error's message without its "[train] " prefix, to quote it inside another message.
std::string_view reason_of(const Error& error) {
  std::string_view text = error.what();
  if (text.starts_with("[train] ")) text.remove_prefix(8);
  return text;
}

}  // namespace

std::optional<CheckpointState> load_latest_checkpoint(const fs::path& directory) {
  std::error_code error;
  const bool exists = fs::exists(directory, error);
  if (error) throw_os_error("cannot inspect", directory, error);
  if (!exists) return std::nullopt;
  if (!fs::is_directory(directory, error)) {
    TP_THROW(DeviceError, "train", "checkpoint: '", directory.string(), "' exists and is not a directory");
  }

  // Candidates in order: what `latest` names, then every checkpoint file by step, newest first.
  std::vector<std::string> refusals;
  std::vector<fs::path> candidates;
  const fs::path latest = directory / kLatestFileName;
  if (fs::exists(latest, error)) {
    try {
      candidates.push_back(read_latest_pointer(latest));
    } catch (const DataError& refused) {
      refusals.emplace_back(reason_of(refused));
    }
  }
  for (const CheckpointFile& file : list_checkpoints(directory)) {
    if (candidates.empty() || file.path.filename() != candidates.front().filename()) candidates.push_back(file.path);
  }

  for (const fs::path& candidate : candidates) {
    try {
      CheckpointState state = load_checkpoint(candidate);
      if (!refusals.empty()) {
        std::string line = "checkpoint: refused ";
        for (std::size_t i = 0; i < refusals.size(); ++i) line += (i == 0 ? "" : "; refused ") + refusals[i];
        TP_LOG(warning, "train", line, "; using ", candidate.string(), " (step ", state.step, ") instead");
      }
      return state;
    } catch (const DataError& refused) {
      refusals.emplace_back(reason_of(refused));
    }
  }
  if (refusals.empty()) return std::nullopt;
  std::string message;
  for (const std::string& refusal : refusals) message += "\n  " + refusal;
  TP_THROW(DataError, "train", "checkpoint: no valid checkpoint in '", directory.string(), "':", message);
}

}  // namespace tp::train
