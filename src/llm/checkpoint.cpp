#include "llm/checkpoint.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "milrt/error.h"
#include "util/atomic_file.h"

namespace milrt::llm {

static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian; add byte swapping");

namespace {

constexpr uint32_t kMagicV1 = 0x616b3432;  // "ak42" read as a little-endian uint32
constexpr int64_t kV1HeaderBytes = 256;
constexpr int64_t kV0HeaderBytes = 7 * 4;
// Far beyond any Llama released, small enough that sizes cannot overflow int64.
constexpr int64_t kMaxSize = int64_t(1) << 20;  // dim, hidden, vocab, seq
constexpr int64_t kMaxLayers = 4096;

// Sequential reads of one file that know its size, so a short file is
// reported as such (with how much was expected) rather than as garbage.
class FileReader {
 public:
  FileReader(const std::string& path, const char* what) : path_(path), what_(what) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      throw Error(fmt::format("{} '{}': no such file", what, path));
    size_ = std::filesystem::file_size(path, ec);
    if (ec) throw Error(fmt::format("{} '{}': cannot read its size: {}", what, path, ec.message()));
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) throw Error(fmt::format("{} '{}': cannot open: {}", what, path, std::strerror(errno)));
  }
  ~FileReader() { std::fclose(f_); }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  uint64_t size() const { return size_; }
  uint64_t left() const { return size_ - pos_; }
  [[noreturn]] void fail(const std::string& why) const { throw Error(fmt::format("{} '{}': {}", what_, path_, why)); }

  void read(void* dst, uint64_t n, const std::string& field) {
    if (n > left())
      fail(fmt::format("truncated: {} needs {} bytes at offset {}, the file has {} bytes", field, n, pos_, size_));
    if (n && std::fread(dst, 1, n, f_) != n) fail(fmt::format("read error in {}: {}", field, std::strerror(errno)));
    pos_ += n;
  }
  template <class T> T pod(const std::string& field) {
    T v;
    read(&v, sizeof v, field);
    return v;
  }
  void skip(uint64_t n, const std::string& field) {
    if (n > left()) fail(fmt::format("truncated in {}", field));
    if (std::fseek(f_, long(n), SEEK_CUR) != 0) fail("seek error in " + field);
    pos_ += n;
  }

 private:
  std::string path_;
  const char* what_;
  std::FILE* f_ = nullptr;
  uint64_t size_ = 0, pos_ = 0;
};

// One stretch of a checkpoint: a weight, or (empty name) a span nobody reads.
struct Item {
  std::string name;
  int64_t numel;
};

// Every stretch after the header, in file order (export.py's legacy_export
// and version1_export). Both store each kind of weight for all layers together.
std::vector<Item> file_layout(const LlamaConfig& c, int version) {
  std::map<std::string, int64_t> numel;
  for (const WeightSpec& s : llama_weight_specs(c)) numel[s.name] = shape_numel(s.shape);
  std::vector<Item> items;
  auto one = [&](const std::string& n) { items.push_back({n, numel.at(n)}); };
  auto per_layer = [&](const char* kind) {
    for (int64_t i = 0; i < c.layers; ++i) one(fmt::format("l{}_{}", i, kind));
  };
  if (version == 0) {
    one("tok_embeddings");
    for (const char* k : {"rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"}) per_layer(k);
    one("rms_final");
    items.push_back({"", c.seq * c.head_dim()});  // freq_cis real and imaginary, seq x head_dim/2 each
  } else {
    per_layer("rms_att");
    per_layer("rms_ffn");
    one("rms_final");
    one("tok_embeddings");
    for (const char* k : {"wq", "wk", "wv", "wo", "w1", "w2", "w3"}) per_layer(k);
  }
  if (!c.shared_classifier) one("wcls");
  return items;
}

int64_t layout_bytes(const std::vector<Item>& items) {
  int64_t n = 0;
  for (const Item& it : items) n += it.numel * 4;
  return n;
}

