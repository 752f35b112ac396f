#include "llm/tokenizer.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <queue>
#include <unordered_map>

#include "milrt/error.h"

namespace milrt::llm {

Tokenizer::~Tokenizer() = default;

namespace {

constexpr int32_t kByteOffset = 3;  // ids 0..2 are <unk>, <s>, </s>

void check_token(int32_t tok, int64_t vocab, const char* what) {
  if (tok < 0 || tok >= vocab)
    throw Error(fmt::format("{} tokenizer: token id {} is outside the vocabulary [0, {})", what, tok, vocab));
}

class ByteTokenizer final : public Tokenizer {
 public:
  int64_t vocab_size() const override { return 256 + kByteOffset; }
  std::vector<int32_t> encode(const std::string& text, bool bos, bool eos) const override {
    std::vector<int32_t> out;
    out.reserve(text.size() + 2);
    if (bos) out.push_back(kBos);
    for (unsigned char c : text) out.push_back(static_cast<int32_t>(c) + kByteOffset);
    if (eos) out.push_back(kEos);
    return out;
  }
  // No dummy prefix is added by encode, so there is no space to strip after BOS.
  std::string decode(int32_t /*prev*/, int32_t tok) const override {
    check_token(tok, vocab_size(), "byte");
    if (tok < kByteOffset) return "";
    return std::string(1, static_cast<char>(tok - kByteOffset));
  }
};

// The byte of a byte-fallback piece "<0xHH>", or -1.
int byte_piece_value(const std::string& p) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    char c = p[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

class Llama2cTokenizer final : public Tokenizer {
 public:
  Llama2cTokenizer(std::vector<std::string> pieces, std::vector<float> scores)
      : pieces_(std::move(pieces)), scores_(std::move(scores)) {
    // Duplicate pieces (not produced by sentencepiece) resolve to the lowest id.
    index_.reserve(pieces_.size());
    for (size_t i = 0; i < pieces_.size(); ++i) index_.emplace(pieces_[i], static_cast<int32_t>(i));
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }

  std::vector<int32_t> encode(const std::string& text, bool bos, bool eos) const override {
    std::vector<int32_t> out;
    if (bos) out.push_back(kBos);
    // sentencepiece's add_dummy_prefix: a space before non-empty text, looked
    // up like any code point (so it is the piece " " when the vocab has one).
    std::vector<int32_t> toks;
    if (!text.empty()) {
      split_code_points(" ", toks);
      split_code_points(text, toks);
    }
    merge(toks);
    out.insert(out.end(), toks.begin(), toks.end());
    if (eos) out.push_back(kEos);
    return out;
  }

  std::string decode(int32_t prev, int32_t tok) const override {
    check_token(tok, vocab_size(), "llama2.c");
    const std::string& p = pieces_[tok];
    // sentencepiece strips the dummy-prefix space of the first piece after BOS.
    if (prev == kBos && !p.empty() && p[0] == ' ') return p.substr(1);
    int b = byte_piece_value(p);
    if (b >= 0) return std::string(1, static_cast<char>(b));
    return p;
  }

 private:
  int32_t lookup(const std::string& s) const {
    auto it = index_.find(s);
    return it == index_.end() ? -1 : it->second;
  }

  // llama2.c's code point pass: a lead/ASCII byte plus at most three following
  // continuation bytes form one unit (so stray continuation bytes and overlong
  // runs still make progress); a unit in the vocabulary is one token, otherwise
  // each of its bytes is a byte-fallback token.
  void split_code_points(const std::string& text, std::vector<int32_t>& toks) const {
    auto is_cont = [](unsigned char c) { return (c & 0xC0) == 0x80; };
    size_t i = 0;
    while (i < text.size()) {
      size_t j = i + 1;
      while (j < text.size() && j - i < 4 && is_cont(static_cast<unsigned char>(text[j]))) ++j;
      std::string unit = text.substr(i, j - i);
      int32_t id = lookup(unit);
      if (id >= 0) {
        toks.push_back(id);
      } else {
        for (unsigned char c : unit) toks.push_back(static_cast<int32_t>(c) + kByteOffset);
      }
      i = j;
    }
  }

  // Repeatedly merges the adjacent pair whose concatenation is the
  // highest-scoring piece, leftmost among equal scores (llama2.c's rule,
  // including its floor: pieces scoring <= -1e10 are never merged). A heap
  // over a linked list gives the same merges as llama2.c's rescan-everything
  // loop in O(n log n) instead of O(n^2), which matters for whole corpora.
  void merge(std::vector<int32_t>& toks) const {
    const int n = static_cast<int>(toks.size());
    if (n < 2) return;
    std::vector<int> prev(n), next(n);
    for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
    std::vector<int32_t> id = toks;
    struct Cand {
      float score;
      int left, right;
      int32_t left_id, right_id, merged;
    };
    // Highest score first; among equals the leftmost (node order = sequence order).
    auto worse = [](const Cand& a, const Cand& b) { return a.score != b.score ? a.score < b.score : a.left > b.left; };
    std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
    auto push = [&](int l) {
      if (l < 0 || next[l] < 0) return;
      int r = next[l];
      int32_t m = lookup(pieces_[id[l]] + pieces_[id[r]]);
      if (m < 0 || !(static_cast<double>(scores_[m]) > -1e10)) return;
      heap.push({scores_[m], l, r, id[l], id[r], m});
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      Cand c = heap.top();
      heap.pop();
      // Stale when either side was merged away or changed since the push.
      if (id[c.left] < 0 || id[c.right] < 0 || next[c.left] != c.right || id[c.left] != c.left_id ||
          id[c.right] != c.right_id)
        continue;
      id[c.left] = c.merged;
      id[c.right] = -1;
      next[c.left] = next[c.right];
      if (next[c.right] >= 0) prev[next[c.right]] = c.left;
      push(prev[c.left]);
      push(c.left);
    }
    toks.clear();
    for (int i = 0; i >= 0; i = next[i]) toks.push_back(id[i]);
  }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t> index_;
};

// A piece quoted for a one-line error message.
std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s)
    out += c >= 0x20 && c < 0x7F ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  return out;
}

uint32_t read_u32(const std::string& d, size_t off) {
  uint32_t v;
  std::memcpy(&v, d.data() + off, 4);
  return v;
}

}  // namespace

