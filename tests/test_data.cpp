// Training data: loading token streams (.bin, text, the embedded corpus), the
// train/validation split, the errors, and the batch sampler's determinism and
// exact resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "llm/data.h"
#include "llm/tokenizer.h"
#include "milrt/error.h"
#include "support/test_util.h"

namespace milrt::llm {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

template <typename F>
void expect_error(F f, const std::string& fragment) {
  test::expect_error_containing(f, fragment);
}

std::string write_file(const std::string& name, const std::string& bytes) {
  static std::string dir = test::temp_dir("data");
  std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Little-endian uint16, byte by byte (independent of the host's order).
std::string u16_bytes(const std::vector<int>& toks) {
  std::string s;
  for (int t : toks) s += static_cast<char>(t & 0xFF), s += static_cast<char>(t >> 8);
  return s;
}

TEST(TokenData, BinRoundTripAndSplit) {
  auto tok = byte_tokenizer();
  std::vector<int> toks;
  for (int i = 0; i < 100; ++i) toks.push_back((i * 37) % 259);
  std::string path = write_file("tokens.bin", u16_bytes(toks));
  TokenData d = load_token_data(path, *tok, 0.1, 8);
  ASSERT_EQ(d.train.size(), 90u);
  ASSERT_EQ(d.val.size(), 10u);
  for (int i = 0; i < 90; ++i) EXPECT_EQ(d.train[i], toks[i]) << i;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(d.val[i], toks[90 + i]) << i;
  EXPECT_NE(d.source.find(path), std::string::npos) << d.source;
  // Ids past 255 survive (the high byte matters).
  TokenData hi = load_token_data(write_file("hi.bin", u16_bytes({258, 256, 1})), *tok, 0.0);
  EXPECT_EQ(hi.train, (Ids{258, 256, 1}));
  EXPECT_TRUE(hi.val.empty());
}

TEST(TokenData, SplitRoundsValidationDown) {
  auto tok = byte_tokenizer();
  std::string path = write_file("seven.bin", u16_bytes({3, 4, 5, 6, 7, 8, 9}));
  TokenData d = load_token_data(path, *tok, 0.3);  // 7 * 0.3 = 2.1 -> 2
  EXPECT_EQ(d.train, (Ids{3, 4, 5, 6, 7}));
  EXPECT_EQ(d.val, (Ids{8, 9}));
}

TEST(TokenData, TextIsEncodedWithBos) {
  auto tok = byte_tokenizer();
  std::string text = "hi\n\xc3\xa9!";
  TokenData d = load_token_data(write_file("doc.txt", text), *tok, 0.0);
  Ids want = {Tokenizer::kBos};
  for (unsigned char c : text) want.push_back(c + 3);
  EXPECT_EQ(d.train, want);
}

TEST(TokenData, Errors) {
  auto tok = byte_tokenizer();
  expect_error([&] { load_token_data("/nonexistent/data.txt", *tok); }, "does not exist");
  expect_error([&] { load_token_data("/nonexistent/data.bin", *tok); }, "does not exist");
  expect_error([&] { load_token_data(write_file("empty.txt", ""), *tok); }, "is empty");
  expect_error([&] { load_token_data(write_file("empty.bin", ""), *tok); }, "is empty");
  expect_error([&] { load_token_data(write_file("odd.bin", "abc"), *tok); }, "size 3 bytes is odd");
  expect_error(
      [&] {
        load_token_data(write_file("big.bin", u16_bytes({5, 6, 7, 259, 8})), *tok);
      },
      "token 259 at token offset 3 (byte offset 6) is not below the vocabulary size 259");
  expect_error([&] { load_token_data(test::temp_dir("data_dir"), *tok); }, "is a directory");
  // 20 tokens, 10% validation: 18 train, 2 val.
  std::vector<int> twenty(20, 50);
  std::string path = write_file("twenty.bin", u16_bytes(twenty));
  expect_error([&] { load_token_data(path, *tok, 0.1, 18); },
               "18 training tokens, fewer than sequence length + 1 = 19");
  expect_error([&] { load_token_data(path, *tok, 0.1, 2); }, "2 validation tokens, fewer than sequence length + 1 = 3");
  EXPECT_NO_THROW(load_token_data(path, *tok, 0.1, 1));
  EXPECT_NO_THROW(load_token_data(path, *tok, 0.0, 19));  // no validation asked for: no val check
  expect_error([&] { load_token_data(path, *tok, 0.0, 20); }, "20 training tokens");
  expect_error([&] { load_token_data(path, *tok, 1.0); }, "must be in [0, 1)");
  expect_error([&] { load_token_data(path, *tok, -0.1); }, "must be in [0, 1)");
  expect_error([&] { load_token_data(path, *tok, 0.1, -1); }, "must not be negative");
}

// The license files the embedded corpus should hold, listed independently.
std::vector<fs::path> license_files() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kEmbeddedCorpusDir))
    if (!fs::is_symlink(e.symlink_status()) && fs::is_regular_file(e.status())) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(TokenData, EmbeddedCorpus) {
  auto tok = byte_tokenizer();
  if (!fs::is_directory(kEmbeddedCorpusDir)) {
    expect_error([&] { load_token_data("", *tok); }, "which is missing here");
    GTEST_SKIP() << kEmbeddedCorpusDir << " is absent: checked the error only";
  }
  std::vector<fs::path> files = license_files();
  ASSERT_FALSE(files.empty());
  Ids want;
  for (const fs::path& f : files) {
    want.push_back(Tokenizer::kBos);
    for (unsigned char c : slurp(f)) want.push_back(c + 3);
  }
  TokenData d = load_token_data("", *tok, 0.1, 256);
  Ids all = d.train;
  all.insert(all.end(), d.val.begin(), d.val.end());
  EXPECT_EQ(all, want);  // sorted by name, one BOS per file, no symlinked duplicates
  EXPECT_GT(d.train.size(), 50000u);
  EXPECT_EQ(d.val.size(), want.size() / 10);
  EXPECT_NE(d.source.find("license texts"), std::string::npos) << d.source;
}

TEST(TokenData, EmbeddedCorpusWithLlamaTokenizer) {
  MILRT_REQUIRE_SHARED();
  std::string tp = test::shared_dir() + "/testdata/llama2c/tokenizer.bin";
  if (!fs::exists(tp)) GTEST_SKIP() << tp << " is absent";
  if (!fs::is_directory(kEmbeddedCorpusDir)) GTEST_SKIP() << kEmbeddedCorpusDir << " is absent";
  auto tok = load_llama2c_tokenizer(tp, 32000);
  TokenData d = load_token_data("", *tok, 0.1, 256);
  Ids all = d.train;
  all.insert(all.end(), d.val.begin(), d.val.end());
  // Decoding each document (BOS .. next BOS) gives back each file's text.
  std::vector<fs::path> files = license_files();
  size_t doc = 0;
  std::string text;
  for (size_t i = 0; i <= all.size(); ++i) {
    if (i == all.size() || (all[i] == Tokenizer::kBos && i > 0)) {
      ASSERT_LT(doc, files.size());
      EXPECT_EQ(text, slurp(files[doc])) << files[doc];
      ++doc;
      text.clear();
    }
    if (i < all.size() && i > 0 && all[i] != Tokenizer::kBos) text += tok->decode(all[i - 1], all[i]);
  }
  EXPECT_EQ(doc, files.size());
  // BPE compresses English well below one token per byte.
  size_t bytes = 0;
  for (const fs::path& f : files) bytes += fs::file_size(f);
  EXPECT_LT(all.size() * 2, bytes);
}

// ---- BatchSampler ----

// tokens[i] = i, so every row shows where its window started.
Ids iota_tokens(int n) {
  Ids t(n);
  for (int i = 0; i < n; ++i) t[i] = i;
  return t;
}

struct Batch {
  Ids x, y;
  bool operator==(const Batch&) const = default;
};

Batch draw(BatchSampler& s) {
  Batch b{Ids(s.batch() * s.seq()), Ids(s.batch() * s.seq())};
  s.next(b.x.data(), b.y.data());
  return b;
}

TEST(BatchSampler, WindowsAreContiguousAndShifted) {
  const int n = 40, B = 4, T = 7;
  Ids toks = iota_tokens(n);
  BatchSampler s(toks, B, T, 123);
  std::set<int> starts;
  for (int step = 0; step < 200; ++step) {
    Batch b = draw(s);
    for (int r = 0; r < B; ++r) {
      int start = b.x[r * T];
      ASSERT_GE(start, 0);
      ASSERT_LE(start, n - T - 1);  // the window of T + 1 tokens fits
      starts.insert(start);
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(b.x[r * T + t], start + t);
        EXPECT_EQ(b.y[r * T + t], start + t + 1);
      }
    }
  }
  EXPECT_EQ(starts.size(), static_cast<size_t>(n - T));  // every start drawn, the last included
  EXPECT_EQ(s.state().step, 200u);
}

