// Writing a file so that readers see either the old contents or the complete
// new ones, never a torn file: checkpoints are rewritten while training and a
// crash (or a kill) in the middle must not lose the last good one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace milrt {

// Streams into a temporary file beside `path` (same directory, so rename is
// atomic) and replaces `path` on commit(): write, fsync the file, rename, fsync
// the directory. Destroying an uncommitted writer removes the temporary file
// and leaves `path` as it was. A process killed mid-write leaves a stale
// ".NAME.tmp.PID.N" beside the file (nothing can remove it), never a bad NAME.
// Every error is a milrt::Error naming the path.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  template <class T> void write_pod(const T& v) { write(&v, sizeof(T)); }
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  void flush_buffer();
  void discard() noexcept;

  std::string path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
  // Small writes (headers, names) are gathered so a file is not thousands of syscalls.
  std::string buf_;
};

// The whole of `data` as `path`, atomically (AtomicFileWriter).
void write_file_atomic(const std::string& path, const void* data, size_t n);

}  // namespace milrt
