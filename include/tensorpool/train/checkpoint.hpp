// SPDX-License-Identifier: Apache-2.0
#pragma once
// Checkpoints: a training run's tensors (variables, optimizer slots), step, epoch, position in the epoch,
// RNG seed and free-form metadata, saved durably into a directory and restored after a crash.
//
// Directory layout (one writer per directory at a time):
//   checkpoint-<step>.tpck   one complete checkpoint each (format: docs/checkpoints.md)
//   latest                   the file name of the newest durable checkpoint, one line
//   *.tmp                    a save in progress, or left by a save that crashed; ignored by loads,
//                            removed by the next save
//
// Invariants after save_checkpoint returns: the new checkpoint file and `latest` naming it are on disk
// (fsync'd, renamed into place, directory fsync'd); at most `keep` checkpoint files remain, the new one
// and the newest ones before it by step. A save that fails leaves every existing checkpoint and `latest`
// as they were. A load never modifies or deletes anything.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "tensorpool/train/host_tensor.hpp"

namespace tp::train {

struct CheckpointState {                        // {} initialisers: designated initialisers may name any subset
  std::map<std::string, HostTensor> tensors{};  // by name: variables and optimizer slots
  std::int64_t step = 0;                        // optimizer steps completed, >= 0
  std::int64_t epoch = 0;                       // epoch to resume in (0-based)
  std::int64_t batch_in_epoch = 0;              // batches of `epoch` already done
  std::uint64_t rng_seed = 0;                   // seed that reproduces the data order from here
  std::map<std::string, std::string> metadata{};

  friend bool operator==(const CheckpointState&, const CheckpointState&) = default;
};

struct CheckpointOptions {
  // Checkpoint files left after a save, the new one included; >= 1. Two means a corrupted newest file
  // still leaves one to fall back to.
  std::size_t keep = 2;
};

inline constexpr char kCheckpointMagic[] = "TPCKPT01";  // 8 bytes on disk, no terminator
inline constexpr std::uint32_t kCheckpointVersion = 1;
inline constexpr char kLatestFileName[] = "latest";

// "checkpoint-<step>.tpck"
[[nodiscard]] std::string checkpoint_file_name(std::int64_t step);

// Writes `state` as <directory>/checkpoint-<step>.tpck (creating the directory), points `latest` at it,
// then deletes checkpoints beyond `options.keep`. Returns the new file's path.
// Throws tp::InvalidArgument for a negative step, an empty tensor name or a tensor whose bytes do not match
// its dtype and dims (nothing is written); tp::DeviceError naming the path and the OS's reason when the
// directory cannot be created or a file cannot be written, synced or renamed (the previous checkpoints
// stay intact).
std::filesystem::path save_checkpoint(const std::filesystem::path& directory, const CheckpointState& state,
                                      const CheckpointOptions& options = {});

// Reads one checkpoint file strictly. Throws tp::DataError naming the file and the problem when it is
// missing, truncated, not a checkpoint (magic), of another version, fails its CRC or is malformed; throws
// tp::DeviceError naming the file when the OS refuses to read it.
[[nodiscard]] CheckpointState load_checkpoint(const std::filesystem::path& file);

// The checkpoint `latest` names in `directory`; when that one is refused (tp::DataError), the other
// checkpoint files there, newest step first, with one line on stderr naming the refused file(s), the
// reason and the file used instead. std::nullopt when the directory does not exist or holds no
// checkpoint. Throws tp::DataError listing every refusal when no checkpoint there is valid, and
// tp::DeviceError when the OS refuses to list or read the directory.
[[nodiscard]] std::optional<CheckpointState> load_latest_checkpoint(const std::filesystem::path& directory);

}  // namespace tp::train