// layout_bytes(file_layout(c, version)) by arithmetic: a header claiming
// thousands of layers is refused by its size before any of its tens of
// thousands of names is built (cannot overflow: every size <= kMaxSize).
int64_t file_bytes(const LlamaConfig& c, int version) {
  int64_t per_layer = 2 * c.dim + 2 * c.dim * c.dim + 2 * c.kv_dim() * c.dim + 3 * c.hidden * c.dim;
  int64_t n = c.vocab * c.dim + c.layers * per_layer + c.dim;
  if (version == 0) n += c.seq * c.head_dim();
  if (!c.shared_classifier) n += c.vocab * c.dim;
  return n * 4;
}

// Header sizes from the file, checked before they size anything.
LlamaConfig config_from_header(const int32_t h[7], bool shared, const FileReader& r) {
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; ++i) {
    int64_t limit = i == 2 ? kMaxLayers : kMaxSize;
    if (h[i] <= 0 || h[i] > limit)
      r.fail(fmt::format("implausible header: {} = {} (expected 1..{}); not a llama2.c checkpoint?", names[i], h[i],
                         limit));
  }
  LlamaConfig c;
  c.dim = h[0], c.hidden = h[1], c.layers = h[2], c.heads = h[3], c.kv_heads = h[4], c.vocab = h[5], c.seq = h[6];
  c.shared_classifier = shared;
  try {
    c.validate();
  } catch (const Error& e) {
    r.fail(std::string("implausible header: ") + e.what());
  }
  return c;
}

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

}  // namespace

void check_llama_weights(const LlamaWeights& w) {
  w.cfg.validate();
  std::vector<WeightSpec> specs = llama_weight_specs(w.cfg);
  for (const WeightSpec& s : specs) {
    auto it = w.tensors.find(s.name);
    if (it == w.tensors.end()) throw Error(fmt::format("llama weights ({}): '{}' is missing", w.cfg.str(), s.name));
    const Tensor& t = it->second;
    if (t.dtype() != DType::FP32 || t.shape() != s.shape)
      throw Error(fmt::format("llama weights ({}): '{}' is {} {}, expected fp32 {}", w.cfg.str(), s.name,
                              dtype_name(t.dtype()), shape_str(t.shape()), shape_str(s.shape)));
  }
  if (w.tensors.size() != specs.size()) {
    std::set<std::string> known;
    for (const WeightSpec& s : specs) known.insert(s.name);
    for (const auto& [name, t] : w.tensors)
      if (!known.count(name)) throw Error(fmt::format("llama weights ({}): unexpected tensor '{}'", w.cfg.str(), name));
  }
}

LlamaWeights load_llama2c_checkpoint(const std::string& path) {
  FileReader r(path, "checkpoint");
  if (r.size() < uint64_t(kV0HeaderBytes))
    r.fail(fmt::format("truncated: {} bytes, shorter than a header ({} bytes)", r.size(), kV0HeaderBytes));
  uint32_t first = r.pod<uint32_t>("the header");
  int version = 0;
  int32_t h[7];
  bool shared = true;
  if (first == kMagicV1) {
    if (r.size() < uint64_t(kV1HeaderBytes))
      r.fail(fmt::format("truncated: {} bytes, shorter than a version 1 header ({} bytes)", r.size(), kV1HeaderBytes));
    version = r.pod<int32_t>("the version");
    if (version != 1)
      r.fail(fmt::format("unsupported version {} (this reader knows 0 and 1; 2 is llama2.c's int8 format)", version));
    r.read(h, sizeof h, "the header");
    uint8_t flag = r.pod<uint8_t>("the shared-classifier flag");
    if (flag > 1) r.fail(fmt::format("implausible header: shared_classifier flag = {} (expected 0 or 1)", flag));
    shared = flag == 1;
    r.skip(kV1HeaderBytes - 4 - 4 - 28 - 1, "the header padding");
  } else {
    h[0] = int32_t(first);
    r.read(h + 1, 6 * 4, "the header");
    // Legacy files say "separate classifier" with a negative vocab_size.
    if (h[5] < 0 && h[5] != INT32_MIN) {
      shared = false;
      h[5] = -h[5];
    }
  }
  LlamaWeights w;
  w.cfg = config_from_header(h, shared, r);
  int64_t header = version == 0 ? kV0HeaderBytes : kV1HeaderBytes;
  int64_t expected = header + file_bytes(w.cfg, version);
  if (int64_t(r.size()) != expected)
    r.fail(fmt::format("{}: the header ({}, version {}) needs {} bytes, the file has {}",
                       int64_t(r.size()) < expected ? "truncated" : "size disagrees with the header", w.cfg.str(),
                       version, expected, r.size()));
  std::vector<Item> items = file_layout(w.cfg, version);
  if (header + layout_bytes(items) != expected) r.fail("internal error: the layout disagrees with file_bytes");
  std::map<std::string, Shape> shapes;
  for (const WeightSpec& s : llama_weight_specs(w.cfg)) shapes[s.name] = s.shape;
  for (const Item& it : items) {
    if (it.name.empty()) {
      r.skip(uint64_t(it.numel) * 4, "the RoPE tables");
      continue;
    }
    Tensor t(DType::FP32, shapes.at(it.name));
    r.read(t.mutable_data(), t.nbytes(), "'" + it.name + "'");
    w.tensors.emplace(it.name, std::move(t));
  }
  return w;
}

