#include "llm/data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "milrt/error.h"

namespace milrt::llm {

namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error("data file '" + path + "' does not exist");
  if (fs::is_directory(path, ec)) throw Error("data file '" + path + "' is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("data file '" + path + "': cannot open it");
  std::string d((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw Error("data file '" + path + "': read error");
  if (d.empty()) throw Error("data file '" + path + "' is empty");
  return d;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<int32_t> read_bin(const std::string& path, int64_t vocab) {
  std::string d = read_file(path);
  if (d.size() % 2 != 0)
    throw Error(fmt::format("data file '{}': size {} bytes is odd, not a stream of uint16 tokens", path, d.size()));
  std::vector<int32_t> out(d.size() / 2);
  const auto* p = reinterpret_cast<const unsigned char*>(d.data());
  for (size_t i = 0; i < out.size(); ++i) {
    int32_t t = p[2 * i] | (p[2 * i + 1] << 8);  // little-endian, as llama2.c's numpy export writes
    if (t >= vocab)
      throw Error(
          fmt::format("data file '{}': token {} at token offset {} (byte offset {}) is not below the "
                      "vocabulary size {}",
                      path, t, i, 2 * i, vocab));
    out[i] = t;
  }
  return out;
}

void append_document(std::vector<int32_t>& out, const std::string& text, const Tokenizer& tok) {
  std::vector<int32_t> t = tok.encode(text, /*bos=*/true, /*eos=*/false);
  out.insert(out.end(), t.begin(), t.end());
}

std::vector<int32_t> read_embedded(const Tokenizer& tok, std::string& source) {
  std::error_code ec;
  if (!fs::is_directory(kEmbeddedCorpusDir, ec))
    throw Error(
        fmt::format("the embedded corpus (the license texts every Debian system carries) is read from {}, "
                    "which is missing here: pass a data file",
                    kEmbeddedCorpusDir));
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(kEmbeddedCorpusDir, ec))
    if (e.is_regular_file(ec) && !e.is_symlink(ec)) files.push_back(e.path().string());
  if (ec) throw Error(fmt::format("the embedded corpus: cannot list {}: {}", kEmbeddedCorpusDir, ec.message()));
  if (files.empty()) throw Error(fmt::format("the embedded corpus: {} holds no license texts", kEmbeddedCorpusDir));
  std::sort(files.begin(), files.end());
  std::vector<int32_t> out;
  size_t bytes = 0;
  for (const std::string& f : files) {
    std::string text = read_file(f);
    bytes += text.size();
    append_document(out, text, tok);
  }
  source =
      fmt::format("the embedded corpus: {} license texts from {} ({} bytes)", files.size(), kEmbeddedCorpusDir, bytes);
  return out;
}

}  // namespace

TokenData load_token_data(const std::string& path, const Tokenizer& tok, double val_fraction, int64_t seq) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    throw Error(fmt::format("validation fraction {} must be in [0, 1)", val_fraction));
  if (seq < 0) throw Error(fmt::format("sequence length {} must not be negative", seq));
  TokenData data;
  std::vector<int32_t> all;
  if (path.empty()) {
    all = read_embedded(tok, data.source);
  } else if (ends_with(path, ".bin")) {
    all = read_bin(path, tok.vocab_size());
    data.source = fmt::format("{} (pretokenized uint16)", path);
  } else {
    std::string text = read_file(path);
    append_document(all, text, tok);
    data.source = fmt::format("{} (text, {} bytes)", path, text.size());
  }
  const size_t n = all.size();
  const size_t n_val = static_cast<size_t>(static_cast<double>(n) * val_fraction);
  data.source += fmt::format(", {} tokens: {} train, {} validation", n, n - n_val, n_val);
  const std::string where = path.empty() ? std::string("the embedded corpus") : "data file '" + path + "'";
  if (seq > 0) {
    if (static_cast<int64_t>(n - n_val) < seq + 1)
      throw Error(
          fmt::format("{}: {} training tokens, fewer than sequence length + 1 = {}", where, n - n_val, seq + 1));
    if (val_fraction > 0 && static_cast<int64_t>(n_val) < seq + 1)
      throw Error(
          fmt::format("{}: {} validation tokens, fewer than sequence length + 1 = {} (use more data or a "
                      "larger validation fraction)",
                      where, n_val, seq + 1));
  }
  data.train.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n - n_val));
  data.val.assign(all.begin() + static_cast<std::ptrdiff_t>(n - n_val), all.end());
  return data;
}

// ---- BatchSampler ----

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

BatchSampler::BatchSampler(const std::vector<int32_t>& tokens, int64_t batch, int64_t seq, uint64_t seed)
    : tokens_(tokens), batch_(batch), seq_(seq), state_{} {
  if (batch <= 0 || seq <= 0)
    throw Error(fmt::format("batch sampler: batch {} and sequence length {} must be positive", batch, seq));
  if (static_cast<int64_t>(tokens.size()) < seq + 1)
    throw Error(fmt::format("batch sampler: {} tokens, fewer than sequence length + 1 = {}", tokens.size(), seq + 1));
  uint64_t s = seed;
  // splitmix64 is a bijection of its counter, so at most one word is zero:
  // never the all-zero state xoshiro must avoid.
  for (uint64_t& w : state_.rng) w = splitmix64(s);
}

uint64_t BatchSampler::next_u64() {  // xoshiro256**
  uint64_t* s = state_.rng;
  const uint64_t result = rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

// Lemire's multiply-and-reject: exactly uniform, and defined by integer
// arithmetic alone so every platform draws the same values.
uint64_t BatchSampler::uniform(uint64_t n) {
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

void BatchSampler::next(int32_t* x, int32_t* y) {
  const uint64_t starts = tokens_.size() - static_cast<uint64_t>(seq_);  // windows of seq + 1 tokens
  for (int64_t b = 0; b < batch_; ++b) {
    const int32_t* w = tokens_.data() + uniform(starts);
    std::memcpy(x + b * seq_, w, static_cast<size_t>(seq_) * sizeof(int32_t));
    std::memcpy(y + b * seq_, w + 1, static_cast<size_t>(seq_) * sizeof(int32_t));
  }
  ++state_.step;
}

void BatchSampler::restore(const State& s) {
  if ((s.rng[0] | s.rng[1] | s.rng[2] | s.rng[3]) == 0)
    throw Error("batch sampler: cannot restore an all-zero generator state (not one a sampler produces)");
  state_ = s;
}

}  // namespace milrt::llm
