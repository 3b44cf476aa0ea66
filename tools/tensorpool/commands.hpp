// SPDX-License-Identifier: Apache-2.0
#pragma once
// Subcommand registration: each add_*_command attaches one subcommand (its options and callback) to the app.
#include <CLI/CLI.hpp>

namespace tp::cli {

// `tensorpool replay`: replays an allocation trace on each allocator (replay_command.cpp).
void add_replay_command(CLI::App& app);
// `tensorpool trace generate`: writes the synthetic traces of trace_generators.hpp (trace_command.cpp).
void add_trace_command(CLI::App& app);
// `tensorpool devices`: lists the devices and their memory figures (devices_command.cpp).
void add_devices_command(CLI::App& app);
void add_train_command(CLI::App& app);
// `tensorpool estimate`: per-tensor memory of a training step before running (estimate_command.cpp).
void add_estimate_command(CLI::App& app);
// `tensorpool profile`: N training steps under the memory profiler; writes its reports (profile_command.cpp).
void add_profile_command(CLI::App& app);

}  // namespace tp::cli