TEST(BatchSampler, RoughlyUniform) {
  const int n = 20, T = 3;
  Ids toks = iota_tokens(n);
  BatchSampler s(toks, 1, T, 5);
  std::vector<int> count(n - T, 0);
  const int draws = 34000;
  for (int i = 0; i < draws; ++i) ++count[draw(s).x[0]];
  // 2000 expected per start; a 20% band is > 8 standard deviations wide.
  for (int c : count) {
    EXPECT_GT(c, 1600);
    EXPECT_LT(c, 2400);
  }
}

TEST(BatchSampler, DeterministicPerSeed) {
  Ids toks = iota_tokens(1000);
  BatchSampler a(toks, 3, 16, 42), b(toks, 3, 16, 42), c(toks, 3, 16, 43);
  bool differs = false;
  for (int i = 0; i < 10; ++i) {
    Batch ba = draw(a), bb = draw(b), bc = draw(c);
    EXPECT_EQ(ba, bb);
    differs |= !(ba == bc);
  }
  EXPECT_TRUE(differs);
}

TEST(BatchSampler, RestoreResumesExactly) {
  Ids toks = iota_tokens(5000);
  BatchSampler a(toks, 2, 32, 7);
  for (int i = 0; i < 3; ++i) draw(a);
  BatchSampler::State saved = a.state();
  EXPECT_EQ(saved.step, 3u);
  std::vector<Batch> expected;
  for (int i = 0; i < 5; ++i) expected.push_back(draw(a));
  BatchSampler b(toks, 2, 32, 999);  // a different seed: restore must override it
  draw(b);
  b.restore(saved);
  EXPECT_EQ(b.state().step, 3u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(draw(b), expected[i]) << i;
  EXPECT_EQ(b.state().step, 8u);
  // Restoring a's own earlier state rewinds it too.
  a.restore(saved);
  EXPECT_EQ(draw(a), expected[0]);
}

TEST(BatchSampler, Errors) {
  Ids toks = iota_tokens(10);
  expect_error([&] { BatchSampler(toks, 1, 10, 0); }, "10 tokens, fewer than sequence length + 1 = 11");
  EXPECT_NO_THROW(BatchSampler(toks, 1, 9, 0));
  expect_error([&] { BatchSampler(toks, 0, 4, 0); }, "must be positive");
  expect_error([&] { BatchSampler(toks, 2, 0, 0); }, "must be positive");
  BatchSampler s(toks, 1, 4, 0);
  expect_error([&] { s.restore(BatchSampler::State{{0, 0, 0, 0}, 5}); }, "all-zero");
}

}  // namespace
}  // namespace milrt::llm
