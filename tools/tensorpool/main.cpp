// SPDX-License-Identifier: Apache-2.0
// tensorpool: the command-line tool. Each subcommand lives in its own file and registers itself here.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "commands.hpp"
#include "option_checks.hpp"
#include "tensorpool/core/log.hpp"

namespace {

// The commands of `command`, comma-separated, in the order they were registered.
std::string command_names(const CLI::App& command) {
  std::string names;
  for (const CLI::App* sub : command.get_subcommands([](const CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

// CLI11 reports a misspelt or missing command as "A subcommand is required"; this names the word and lists
// the commands instead. Empty when the words before the first option name commands down to one that takes
// options (its own errors, from CLI11 or our checks, say what is wrong).
std::string command_error(const CLI::App& app, int argc, char** argv) {
  const CLI::App* current = &app;
  std::string path;
  for (int index = 1; index <= argc; ++index) {
    const std::string word = index < argc ? argv[index] : "";
    if (command_names(*current).empty()) return "";  // a leaf command: the rest are its options
    const std::string where = path.empty() ? "" : " of '" + path + "'";
    if (!word.empty() && word.front() == '-') return "";  // an option: CLI11's message names it
    if (word.empty()) {
      if (current->get_require_subcommand_min() == 0) return "";
      return "a command is required; the commands" + where + " are " + command_names(*current);
    }
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : current->get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->check_name(word)) next = sub;
    }
    if (next == nullptr) {
      return "unknown command '" + word + "'; the commands" + where + " are " + command_names(*current);
    }
    path += (path.empty() ? "" : " ") + word;
    current = next;
  }
  return "";
}

}  // namespace

// Exit codes: 0 success, 2 bad input (usage, files, values), 3 out of memory.
int main(int argc, char** argv) {
  CLI::App app{"tensorpool: a deep-learning runtime in which device memory is a first-class citizen"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tensorpool 0.1.0");
  tp::cli::add_train_command(app);
  tp::cli::add_estimate_command(app);
  tp::cli::add_profile_command(app);
  tp::cli::add_replay_command(app);
  tp::cli::add_trace_command(app);
  tp::cli::add_devices_command(app);
  tp::cli::check_every_option(app);
  try {
    // The library falls back to info on a malformed TP_LOG_LEVEL (its first message may come from a destructor);
    // the tool refuses it, like every other bad setting, before any work.
    tp::log::set_level(tp::log::parse_level_env(std::getenv("TP_LOG_LEVEL")));
    app.parse(argc, argv);
  } catch (const CLI::Success& success) {  // --help, --version
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    // One line and exit code 2 for every usage error, like every other bad input.
    const std::string command = command_error(app, argc, argv);
    if (!command.empty()) {
      std::cerr << "tensorpool: " << command << "; run 'tensorpool --help' for what each does\n";
    } else {
      std::cerr << "tensorpool: " << error.what() << "; run 'tensorpool --help' for the options\n";
    }
    return 2;
  } catch (const std::bad_alloc& error) {
    std::cerr << "tensorpool: " << error.what() << '\n';
    return 3;
  } catch (const std::exception& error) {
    std::cerr << "tensorpool: " << error.what() << '\n';
    return 2;
  }
  return 0;
}
