// NumPy .npy reading and writing, and atomic file writes.
//
// Format: "\x93NUMPY", major, minor (1.0 / 2.0 / 3.0), a little-endian header
// length (u16 for 1.0, u32 after), then a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
// spaces and '\n', then the raw C-order data.
#include "milrt/npy.h"

#include "util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "milrt/blob.h"
#include "milrt/error.h"

namespace milrt {
namespace {

static_assert(std::endian::native == std::endian::little, "milrt's .npy I/O assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct Descr { const char* code; DType dtype; };
constexpr Descr kDescrs[] = {
    {"f2", DType::FP16},  {"f4", DType::FP32},   {"f8", DType::FP64},  {"i1", DType::Int8},
    {"u1", DType::UInt8}, {"i2", DType::Int16},  {"u2", DType::UInt16}, {"i4", DType::Int32},
    {"u4", DType::UInt32}, {"i8", DType::Int64}, {"u8", DType::UInt64}, {"b1", DType::Bool},
};

// A parser of the header's dict literal: the subset of Python literal syntax
// that numpy (and ast.literal_eval) accepts for the three keys.
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& path) : s_(s), path_(path) {}

  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(path_ + ": error: malformed .npy header: " + msg);
  }

  void ws() { while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_; }
  bool peek(char c) { ws(); return i_ < s_.size() && s_[i_] == c; }
  bool accept(char c) { if (peek(c)) { ++i_; return true; } return false; }
  void expect(char c) { if (!accept(c)) fail(std::string("expected '") + c + "'"); }
  bool at_end() { ws(); return i_ == s_.size(); }

  std::string string() {
    ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a quoted string");
    char q = s_[i_++];
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') fail("escape sequences are not supported");
      ++i_;
    }
    if (i_ >= s_.size()) fail("unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }

  bool boolean() {
    ws();
    for (auto [word, v] : {std::pair{"True", true}, std::pair{"False", false}}) {
      size_t n = std::strlen(word);
      if (s_.substr(i_, n) == word) { i_ += n; return v; }
    }
    fail("expected True or False");
  }

  int64_t dim() {
    ws();
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') fail("expected a non-negative integer dim");
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + (s_[i_++] - '0');
      if (v > Tensor::kMaxElements) fail("shape dim is too large");
    }
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long suffix
    return v;
  }

  Shape shape() {
    expect('(');
    Shape sh;
    while (!accept(')')) {
      sh.push_back(dim());
      if (!accept(',')) { expect(')'); break; }
    }
    if (sh.size() > 64) fail("rank " + std::to_string(sh.size()) + " is too large");
    return sh;
  }

 private:
  std::string_view s_;
  const std::string& path_;
  size_t i_ = 0;
};

struct Header {
  std::string descr;
  bool fortran = false;
  Shape shape;
};

Header parse_header(std::string_view text, const std::string& path) {
  HeaderParser p(text, path);
  Header h;
  bool seen[3] = {false, false, false};
  p.expect('{');
  while (!p.accept('}')) {
    std::string key = p.string();
    p.expect(':');
    int k = -1;
    if (key == "descr") {
      if (p.peek('[')) throw Error(path + ": error: structured .npy dtypes are not supported");
      h.descr = p.string();
      k = 0;
    } else if (key == "fortran_order") {
      h.fortran = p.boolean();
      k = 1;
    } else if (key == "shape") {
      h.shape = p.shape();
      k = 2;
    } else {
      p.fail("unexpected key '" + key + "'");
    }
    if (seen[k]) p.fail("duplicate key '" + key + "'");
    seen[k] = true;
    if (!p.accept(',')) { p.expect('}'); break; }
  }
  if (!p.at_end()) p.fail("trailing characters after the dict");
  if (!seen[0] || !seen[1] || !seen[2]) p.fail("needs the keys 'descr', 'fortran_order' and 'shape'");
  return h;
}

DType dtype_of_descr(const std::string& d, const std::string& path) {
  std::string code = d;
  char order = '=';
  if (!code.empty() && std::strchr("<>|=", code[0])) { order = code[0]; code = code.substr(1); }
  for (const auto& e : kDescrs) {
    if (code != e.code) continue;
    if (order == '>' && dtype_size(e.dtype) > 1)
      throw Error(path + ": error: big-endian .npy data ('" + d + "') is not supported; save it little-endian");
    return e.dtype;
  }
  throw Error(path + ": error: unsupported .npy dtype '" + d + "'");
}

