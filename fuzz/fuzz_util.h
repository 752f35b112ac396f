// Shared by the fuzz targets: a per-process scratch directory (removed at
// exit) and writing the input to a file there, for readers that take a path.
// A milrt::Error is a correct rejection; anything else escaping a target (a
// crash, a sanitizer report, another exception, a hang, a huge allocation)
// is a finding, and libFuzzer stops on it.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace milrt_fuzz {

// milrt-fuzz-<pid>-XXXXXX in /dev/shm (memory: the readers' files and the
// round trips' fsyncs cost nothing there) or else the temp directory,
// created on first use, removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::filesystem::path tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::string templ = (tmp / ("milrt-fuzz-" + std::to_string(getpid()) + "-XXXXXX")).string();
    if (!mkdtemp(templ.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    static std::string to_remove = templ;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(to_remove, ec);
    });
    return templ;
  }();
  return dir;
}

// Writes `n` bytes to `name` in the scratch directory; returns its path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t n) {
  std::string path = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (n && std::fwrite(data, 1, n, f) != n) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

// Stops the run with a message: a property that must hold did not.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace milrt_fuzz
