#include "util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "milrt/error.h"

namespace milrt {

namespace {

constexpr size_t kBufferBytes = 1 << 20;

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw Error("cannot " + what + " '" + path + "': " + std::strerror(err));
}

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("write", path, errno);
    }
    p += w;
    n -= size_t(w);
  }
}

// The rename is only durable once the directory entry itself is on disk.
void fsync_dir(const std::string& dir, const std::string& path) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("open the directory of", path, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems cannot fsync directories; the data itself is already synced.
  if (rc != 0 && err != EINVAL && err != ENOTSUP) fail("sync the directory of", path, err);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(const std::string& path) : path_(path) {
  if (path.empty()) throw Error("cannot write a file with an empty path");
  std::filesystem::path p(path);
  if (p.filename().empty()) throw Error("cannot write '" + path + "': not a file name");
  std::filesystem::path dir = p.parent_path();
  static std::atomic<uint64_t> counter{0};
  // O_EXCL names (not mkstemp) so the file gets the usual 0666 & ~umask mode.
  for (int attempt = 0; fd_ < 0; ++attempt) {
    std::string name = fmt::format(".{}.tmp.{}.{}", p.filename().string(), ::getpid(), counter.fetch_add(1));
    temp_ = (dir / name).string();
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt > 100)) fail("create a temporary file for", path, errno);
  }
  buf_.reserve(kBufferBytes);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) discard();
}

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFileWriter::flush_buffer() {
  if (buf_.empty()) return;
  write_all(fd_, buf_.data(), buf_.size(), path_);
  buf_.clear();
}

void AtomicFileWriter::write(const void* data, size_t n) {
  if (fd_ < 0 || committed_) throw Error("cannot write '" + path_ + "': writer already committed");
  const char* p = static_cast<const char*>(data);
  written_ += n;
  if (buf_.size() + n <= kBufferBytes) {
    buf_.append(p, n);
    return;
  }
  flush_buffer();
  if (n >= kBufferBytes) write_all(fd_, p, n, path_);
  else buf_.append(p, n);
}

void AtomicFileWriter::commit() {
  if (fd_ < 0 || committed_) throw Error("cannot commit '" + path_ + "': writer already committed");
  flush_buffer();
  if (::fsync(fd_) != 0) fail("sync", path_, errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", path_, errno);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("rename the temporary file onto", path_, errno);
  committed_ = true;
  std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  fsync_dir(dir.empty() ? "." : dir.string(), path_);
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  AtomicFileWriter w(path);
  w.write(data, n);
  w.commit();
}

}  // namespace milrt