void save_llama2c_checkpoint(const std::string& path, const LlamaWeights& w, int version) {
  if (version != 0 && version != 1)
    throw Error(fmt::format("checkpoint '{}': cannot write version {} (0 or 1)", path, version));
  check_llama_weights(w);
  const LlamaConfig& c = w.cfg;
  for (int64_t v : {c.dim, c.hidden, c.vocab, c.seq})
    if (v > kMaxSize) throw Error(fmt::format("checkpoint '{}': {} exceeds the format's sizes", path, c.str()));
  if (c.layers > kMaxLayers) throw Error(fmt::format("checkpoint '{}': {} has too many layers", path, c.str()));
  int32_t h[7] = {int32_t(c.dim), int32_t(c.hidden), int32_t(c.layers), int32_t(c.heads),
                  int32_t(c.kv_heads), int32_t(c.vocab), int32_t(c.seq)};
  AtomicFileWriter out(path);
  if (version == 0) {
    if (!c.shared_classifier) h[5] = -h[5];
    out.write(h, sizeof h);
  } else {
    uint8_t header[kV1HeaderBytes] = {};
    int32_t v = 1;
    uint8_t shared = c.shared_classifier ? 1 : 0;
    std::memcpy(header, &kMagicV1, 4);
    std::memcpy(header + 4, &v, 4);
    std::memcpy(header + 8, h, sizeof h);
    std::memcpy(header + 36, &shared, 1);
    out.write(header, sizeof header);
  }
  std::vector<float> zeros;
  for (const Item& it : file_layout(c, version)) {
    if (it.name.empty()) {
      zeros.assign(size_t(it.numel), 0.0f);
      out.write(zeros.data(), zeros.size() * 4);
    } else {
      const Tensor& t = w.tensors.at(it.name);
      out.write(t.data(), t.nbytes());
    }
  }
  out.commit();
}

LlamaWeights init_llama_weights(const LlamaConfig& cfg, uint64_t seed) {
  cfg.validate();
  LlamaWeights w;
  w.cfg = cfg;
  const double kStd = 0.02, kResidualStd = 0.02 / std::sqrt(2.0 * double(cfg.layers));
  for (const WeightSpec& s : llama_weight_specs(cfg)) {
    Tensor t(DType::FP32, s.shape);
    float* p = t.mutable_ptr<float>();
    int64_t n = t.numel();
    if (s.shape.size() == 1) {
      for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
    } else {
      bool residual = s.name.ends_with("_wo") || s.name.ends_with("_w2");
      double std = residual ? kResidualStd : kStd;
      uint64_t state = seed;
      state = splitmix64(state) ^ fnv1a(s.name);
      // Box-Muller on 53-bit uniforms; u1 in (0, 1] keeps the log finite.
      for (int64_t i = 0; i < n; i += 2) {
        double u1 = double((splitmix64(state) >> 11) + 1) * 0x1.0p-53;
        double u2 = double(splitmix64(state) >> 11) * 0x1.0p-53;
        double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
        p[i] = float(std * r * std::cos(a));
        if (i + 1 < n) p[i + 1] = float(std * r * std::sin(a));
      }
    }
    w.tensors.emplace(s.name, std::move(t));
  }
  return w;
}

