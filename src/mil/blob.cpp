// Blob storage v2 (weight.bin): memory mapping, reading and writing.
//
// Layout (little-endian): a 64-byte file header {u32 count, u32 version = 2,
// 56 zero bytes}, then per blob a 64-byte metadata record {u32 sentinel
// 0xDEADBEEF, u32 dtype code, u64 size_in_bytes, u64 data_offset (absolute),
// u64 padding_bits, 32 reserved bytes} followed by its data, each record on a
// 64-byte boundary. BLOBFILE offsets point at the record.
//
// Decisions (checked against every BLOBFILE of the real Silero bundles in
// shared/testdata, whose records all carry the declared dtype's own code, an
// exact size, data right after the record and zero padding_bits):
// - A record's size must be exactly what the declared shape needs; a larger
//   record is refused rather than silently truncated.
// - A record's dtype code must be the declared dtype's code, except for the
//   byte-identical pairs listed in record_compatible().
// - A sentinel at the offset means a record. Otherwise the bytes are a raw
//   (headerless) array of the declared type only when the file has no valid
//   v2 header (version 2 and 56 zero reserved bytes); in a blob storage file
//   such an offset is an error, not a raw read: the file's own structure
//   says the BLOBFILE offset is wrong.
// - padding_bits is used only for sub-byte records (must be < 8 and leave a
//   whole number of elements); byte-aligned records ignore it, as Apple's
//   reader does.
#include "milrt/blob.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "milrt/error.h"
#include "milrt/npy.h"

namespace milrt {
namespace {

constexpr uint32_t kSentinel = 0xDEADBEEF;
constexpr uint64_t kHeaderSize = 64;
constexpr uint64_t kRecordSize = 64;
constexpr uint64_t kAlign = 64;

class MappedBuffer final : public Buffer {
 public:
  MappedBuffer(void* p, size_t n) : p_(p), n_(n) {}
  ~MappedBuffer() override { if (p_) munmap(p_, n_); }
  const uint8_t* data() const override {
    static const uint8_t kEmpty = 0;
    return p_ ? static_cast<const uint8_t*>(p_) : &kEmpty;
  }
  uint8_t* mutable_data() override { return nullptr; }
  size_t size() const override { return n_; }
 private:
  void* p_;
  size_t n_;
};

uint32_t rd32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t rd64(const uint8_t* p) { return uint64_t(rd32(p)) | uint64_t(rd32(p + 4)) << 32; }
void wr32(uint8_t* p, uint32_t v) { for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i)); }
void wr64(uint8_t* p, uint64_t v) { for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i)); }

bool is_sub_byte(DType t) { return dtype_bits(t) < 8; }

// A v2 header: version 2 and the 56 reserved bytes zero (as every writer,
// Apple's included, leaves them). The zero check keeps raw arrays whose
// second word happens to be 2 from being taken for blob storage files.
bool has_v2_header(const Buffer& f) {
  if (f.size() < kHeaderSize) return false;
  const uint8_t* p = f.data();
  if (rd32(p + 4) != 2) return false;
  for (uint64_t i = 8; i < kHeaderSize; ++i) if (p[i]) return false;
  return true;
}

// Records whose bytes are exactly the declared tensor's bytes although their
// code differs: integers of the same width and the other signedness.
// coremltools' writer (_get_offset_by_writing_data) picks the code of 8, 16
// and 32-bit integers from the numpy value's signedness, not the MIL dtype,
// so e.g. iOS16 palette indices declared uint8 can sit in an int8 record.
// Anything else (a float in an integer record, a different width, packed
// sub-byte data under a byte type) would change the values and is refused.
bool record_compatible(DType declared, DType rec) {
  auto pair = [&](DType a, DType b) {
    return (declared == a && rec == b) || (declared == b && rec == a);
  };
  return declared == rec || pair(DType::UInt8, DType::Int8) || pair(DType::UInt16, DType::Int16) ||
         pair(DType::UInt32, DType::Int32);
}

[[noreturn]] void fail(const std::string& what, uint64_t offset, const std::string& msg) {
  throw Error(what + ": blob at offset " + std::to_string(offset) + ": " + msg);
}

// Element count of `shape`, refusing unknown/negative dims and overflow.
int64_t checked_numel(const Shape& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error(what + ": blob shape " + shape_str(shape) + " has an unknown or negative dim");
    if (d != 0 && n > Tensor::kMaxElements / d)
      throw Error(what + ": blob shape " + shape_str(shape) + " is too large");
    n *= d;
  }
  return n;
}