std::unique_ptr<Tokenizer> byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int64_t vocab_size) {
  auto fail = [&](const std::string& why) { throw Error("tokenizer '" + path + "': " + why); };
  if (vocab_size <= 0) fail(fmt::format("vocabulary size {} must be positive", vocab_size));
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open the file");
  std::string d((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (d.size() < 4) fail(fmt::format("truncated: {} bytes, too short for the header", d.size()));
  uint32_t max_len = read_u32(d, 0);
  // llama's longest piece is 27 bytes; anything past this bound is not a tokenizer.
  constexpr uint32_t kMaxPiece = 1u << 16;
  if (max_len == 0 || max_len > kMaxPiece)
    fail(fmt::format("garbled: max_token_length {} is not in [1, {}]", max_len, kMaxPiece));
  std::vector<std::string> pieces;
  std::vector<float> scores;
  size_t off = 4;
  while (off < d.size()) {
    size_t i = pieces.size();
    if (d.size() - off < 8) fail(fmt::format("truncated inside the header of token {} (byte offset {})", i, off));
    float score;
    std::memcpy(&score, d.data() + off, 4);
    uint32_t len = read_u32(d, off + 4);
    off += 8;
    if (len > max_len)
      fail(fmt::format("garbled: token {} (byte offset {}) has length {} > max_token_length {}", i, off - 8, len,
                       max_len));
    if (d.size() - off < len) fail(fmt::format("truncated inside token {} (byte offset {})", i, off - 8));
    pieces.emplace_back(d, off, len);
    scores.push_back(score);
    off += len;
    if (static_cast<int64_t>(pieces.size()) > vocab_size) break;  // enough to report the mismatch
  }
  if (static_cast<int64_t>(pieces.size()) != vocab_size) {
    if (static_cast<int64_t>(pieces.size()) > vocab_size)
      fail(fmt::format("holds more than {} tokens, but the model's vocabulary size is {}", vocab_size, vocab_size));
    fail(fmt::format("holds {} tokens, but the model's vocabulary size is {}", pieces.size(), vocab_size));
  }
  // encode's byte fallback maps byte b to id b + 3, so those ids must be the byte pieces.
  if (vocab_size < 256 + kByteOffset)
    fail(fmt::format("vocabulary size {} is too small for byte fallback (needs ids 3..258 for the bytes)", vocab_size));
  for (int b = 0; b < 256; ++b)
    if (byte_piece_value(pieces[b + kByteOffset]) != b)
      fail(fmt::format("token {} is '{}', not the byte piece <0x{:02X}>: not a byte-fallback vocabulary",
                       b + kByteOffset, escaped(pieces[b + kByteOffset]), b));
  return std::make_unique<Llama2cTokenizer>(std::move(pieces), std::move(scores));
}

std::string printable_piece(const std::string& piece) {
  if (piece.size() == 1) {
    unsigned char c = static_cast<unsigned char>(piece[0]);
    bool space = c == ' ' || (c >= '\t' && c <= '\r');
    if (c < 0x80 && !space && (c < 0x20 || c == 0x7F)) return "";
  }
  return piece;
}

}  // namespace milrt::llm
