#pragma once
// Subcommand registration: each add_*_command attaches one subcommand (its options and callback) to the app.
#include <CLI/CLI.hpp>

namespace tp::cli {

void add_replay_command(CLI::App& app);

}  // namespace tp::cli