namespace {
constexpr char kStateMagic[8] = {'M', 'I', 'L', 'R', 'T', 'T', 'S', '\0'};
constexpr char kTensorMagic[8] = {'M', 'I', 'L', 'R', 'T', 'W', 'T', '\0'};
constexpr uint32_t kStateVersion = 1, kTensorVersion = 1;
constexpr uint32_t kMaxNameBytes = 4096;
constexpr uint32_t kMaxRank = 16;

// The record both files share: uint32 name length, name, uint32 rank, int64
// dims, then `arrays` fp32 arrays of the tensor's size (weights: 1; moments: 2).
void write_record(AtomicFileWriter& out, const std::string& name, const std::vector<const Tensor*>& arrays) {
  const Tensor& t = *arrays.front();
  out.write_pod(uint32_t(name.size()));
  out.write(name.data(), name.size());
  out.write_pod(uint32_t(t.shape().size()));
  for (int64_t d : t.shape()) out.write_pod(d);
  for (const Tensor* a : arrays) out.write(a->data(), a->nbytes());
}

void check_record(const std::string& name, const Tensor& t, const std::function<void(const std::string&)>& fail) {
  if (name.empty() || name.size() > kMaxNameBytes) fail("a tensor name is empty or too long");
  if (t.dtype() != DType::FP32) fail("'" + name + "' must be fp32");
  if (t.shape().size() > kMaxRank) fail("'" + name + "': rank too high");
  for (int64_t d : t.shape())
    if (d > Tensor::kMaxElements) fail("'" + name + "': dimension " + std::to_string(d) + " too large");
}

// Reads record `i` into `arrays` fp32 tensors; every count is checked
// against the bytes left before anything is allocated.
std::string read_record(FileReader& r, uint64_t i, std::vector<Tensor>& arrays, size_t n_arrays) {
  std::string what = fmt::format("tensor {}", i);
  uint32_t len = r.pod<uint32_t>(what + "'s name length");
  if (len == 0 || len > kMaxNameBytes) r.fail(fmt::format("implausible name length {} of {}", len, what));
  std::string name(len, '\0');
  r.read(name.data(), len, what + "'s name");
  what = "'" + name + "'";
  uint32_t rank = r.pod<uint32_t>(what + "'s rank");
  if (rank > kMaxRank) r.fail(fmt::format("implausible rank {} of {}", rank, what));
  Shape shape(rank);
  uint64_t numel = 1;
  for (uint32_t d = 0; d < rank; ++d) {
    shape[d] = r.pod<int64_t>(what + "'s shape");
    // Bounded by a constant, not by the bytes left: a tensor with a zero dim
    // has no data, and its other dims may be anything the writer accepts.
    if (shape[d] < 0 || shape[d] > Tensor::kMaxElements || __builtin_mul_overflow(numel, uint64_t(shape[d]), &numel))
      r.fail(fmt::format("implausible dimension {} of {}", shape[d], what));
  }
  if (numel > r.left() / (4 * n_arrays))
    r.fail(fmt::format("truncated: {} {} needs {} bytes, {} left", what, shape_str(shape), numel * 4 * n_arrays, r.left()));
  arrays.clear();
  for (size_t a = 0; a < n_arrays; ++a) {
    arrays.emplace_back(DType::FP32, shape);
    r.read(arrays.back().mutable_data(), arrays.back().nbytes(), what + (n_arrays == 1 ? "'s data" : a == 0 ? "'s m" : "'s v"));
  }
  return name;
}

// The magic and version every file starts with.
void read_preamble(FileReader& r, const char (&magic)[8], uint32_t version, const char* kind) {
  char got[8];
  r.read(got, sizeof got, "the magic");
  if (std::memcmp(got, magic, sizeof got) != 0) r.fail(fmt::format("bad magic: not a {}", kind));
  uint32_t v = r.pod<uint32_t>("the version");
  if (v != version) r.fail(fmt::format("unsupported version {} (this reader knows {})", v, version));
}

// Each record takes at least 8 bytes: a larger count is garbage.
uint64_t read_count(FileReader& r) {
  uint64_t count = r.pod<uint64_t>("the tensor count");
  if (count > r.left() / 8) r.fail(fmt::format("implausible tensor count {} for {} bytes", count, r.size()));
  return count;
}
}  // namespace

