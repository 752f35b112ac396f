// Running the milrt CLI from tests: a child process with separate stdout and
// stderr, a deadline, and its exit status and peak memory.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace milrt::test {

struct CliResult {
  int exit_code = -1;   // -1 when the process did not exit normally
  int signal = 0;       // the terminating signal, 0 when it exited
  bool timed_out = false;
  std::string out, err;
  long max_rss_kb = 0;  // the child's peak resident set
};

// Runs `MILRT_CLI args...` (or $MILRT_TEST_CLI) with stdin from /dev/null, killing it after
// `timeout_s` seconds. Reads both pipes concurrently so neither can fill up
// and stall the child.
inline CliResult run_cli(const std::vector<std::string>& args, int timeout_s = 60) {
  CliResult r;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return r;
  }
  // MILRT_TEST_CLI runs the tests against another build of the CLI (e.g. a sanitizer build).
  const char* cli = std::getenv("MILRT_TEST_CLI");
  std::vector<std::string> argv_s{cli && *cli ? cli : MILRT_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return r;
  }

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !r.timed_out) {
      r.timed_out = true;
      kill(pid, SIGKILL);  // the pipes then close and the loop ends
    }
    int n = poll(fds, 2, r.timed_out ? 1000 : int(std::min<long long>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t k = read(fds[i].fd, buf, sizeof buf);
      if (k > 0) {
        sinks[i]->append(buf, size_t(k));
      } else if (k == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  rusage ru{};
  while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {}
  r.max_rss_kb = ru.ru_maxrss;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

// Everything about a run, for failure messages.
inline std::string describe(const CliResult& r) {
  return "exit code " + std::to_string(r.exit_code) + (r.signal ? ", signal " + std::to_string(r.signal) : "") +
         (r.timed_out ? ", TIMED OUT" : "") + "\n--- stdout ---\n" + r.out.substr(0, 4000) +
         "\n--- stderr ---\n" + r.err.substr(0, 4000);
}

// The CLI's contract for bad input: exit code 2, no crash, no hang, and
// exactly one line on stderr that says "error:".
inline ::testing::AssertionResult IsOneLineError(const CliResult& r) {
  auto fail = [&](const std::string& why) { return ::testing::AssertionFailure() << why << "\n" << describe(r); };
  if (r.timed_out) return fail("the CLI hung");
  if (r.signal) return fail("the CLI was killed by a signal");
  if (r.exit_code != 2) return fail("expected exit code 2");
  if (r.err.empty() || r.err.back() != '\n') return fail("stderr is not one newline-terminated line");
  if (r.err.find('\n') != r.err.size() - 1) return fail("stderr has more than one line");
  if (r.err.find("error:") == std::string::npos) return fail("stderr does not say \"error:\"");
  return ::testing::AssertionSuccess();
}

// IsOneLineError, and the line starts with "path:line:col: error:".
inline ::testing::AssertionResult IsErrorAt(const CliResult& r, const std::string& path, int line, int col) {
  if (auto ok = IsOneLineError(r); !ok) return ok;
  std::string want = path + ":" + std::to_string(line) + ":" + std::to_string(col) + ": error:";
  if (r.err.rfind(want, 0) != 0)
    return ::testing::AssertionFailure() << "expected the error to start with '" << want << "'\n" << describe(r);
  return ::testing::AssertionSuccess();
}

// A successful run: exit 0, nothing on stderr.
inline ::testing::AssertionResult Succeeded(const CliResult& r) {
  if (r.timed_out || r.signal || r.exit_code != 0 || !r.err.empty())
    return ::testing::AssertionFailure() << "expected success\n" << describe(r);
  return ::testing::AssertionSuccess();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) ADD_FAILURE() << "cannot write " << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace milrt::test