Tensor parse(const uint8_t* b, size_t n, const std::string& path) {
  if (n < kMagicLen + 2 || std::memcmp(b, kMagic, kMagicLen) != 0) throw Error(path + ": error: not a .npy file (bad magic)");
  const int major = b[6], minor = b[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    throw Error(path + ": error: unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
  const size_t len_size = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_size;
  if (n < prefix) throw Error(path + ": error: truncated .npy file (no header length)");
  uint64_t hlen = uint64_t(b[8]) | uint64_t(b[9]) << 8;
  if (len_size == 4) hlen |= uint64_t(b[10]) << 16 | uint64_t(b[11]) << 24;
  if (hlen > n - prefix)
    throw Error(path + ": error: truncated .npy file (header of " + std::to_string(hlen) + " bytes, file of " +
                std::to_string(n) + ")");
  Header h = parse_header(std::string_view(reinterpret_cast<const char*>(b + prefix), size_t(hlen)), path);
  if (h.fortran) throw Error(path + ": error: Fortran-order .npy arrays are not supported; save it in C order");
  const DType dt = dtype_of_descr(h.descr, path);

  int64_t numel = 1;
  for (int64_t d : h.shape) {
    if (d != 0 && numel > Tensor::kMaxElements / d)
      throw Error(path + ": error: .npy shape " + shape_str(h.shape) + " is too large");
    numel *= d;
  }
  const uint64_t need = uint64_t(numel) * dtype_size(dt);
  const uint64_t have = n - prefix - hlen;
  if (have != need)
    throw Error(path + ": error: .npy data of " + std::string(h.descr) + " " + shape_str(h.shape) + " needs " +
                std::to_string(need) + " bytes but the file has " + std::to_string(have) +
                (have < need ? " (truncated)" : " (trailing bytes)"));

  Tensor t(dt, h.shape);
  if (need) std::memcpy(t.mutable_data(), b + prefix + hlen, size_t(need));
  if (dt == DType::Bool) {
    uint8_t* p = static_cast<uint8_t*>(t.mutable_data());
    for (int64_t i = 0; i < numel; ++i) p[i] = p[i] != 0;
  }
  return t;
}

// The dtype a tensor is written as: its own, or the nearest .npy type that
// holds its values exactly (sub-byte integers as bytes, bf16/fp8 as fp32).
DType npy_dtype(DType t) {
  switch (t) {
    case DType::Int4: return DType::Int8;
    case DType::UInt1: case DType::UInt2: case DType::UInt3: case DType::UInt4: case DType::UInt6:
      return DType::UInt8;
    case DType::BF16: case DType::FP8E4M3: case DType::FP8E5M2: return DType::FP32;
    case DType::String: throw Error("string tensors cannot be written as .npy");
    default: return t;
  }
}

std::string descr_of(DType t) {
  for (const auto& e : kDescrs)
    if (e.dtype == t) return std::string(dtype_size(t) == 1 ? "|" : "<") + e.code;
  throw Error("no .npy dtype for " + std::string(dtype_name(t)));
}

}  // namespace

Tensor parse_npy(const std::string& bytes, const std::string& path) {
  return parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

Tensor read_npy(const std::string& path) {
  auto file = map_file(path);
  return parse(file->data(), file->size(), path);
}

std::string serialize_npy(const Tensor& t) {
  const DType dt = npy_dtype(t.dtype());
  // Bools go through uint8 so that every byte is exactly 0 or 1.
  Tensor src = t.cast(dt == DType::Bool ? DType::UInt8 : dt);

  std::string shape = "(";
  for (size_t i = 0; i < src.shape().size(); ++i) shape += std::to_string(src.shape()[i]) + ", ";
  if (src.rank() == 1) shape.pop_back();            // "(3,)"
  else if (src.rank() > 1) shape.resize(shape.size() - 2);
  shape += ")";
  std::string dict = "{'descr': '" + descr_of(dt) + "', 'fortran_order': False, 'shape': " + shape + ", }";

  // Pad with spaces so the data starts on a 64-byte boundary; '\n' ends the
  // header. Format 2.0 only when the header outgrows 1.0's u16 length.
  auto padded = [&](size_t prefix) { size_t h = dict.size() + 1; return h + (64 - (prefix + h) % 64) % 64; };
  const bool v1 = padded(10) <= 65535;
  const size_t prefix = v1 ? 10 : 12;
  const size_t hlen = padded(prefix);
  dict.append(hlen - dict.size() - 1, ' ');
  dict += '\n';

  std::string out(kMagic, kMagicLen);
  out += char(v1 ? 1 : 2);
  out += char(0);
  for (size_t i = 0; i < prefix - 8; ++i) out += char((hlen >> (8 * i)) & 0xff);
  out += dict;
  out.append(static_cast<const char*>(src.data()), src.nbytes());
  return out;
}

void write_npy(const std::string& path, const Tensor& t) { write_file_atomic(path, serialize_npy(t)); }

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace milrt
