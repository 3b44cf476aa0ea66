// SPDX-License-Identifier: Apache-2.0
// distribute/job_settings.hpp over the host all-gather of mpi.hpp (built with or without MPI: a world of one
// compares nothing and calls no MPI function).
#include "tensorpool/distribute/job_settings.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

#include "tensorpool/core/error.hpp"
#include "tensorpool/distribute/mpi.hpp"

namespace tp::distribute {

namespace {

// Each string as its 8-byte length, then its bytes: a setting's value may hold any character.
void append_text(std::string& out, std::string_view text) {
  const auto length = static_cast<std::uint64_t>(text.size());
  out.append(reinterpret_cast<const char*>(&length), sizeof(length));
  out.append(text);
}

std::string serialise(const std::vector<JobSetting>& settings) {
  std::string out;
  for (const JobSetting& setting : settings) {
    append_text(out, setting.name);
    append_text(out, setting.value);
    append_text(out, setting.shown.empty() ? setting.value : setting.shown);
  }
  return out;
}

// The inverse of serialise() over `bytes`; `rank` names the sender when the bytes are cut short (which only a
// rank running another build of tensorpool could send).
std::vector<JobSetting> deserialise(std::string_view bytes, int rank) {
  std::vector<JobSetting> settings;
  const auto next = [&]() -> std::string {
    std::uint64_t length = 0;
    if (bytes.size() < sizeof(length)) {
      TP_THROW(InvalidArgument, "distribute", "rank ", rank,
               " sent malformed job settings; every worker must run the same tensorpool build");
    }
    std::memcpy(&length, bytes.data(), sizeof(length));
    bytes.remove_prefix(sizeof(length));
    if (bytes.size() < length) {
      TP_THROW(InvalidArgument, "distribute", "rank ", rank,
               " sent malformed job settings; every worker must run the same tensorpool build");
    }
    std::string text(bytes.substr(0, static_cast<std::size_t>(length)));
    bytes.remove_prefix(static_cast<std::size_t>(length));
    return text;
  };
  while (!bytes.empty()) {
    JobSetting setting;
    setting.name = next();
    setting.value = next();
    setting.shown = next();
    settings.push_back(std::move(setting));
  }
  return settings;
}

// Every rank's serialised settings, in rank order. Two all-gathers that every rank enters alike: the lengths
// (8 bytes each), then the texts padded to the longest.
std::vector<std::string> gather(const std::string& local, int size) {
  const auto length = static_cast<std::uint64_t>(local.size());
  std::vector<std::uint64_t> lengths(static_cast<std::size_t>(size));
  mpi_all_gather(&length, sizeof(length), lengths.data());
  std::uint64_t longest = 0;
  for (std::uint64_t other : lengths) longest = std::max(longest, other);
  std::string padded = local;
  padded.resize(static_cast<std::size_t>(longest), '\0');
  std::string all(static_cast<std::size_t>(longest) * static_cast<std::size_t>(size), '\0');
  mpi_all_gather(padded.data(), padded.size(), all.data());
  std::vector<std::string> texts;
  for (std::size_t rank = 0; rank < lengths.size(); ++rank) {
    texts.push_back(all.substr(rank * static_cast<std::size_t>(longest), static_cast<std::size_t>(lengths[rank])));
  }
  return texts;
}

}  // namespace

std::vector<JobSettingDifference> compare_with_rank0(const std::vector<JobSetting>& settings) {
  const MpiWorld& world = mpi_world();
  if (world.size == 1) return {};
  const std::vector<std::string> texts = gather(serialise(settings), world.size);
  std::map<std::string, JobSetting> rank0;
  for (JobSetting& setting : deserialise(texts[0], 0)) rank0[setting.name] = std::move(setting);
  std::vector<JobSettingDifference> differences;
  for (int rank = 1; rank < world.size; ++rank) {
    std::map<std::string, bool> seen;
    for (const JobSetting& setting : deserialise(texts[static_cast<std::size_t>(rank)], rank)) {
      seen[setting.name] = true;
      const auto found = rank0.find(setting.name);
      if (found != rank0.end() && found->second.value == setting.value) continue;
      differences.push_back({.rank = rank,
                             .name = setting.name,
                             .value = setting.shown,
                             .rank0_value = found == rank0.end() ? "(not set)" : found->second.shown});
    }
    for (const auto& [name, setting] : rank0) {
      if (!seen.contains(name)) differences.push_back({rank, name, "(not set)", setting.shown});
    }
  }
  return differences;
}

void require_same_settings(const std::vector<JobSetting>& settings, std::string_view component, std::string_view fix) {
  const std::vector<JobSettingDifference> differences = compare_with_rank0(settings);
  if (differences.empty()) return;
  std::string text;
  for (const JobSettingDifference& difference : differences) {
    text += (text.empty() ? "" : "; ") + std::string("worker rank ") + std::to_string(difference.rank) +
            " was started with " + difference.name + " " + difference.value + ", rank 0 with " + difference.name + " " +
            difference.rank0_value;
  }
  TP_THROW(InvalidArgument, component, text, ": ", fix);
}

}  // namespace tp::distribute