// A tensor over `nbytes` bytes of `file` at `data_offset`: a view when the
// address suits the element type, else a copy.
Tensor byte_tensor(const std::shared_ptr<Buffer>& file, uint64_t data_offset, DType t, const Shape& shape) {
  const uint8_t* p = file->data() + data_offset;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(t) == 0) return Tensor(t, shape, file, size_t(data_offset));
  Tensor out(t, shape);
  if (out.nbytes()) std::memcpy(out.mutable_data(), p, out.nbytes());
  return out;
}

Tensor decode(const std::shared_ptr<Buffer>& file, uint64_t data_offset, DType t, const Shape& shape, int64_t n) {
  if (is_sub_byte(t)) return unpack_bits(file->data() + data_offset, t, shape, n);
  return byte_tensor(file, data_offset, t, shape);
}

std::string errno_str() { return std::strerror(errno); }

}  // namespace

std::shared_ptr<Buffer> map_fd(int fd, const std::string& what) {
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    std::string e = errno_str();
    ::close(fd);
    throw Error(what + ": error: cannot stat: " + e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(what + ": error: not a regular file");
  }
  size_t n = size_t(st.st_size);
  void* p = nullptr;
  if (n) {
    p = mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string e = errno_str();
      ::close(fd);
      throw Error(what + ": error: cannot map: " + e);
    }
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  return std::make_shared<MappedBuffer>(p, n);
}

std::shared_ptr<Buffer> map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": error: cannot open: " + errno_str());
  return map_fd(fd, path);
}

namespace {
// openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
// or -1 (errno set; ENOSYS where the kernel or headers lack it).
int openat2_beneath(int dirfd, const std::string& rel, int flags) {
#ifdef SYS_openat2
  struct {
    uint64_t flags, mode, resolve;
  } how{uint64_t(flags), 0, 0x08 /*RESOLVE_BENEATH*/ | 0x04 /*RESOLVE_NO_SYMLINKS*/ | 0x02 /*RESOLVE_NO_MAGICLINKS*/};
  return int(syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof how));
#else
  (void)dirfd, (void)rel, (void)flags;
  errno = ENOSYS;
  return -1;
#endif
}

struct Fd {
  int fd = -1;
  ~Fd() { if (fd >= 0) ::close(fd); }
  int release() { int f = fd; fd = -1; return f; }
};
}  // namespace

std::string path_for_message(const std::string& path) {
  std::string r;
  for (char c : path) r += c == '\0' ? std::string("\\0") : std::string(1, c);
  return r;
}

