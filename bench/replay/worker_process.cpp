// SPDX-License-Identifier: Apache-2.0
#include "worker_process.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

extern char** environ;

namespace tp::bench {
namespace {

std::string last_line(const std::string& text) {
  std::istringstream stream(text);
  std::string line;
  std::string last;
  while (std::getline(stream, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

}  // namespace

std::string executable_directory() { return std::filesystem::read_symlink("/proc/self/exe").parent_path().string(); }

WorkerResult run_worker(const std::string& binary, const std::vector<std::string>& arguments) {
  WorkerResult result;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) {
    result.error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);

  std::vector<std::string> storage;
  storage.reserve(arguments.size() + 1);
  storage.push_back(binary);
  storage.insert(storage.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& argument : storage) argv.push_back(argument.data());
  argv.push_back(nullptr);

  pid_t pid = 0;
  const int spawn_error = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawn_error != 0) {
    close(pipe_fds[0]);
    result.error = "cannot start " + binary + ": " + std::strerror(spawn_error);
    return result;
  }

  std::string output;
  char buffer[4096];
  for (;;) {
    const ssize_t count = read(pipe_fds[0], buffer, sizeof buffer);
    if (count > 0) {
      output.append(buffer, static_cast<std::size_t>(count));
    } else if (count == 0 || errno != EINTR) {
      break;
    }
  }
  close(pipe_fds[0]);

  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (WIFSIGNALED(status)) {
    result.error = "killed by signal " + std::to_string(WTERMSIG(status));
    return result;
  }
  if (WEXITSTATUS(status) != 0) {
    result.error = "exit status " + std::to_string(WEXITSTATUS(status));
    return result;
  }
  const std::string line = last_line(output);
  try {
    result.json = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& error) {
    result.error = std::string("unparsable worker output '") + line + "': " + error.what();
  }
  return result;
}

}  // namespace tp::bench