void save_train_state(const std::string& path, const TrainState& s) {
  auto fail = [&](const std::string& why) { throw Error(fmt::format("train state '{}': {}", path, why)); };
  if (s.m.size() != s.v.size()) fail("m and v hold different tensors");
  for (const auto& [name, m] : s.m) {
    auto it = s.v.find(name);
    if (it == s.v.end()) fail("'" + name + "' has m but no v");
    check_record(name, m, fail);
    check_record(name, it->second, fail);
    if (m.shape() != it->second.shape())
      fail(fmt::format("'{}': m is {}, v is {}", name, shape_str(m.shape()), shape_str(it->second.shape())));
  }
  AtomicFileWriter out(path);
  out.write(kStateMagic, sizeof kStateMagic);
  out.write_pod(kStateVersion);
  out.write_pod(int64_t(s.step));
  out.write_pod(uint64_t(s.m.size()));
  for (const auto& [name, m] : s.m) write_record(out, name, {&m, &s.v.at(name)});
  out.write_pod(uint64_t(s.extra.size()));
  out.write(s.extra.data(), s.extra.size());
  out.commit();
}

TrainState load_train_state(const std::string& path) {
  FileReader r(path, "train state");
  read_preamble(r, kStateMagic, kStateVersion, "milrt train state file");
  TrainState s;
  s.step = r.pod<int64_t>("the step");
  if (s.step < 0) r.fail(fmt::format("implausible step {}", s.step));
  const uint64_t count = read_count(r);
  std::vector<Tensor> mv;
  for (uint64_t i = 0; i < count; ++i) {
    std::string name = read_record(r, i, mv, 2);
    if (s.m.count(name)) r.fail("'" + name + "' appears twice");
    s.m.emplace(name, std::move(mv[0]));
    s.v.emplace(name, std::move(mv[1]));
  }
  uint64_t extra = r.pod<uint64_t>("the extra length");
  if (extra > r.left()) r.fail(fmt::format("truncated: extra data of {} bytes, {} left", extra, r.left()));
  s.extra.resize(extra);
  r.read(s.extra.data(), extra, "the extra data");
  if (r.left() != 0) r.fail(fmt::format("{} unexpected bytes after the end", r.left()));
  return s;
}

void save_tensor_file(const std::string& path, const TensorMap& tensors) {
  auto fail = [&](const std::string& why) { throw Error(fmt::format("tensor file '{}': {}", path, why)); };
  for (const auto& [name, t] : tensors) check_record(name, t, fail);
  AtomicFileWriter out(path);
  out.write(kTensorMagic, sizeof kTensorMagic);
  out.write_pod(kTensorVersion);
  out.write_pod(uint64_t(tensors.size()));
  for (const auto& [name, t] : tensors) write_record(out, name, {&t});
  out.commit();
}

bool is_tensor_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char got[8];
  bool yes = std::fread(got, 1, sizeof got, f) == sizeof got && std::memcmp(got, kTensorMagic, sizeof got) == 0;
  std::fclose(f);
  return yes;
}

TensorMap load_tensor_file(const std::string& path) {
  FileReader r(path, "tensor file");
  read_preamble(r, kTensorMagic, kTensorVersion, "milrt tensor file");
  const uint64_t count = read_count(r);
  TensorMap out;
  std::vector<Tensor> one;
  for (uint64_t i = 0; i < count; ++i) {
    std::string name = read_record(r, i, one, 1);
    if (out.count(name)) r.fail("'" + name + "' appears twice");
    out.emplace(name, std::move(one[0]));
  }
  if (r.left() != 0) r.fail(fmt::format("{} unexpected bytes after the end", r.left()));
  return out;
}

}  // namespace milrt::llm