int open_beneath(const std::string& root, const std::string& rel) {
  // The checks below read the whole string; the system calls would stop at a
  // NUL ("..\0/x" passed as a name and opened ".."): refused first.
  if (root.find('\0') != std::string::npos || rel.find('\0') != std::string::npos)
    throw Error(path_for_message(root + "/" + rel) +
                ": error: a NUL byte in the path (refused: the system would open a shorter path than the one checked)");
  const std::string where = root + "/" + rel;
  std::vector<std::string> comps;
  {
    std::string cur;
    for (char c : rel + "/") {
      if (c != '/') { cur += c; continue; }
      if (cur.empty() && comps.empty() && !rel.empty() && rel[0] == '/')
        throw Error(where + ": error: an absolute path where a path inside the directory is expected");
      if (cur == "." || cur == "..")
        throw Error(where + ": error: a '" + cur + "' component where a path inside the directory is expected");
      if (!cur.empty()) comps.push_back(cur);
      cur.clear();
    }
  }
  if (comps.empty()) throw Error(where + ": error: an empty path");
  Fd dir;
  dir.fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir.fd < 0) throw Error(root + ": error: cannot open directory: " + errno_str());
  const int file_flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
  // The fast path: the kernel resolves the whole path below `dir` and refuses
  // any symlink. On any failure the component walk below decides (and says
  // which component is wrong); it is as strict.
  Fd file;
  file.fd = openat2_beneath(dir.fd, rel, file_flags);
  if (file.fd < 0) {
    std::string done;
    for (size_t i = 0; i < comps.size(); ++i) {
      const bool last = i + 1 == comps.size();
      int fd = ::openat(dir.fd, comps[i].c_str(), last ? file_flags : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      done += (done.empty() ? "" : "/") + comps[i];
      if (fd < 0) {
        const int e = errno;
        struct stat st{};
        const bool link = fstatat(dir.fd, comps[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
        if (link || e == ELOOP)
          throw Error(root + "/" + done + ": error: is a symbolic link (refused: a model may not follow links)");
        if (e == ENOTDIR) throw Error(root + "/" + done + ": error: not a directory");
        throw Error(root + "/" + done + ": error: cannot open: " + std::strerror(e));
      }
      if (last) file.fd = fd;
      else { ::close(dir.fd); dir.fd = fd; }
    }
  }
  struct stat st{};
  if (fstat(file.fd, &st) != 0) throw Error(where + ": error: cannot stat: " + errno_str());
  if (!S_ISREG(st.st_mode)) throw Error(where + ": error: not a regular file");
  return file.release();
}

int blob_dtype_code(DType t) {
  switch (t) {
    case DType::FP16: return 1;    case DType::FP32: return 2;
    case DType::UInt8: return 3;   case DType::Int8: return 4;
    case DType::BF16: return 5;    case DType::Int16: return 6;
    case DType::UInt16: return 7;  case DType::Int4: return 8;
    case DType::UInt1: return 9;   case DType::UInt2: return 10;
    case DType::UInt4: return 11;  case DType::UInt3: return 12;
    case DType::UInt6: return 13;  case DType::Int32: return 14;
    case DType::UInt32: return 15; case DType::FP8E4M3: return 16;
    case DType::FP8E5M2: return 17;
    default: return -1;
  }
}

bool blob_dtype_from_code(uint32_t code, DType* out) {
  static constexpr DType kByCode[] = {
      DType::FP16,  DType::FP32,  DType::UInt8, DType::Int8,   DType::BF16,   DType::Int16,
      DType::UInt16, DType::Int4, DType::UInt1, DType::UInt2,  DType::UInt4,  DType::UInt3,
      DType::UInt6, DType::Int32, DType::UInt32, DType::FP8E4M3, DType::FP8E5M2,
  };
  if (code < 1 || code > std::size(kByCode)) return false;
  *out = kByCode[code - 1];
  return true;
}

Tensor read_blob(const std::shared_ptr<Buffer>& file, uint64_t offset, DType dtype,
                 const Shape& shape, const std::string& what) {
  if (dtype == DType::String) throw Error(what + ": a string tensor cannot be stored in a blob");
  const int64_t n = checked_numel(shape, what);
  const int nbits = dtype_bits(dtype);
  const uint64_t need = (uint64_t(n) * uint64_t(nbits) + 7) / 8;
  const uint64_t fsize = file->size();
  const uint8_t* base = file->data();

  const bool record = offset <= fsize && fsize - offset >= kRecordSize && rd32(base + offset) == kSentinel;
  if (!record) {
    if (has_v2_header(*file)) {
      if (offset > fsize || fsize - offset < kRecordSize)
        fail(what, offset, "the metadata record lies past the end of the file (" + std::to_string(fsize) + " bytes)");
      fail(what, offset, "no metadata record (sentinel 0xDEADBEEF) at this offset of a blob storage v2 file");
    }
    // Raw array: the declared type's packed bytes start right at `offset`.
    if (offset > fsize || fsize - offset < need)
      fail(what, offset, "raw " + std::string(dtype_name(dtype)) + " data of shape " + shape_str(shape) +
                             " needs " + std::to_string(need) + " bytes but the file has " + std::to_string(fsize));
    return decode(file, offset, dtype, shape, n);
  }

  const uint8_t* m = base + offset;
  const uint32_t code = rd32(m + 4);
  const uint64_t size = rd64(m + 8), data_offset = rd64(m + 16), padding = rd64(m + 24);
  DType rec;
  if (!blob_dtype_from_code(code, &rec)) fail(what, offset, "unknown blob dtype code " + std::to_string(code));
  if (!record_compatible(dtype, rec))
    fail(what, offset, "the record holds " + std::string(dtype_name(rec)) + " (code " + std::to_string(code) +
                           ") but the value is declared " + std::string(dtype_name(dtype)));
  if (data_offset > fsize || size > fsize - data_offset)
    fail(what, offset, "data [" + std::to_string(data_offset) + ", +" + std::to_string(size) +
                           ") lies past the end of the file (" + std::to_string(fsize) + " bytes)");
  const std::string declared = std::string(dtype_name(dtype)) + " " + shape_str(shape);
  if (is_sub_byte(rec)) {
    // Sub-byte records: the element count follows from size and padding.
    const uint64_t rbits = uint64_t(dtype_bits(rec));
    if (padding >= 8 || size * 8 < padding || (size * 8 - padding) % rbits != 0)
      fail(what, offset, "invalid padding_bits " + std::to_string(padding) + " for " + std::to_string(size) +
                             " bytes of " + std::string(dtype_name(rec)));
    const uint64_t count = (size * 8 - padding) / rbits;
    if (count != uint64_t(n))
      fail(what, offset, "the record holds " + std::to_string(count) + " elements but " + declared + " needs " +
                             std::to_string(n));
  } else if (size != need) {
    fail(what, offset, "the record holds " + std::to_string(size) + " bytes but " + declared + " needs " +
                           std::to_string(need));
  }
  return decode(file, data_offset, dtype, shape, n);
}

std::vector<uint8_t> pack_bits(const Tensor& t) {
  const DType dt = t.dtype();
  if (!is_sub_byte(dt)) throw Error("pack_bits: " + std::string(dtype_name(dt)) + " is not a sub-byte type");
  const int nbits = dtype_bits(dt);
  const int64_t n = t.numel();
  std::vector<uint8_t> out(size_t((uint64_t(n) * uint64_t(nbits) + 7) / 8), 0);
  const uint8_t* src = static_cast<const uint8_t*>(t.data());
  const uint32_t mask = (1u << nbits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t v = src[i];
    bool ok = dt == DType::Int4 ? (v <= 7 || v >= 0xF8) : v <= mask;
    if (!ok)
      throw Error("pack_bits: element " + std::to_string(i) + " (" + std::to_string(t.at(size_t(i))) +
                  ") is out of range for " + std::string(dtype_name(dt)));
    v &= mask;
    uint64_t bit = uint64_t(i) * uint64_t(nbits);
    size_t byte = size_t(bit / 8);
    unsigned shift = unsigned(bit % 8);
    out[byte] = uint8_t(out[byte] | (v << shift));
    if (shift + unsigned(nbits) > 8) out[byte + 1] = uint8_t(out[byte + 1] | (v >> (8 - shift)));
  }
  return out;
}

BlobWriter::BlobWriter() : bytes_(kHeaderSize, 0) { wr32(bytes_.data() + 4, 2); }

uint64_t BlobWriter::add(const Tensor& t) {
  const int code = blob_dtype_code(t.dtype());
  if (code < 0) throw Error("BlobWriter: dtype " + std::string(dtype_name(t.dtype())) + " has no blob storage code");
  std::vector<uint8_t> data;
  uint64_t padding = 0;
  if (is_sub_byte(t.dtype())) {
    data = pack_bits(t);
    padding = uint64_t(data.size()) * 8 - uint64_t(t.numel()) * uint64_t(dtype_bits(t.dtype()));
  } else {
    const uint8_t* p = static_cast<const uint8_t*>(t.data());
    data.assign(p, p + t.nbytes());
  }
  const uint64_t meta = bytes_.size();  // always 64-aligned: every add() pads its end
  bytes_.resize(meta + kRecordSize, 0);
  uint8_t* m = bytes_.data() + meta;
  wr32(m, kSentinel);
  wr32(m + 4, uint32_t(code));
  wr64(m + 8, data.size());
  wr64(m + 16, meta + kRecordSize);
  wr64(m + 24, padding);
  bytes_.insert(bytes_.end(), data.begin(), data.end());
  bytes_.resize((bytes_.size() + kAlign - 1) / kAlign * kAlign, 0);
  wr32(bytes_.data(), ++count_);
  return meta;
}

void BlobWriter::write(const std::string& path) const {
  write_file_atomic(path, std::string(bytes_.begin(), bytes_.end()));
}

Tensor unpack_bits(const uint8_t* src, DType t, const Shape& shape, int64_t n) {
  Tensor out(t, shape);
  uint8_t* dst = static_cast<uint8_t*>(out.mutable_data());
  const int nbits = dtype_bits(t);
  const uint32_t mask = (1u << nbits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bit = uint64_t(i) * uint64_t(nbits);
    uint64_t byte = bit / 8;
    unsigned shift = unsigned(bit % 8);
    // A value spans at most two bytes (nbits <= 6); read the second only when needed.
    uint32_t word = src[byte];
    if (shift + unsigned(nbits) > 8) word |= uint32_t(src[byte + 1]) << 8;
    uint32_t v = (word >> shift) & mask;
    if (t == DType::Int4 && (v & 0x8)) v |= 0xF0;
    dst[i] = uint8_t(v);
  }
  return out;
}

}  // namespace milrt
