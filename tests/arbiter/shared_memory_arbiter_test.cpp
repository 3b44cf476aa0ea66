// SPDX-License-Identifier: Apache-2.0
// SharedMemoryArbiter across real processes. Each child is this test binary re-executed through
// /proc/self/exe with --gtest_filter=ChildRole.Run and its role in TP_ARBITER_* environment variables
// (ChildRole.Run skips itself when TP_ARBITER_CHILD is unset, so a normal run is unaffected). Covered: two
// processes sharing one budget, a child killed with SIGKILL while holding a reservation (as a zombie and once
// reaped), a child exiting normally, a child killed while holding the robust mutex, and a fork()ed child
// refused the parent's ids. The single-process checks of the segment are in shared_memory_segment_test.cpp.
#include "tensorpool/arbiter/shared_memory_arbiter.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tensorpool/core/error.hpp"
#include "tensorpool/core/units.hpp"

extern char** environ;

namespace tp::arbiter {
namespace {

constexpr std::size_t kBudget = 10 * kMiB;

std::string unique_segment() {
  static std::atomic<int> counter{0};
  return "/tensorpool-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// A unique segment name, unlinked when the test ends.
struct Segment {
  Segment() : name(unique_segment()) { SharedMemoryArbiter::remove(name); }
  ~Segment() { SharedMemoryArbiter::remove(name); }
  std::string name;
};

// A child process running ChildRole.Run. It writes one byte to its report pipe when it reached its point
// (Y/N: reservation granted or refused; L: holding the segment's mutex) and, in "hold" mode, exits normally
// once the parent closes its wait pipe. The destructor kills and reaps a child still running.
class Child {
 public:
  Child(const std::string& mode, const std::string& segment, std::size_t quota, std::size_t reserve) {
    int report[2];
    int wait[2];
    if (::pipe2(report, O_CLOEXEC) != 0 || ::pipe2(wait, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe2 failed";
    // Everything the child needs is built before fork: after it, only async-signal-safe calls.
    std::vector<std::string> environment;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      if (std::strncmp(*entry, "GTEST_", 6) != 0) environment.emplace_back(*entry);  // no sharding, no XML
    }
    environment.push_back("TP_ARBITER_CHILD=" + mode);
    environment.push_back("TP_ARBITER_SEGMENT=" + segment);
    environment.push_back("TP_ARBITER_BUDGET=" + std::to_string(kBudget));
    environment.push_back("TP_ARBITER_QUOTA=" + std::to_string(quota));
    environment.push_back("TP_ARBITER_RESERVE=" + std::to_string(reserve));
    environment.push_back("TP_ARBITER_REPORT_FD=" + std::to_string(report[1]));
    environment.push_back("TP_ARBITER_WAIT_FD=" + std::to_string(wait[0]));
    std::vector<char*> envp;
    for (std::string& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);
    std::string program = "/proc/self/exe";
    std::string filter = "--gtest_filter=ChildRole.Run";
    char* argv[] = {program.data(), filter.data(), nullptr};

    pid_ = ::fork();
    if (pid_ == 0) {
      ::fcntl(report[1], F_SETFD, 0);  // the child's two ends survive exec; every other descriptor closes
      ::fcntl(wait[0], F_SETFD, 0);
      ::execve(program.c_str(), argv, envp.data());
      ::_exit(127);
    }
    ::close(report[1]);
    ::close(wait[0]);
    report_fd_ = report[0];
    wait_fd_ = wait[1];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      reap();
    }
    ::close(report_fd_);
    if (wait_fd_ >= 0) ::close(wait_fd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // The child's byte, or '\0' when it exited or 60 s passed first.
  char report() {
    pollfd entry{report_fd_, POLLIN, 0};
    if (::poll(&entry, 1, 60'000) != 1) return '\0';
    char byte = '\0';
    return ::read(report_fd_, &byte, 1) == 1 ? byte : '\0';
  }
  // Lets a "hold" child return from its test and exit normally; its exit status.
  int finish() {
    ::close(wait_fd_);
    wait_fd_ = -1;
    return reap();
  }
  void kill_now() { ::kill(pid_, SIGKILL); }
  int reap() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int report_fd_ = -1;
  int wait_fd_ = -1;
  bool reaped_ = false;
};

// The child's side. Skipped unless a parent test started this process as a child.
TEST(ChildRole, Run) {
  const char* mode = std::getenv("TP_ARBITER_CHILD");
  if (mode == nullptr) GTEST_SKIP() << "runs only as a child of the cross-process tests";
  const auto number = [](const char* variable) { return std::stoull(std::getenv(variable)); };
  const int report_fd = static_cast<int>(number("TP_ARBITER_REPORT_FD"));
  const int wait_fd = static_cast<int>(number("TP_ARBITER_WAIT_FD"));
  SharedMemoryArbiter arbiter(std::getenv("TP_ARBITER_SEGMENT"), number("TP_ARBITER_BUDGET"));
  const ClientId client = arbiter.register_client("child-" + std::to_string(::getpid()), number("TP_ARBITER_QUOTA"));
  const char granted = arbiter.try_reserve(client, number("TP_ARBITER_RESERVE")) ? 'Y' : 'N';
  if (std::string(mode) == "hold_lock") {
    arbiter.hold_lock_for_testing([&] {
      ASSERT_EQ(::write(report_fd, "L", 1), 1);
      for (;;) ::pause();  // until SIGKILL, holding the segment's mutex
    });
  }
  ASSERT_EQ(::write(report_fd, &granted, 1), 1);
  char byte = '\0';
  while (::read(wait_fd, &byte, 1) > 0) {}
  // Returning destroys the arbiter, which unregisters the client: the normal-exit path.
}

// Runs `call` on another thread. If it does not return in time (a deadlocked mutex), records a failure and
// ends the process with status 1 rather than hang the suite (the blocked thread cannot be joined).
template <typename Call>
auto within_deadline(Call call) {
  std::packaged_task<decltype(call())()> task(std::move(call));
  auto result = task.get_future();
  std::thread(std::move(task)).detach();
  if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "the arbiter call did not return within 30 s (deadlock?)";
    std::_Exit(1);
  }
  return result.get();
}

TEST(SharedMemoryArbiter, TwoProcessesShareOneBudget) {
  Segment segment;
  SharedMemoryArbiter arbiter(segment.name, kBudget);
  Child first("hold", segment.name, 8 * kMiB, 6 * kMiB);
  ASSERT_EQ(first.report(), 'Y');
  Child second("hold", segment.name, 8 * kMiB, 6 * kMiB);
  ASSERT_EQ(second.report(), 'N') << "6 + 6 MiB would pass the 10 MiB budget";
  EXPECT_EQ(arbiter.reserved_bytes(), 6 * kMiB);
  ASSERT_EQ(arbiter.clients().size(), 2u);
  EXPECT_EQ(arbiter.clients()[0].process_id, first.pid());
  EXPECT_EQ(arbiter.clients()[0].name, "child-" + std::to_string(first.pid()));

  const ClientId parent = arbiter.register_client("parent", 8 * kMiB);
  EXPECT_TRUE(arbiter.try_reserve(parent, 4 * kMiB));
  EXPECT_FALSE(arbiter.try_reserve(parent, 1)) << "the three processes together hold the whole budget";
  EXPECT_EQ(arbiter.reserved_bytes(), kBudget);

  EXPECT_EQ(first.finish(), 0);
  EXPECT_EQ(second.finish(), 0);
  EXPECT_EQ(arbiter.reserved_bytes(), 4 * kMiB) << "children that exit normally unregister";
  ASSERT_EQ(arbiter.clients().size(), 1u);
  EXPECT_EQ(arbiter.clients()[0].name, "parent");
}

TEST(SharedMemoryArbiter, KilledProcessIsReclaimedByTheNextCall) {
  Segment segment;
  SharedMemoryArbiter arbiter(segment.name, kBudget);
  const ClientId parent = arbiter.register_client("parent", kBudget);
  for (const bool reap_first : {false, true}) {
    SCOPED_TRACE(reap_first ? "reaped" : "zombie");
    Child child("hold", segment.name, 8 * kMiB, 8 * kMiB);
    ASSERT_EQ(child.report(), 'Y');
    EXPECT_EQ(arbiter.reserved_bytes(), 8 * kMiB);
    EXPECT_FALSE(arbiter.try_reserve(parent, 4 * kMiB));
    const std::uint64_t generation = arbiter.generation();

    child.kill_now();
    if (reap_first) {
      EXPECT_TRUE(WIFSIGNALED(child.reap()));
    } else {
      // Not reaped yet: a zombie, which holds nothing. Wait until the kernel shows it as one.
      while (::kill(child.pid(), 0) == 0) {
        char path[64];
        std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(child.pid()));
        FILE* file = std::fopen(path, "r");
        char state = '?';
        if (file != nullptr) {
          (void)std::fscanf(file, "%*d (%*[^)]) %c", &state);
          std::fclose(file);
        }
        if (state == 'Z') break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    EXPECT_TRUE(arbiter.try_reserve(parent, 4 * kMiB)) << "the next call reclaimed the killed child's 8 MiB";
    EXPECT_EQ(arbiter.reserved_bytes(), 4 * kMiB);
    EXPECT_GT(arbiter.generation(), generation);
    ASSERT_EQ(arbiter.clients().size(), 1u);
    arbiter.release(parent, 4 * kMiB);
  }
}

TEST(SharedMemoryArbiter, OwnerDeathWhileHoldingTheMutexIsRecovered) {
  Segment segment;
  SharedMemoryArbiter arbiter(segment.name, kBudget);
  Child child("hold_lock", segment.name, 6 * kMiB, 6 * kMiB);
  ASSERT_EQ(child.report(), 'L') << "the child holds the segment's mutex";
  child.kill_now();
  child.reap();
  // The robust mutex reports EOWNERDEAD to the next caller, which repairs the table and carries on.
  EXPECT_EQ(within_deadline([&] { return arbiter.reserved_bytes(); }), 0u);
  const ClientId parent = arbiter.register_client("parent", kBudget);
  EXPECT_TRUE(arbiter.try_reserve(parent, kBudget));
  EXPECT_EQ(arbiter.clients().size(), 1u);
}

TEST(SharedMemoryArbiter, ForkedChildCannotUseTheParentsIds) {
  Segment segment;
  SharedMemoryArbiter arbiter(segment.name, kBudget);
  const ClientId client = arbiter.register_client("parent", kBudget);
  const pid_t pid = ::fork();
  if (pid == 0) {
    bool refused = false;
    try {
      (void)arbiter.try_reserve(client, kMiB);
    } catch (const InvalidArgument&) {
      refused = true;
    }
    arbiter.unregister_client(client);  // ignored: not this process's client
    ::_exit(refused ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child used or unregistered the parent's id";
  EXPECT_EQ(arbiter.clients().size(), 1u);
  EXPECT_TRUE(arbiter.try_reserve(client, kMiB));
}

}  // namespace
}  // namespace tp::arbiter
