// SPDX-License-Identifier: Apache-2.0
#pragma once
// What every rank of a multi-process job must agree on before the first collective: the settings that shape
// the graph, the data and its order, the schedule and the collectives. Ranks started with different ones run
// different programs, whose collectives then mismatch deep inside MPI (truncated messages, a wrong sequence
// number); compared up front, the difference is named instead.
//
// compare_with_rank0() is collective and never hangs on a difference: every rank takes part in the same two
// all-gathers (the lengths of the ranks' serialised settings, then the settings padded to the longest),
// whatever its values, and then every rank decides alike from the same gathered bytes.

#include <string>
#include <string_view>
#include <vector>

namespace tp::distribute {

struct JobSetting {
  std::string name;   // what the user set, e.g. "--epochs"
  std::string value;  // what is compared, e.g. "2"
  std::string shown;  // how the value is shown in an error; empty: `value`
};

struct JobSettingDifference {
  int rank = 0;  // a rank whose setting differs from rank 0's
  std::string name;
  std::string value;        // that rank's, as shown
  std::string rank0_value;  // rank 0's, as shown ("(not set)" where rank 0 has no such setting)
};

// Collective over the ranks of mpi_world(): every rank's settings against rank 0's, by name, in rank order
// then in the order of that rank's settings; empty when they agree (and at once in a world of one). The same
// list on every rank.
[[nodiscard]] std::vector<JobSettingDifference> compare_with_rank0(const std::vector<JobSetting>& settings);

// Collective: throws tp::InvalidArgument on every rank alike when compare_with_rank0() finds a difference,
// naming each one ("worker rank 1 was started with --epochs 1, rank 0 with --epochs 2") and ending with `fix`.
void require_same_settings(const std::vector<JobSetting>& settings, std::string_view component, std::string_view fix);

}  // namespace tp::distribute
