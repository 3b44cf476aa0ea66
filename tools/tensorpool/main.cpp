// tensorpool: the command-line tool. Each subcommand lives in its own file and registers itself here.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <new>

#include "commands.hpp"

// Exit codes: 0 success, 2 bad input (usage, files, values), 3 out of memory.
int main(int argc, char** argv) {
  CLI::App app{"tensorpool: a deep-learning runtime in which device memory is a first-class citizen"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tensorpool 0.1.0");
  tp::cli::add_train_command(app);
  tp::cli::add_replay_command(app);
  tp::cli::add_trace_command(app);
  tp::cli::add_devices_command(app);
  tp::cli::add_estimate_command(app);
  tp::cli::add_profile_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& success) {  // --help, --version
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    // One line and exit code 2 for every usage error, like every other bad input.
    std::cerr << "tensorpool: " << error.what() << "; run 'tensorpool --help' for the options\n";
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
