// Tokenizers: the byte-level one, and llama2.c's BPE tokenizer checked against
// (a) ids read straight from the vocabulary file by this test's own parser,
// (b) a plain transcription of llama2.c's quadratic merge loop (the library
// uses a heap; both must pick the same merges), and (c) handmade vocabularies
// whose merges can be worked out by hand.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "llm/tokenizer.h"
#include "milrt/error.h"
#include "support/test_util.h"

namespace milrt::llm {
namespace {

using Ids = std::vector<int32_t>;

// The text of `ids` as a generator prints it: a leading BOS only conditions
// the next piece (llama2.c never prints it; its piece is "\n<s>\n").
std::string decode_all(const Tokenizer& t, const Ids& ids) {
  std::string s;
  size_t first = !ids.empty() && ids[0] == Tokenizer::kBos ? 1 : 0;
  for (size_t i = first; i < ids.size(); ++i) s += t.decode(i == 0 ? -1 : ids[i - 1], ids[i]);
  return s;
}

// Every byte value, several invalid UTF-8 sequences and embedded NULs.
std::string awkward_bytes() {
  std::string s;
  for (int b = 0; b < 256; ++b) s += static_cast<char>(b);
  s += std::string("\xff\xfe\x80\x80\x80\x80\x80\xc3(\xe2\x82\0\xf0\x9f", 15);
  return s;
}

template <typename F>
void expect_error(F f, const std::string& fragment) {
  test::expect_error_containing(f, fragment);
}

// ---- byte tokenizer ----

TEST(ByteTokenizer, IdsAreBytePlusThree) {
  auto t = byte_tokenizer();
  EXPECT_EQ(t->vocab_size(), 259);
  std::string s = awkward_bytes();
  Ids ids = t->encode(s, true, true);
  ASSERT_EQ(ids.size(), s.size() + 2);
  EXPECT_EQ(ids.front(), Tokenizer::kBos);
  EXPECT_EQ(ids.back(), Tokenizer::kEos);
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(ids[i + 1], static_cast<unsigned char>(s[i]) + 3) << i;
  EXPECT_EQ(t->encode("", false, false), Ids{});
  EXPECT_EQ(t->encode("A", false, false), Ids{'A' + 3});
}

TEST(ByteTokenizer, RoundTripsArbitraryBytes) {
  auto t = byte_tokenizer();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::string s(rng() % 300, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    EXPECT_EQ(decode_all(*t, t->encode(s, true, true)), s);
  }
  std::string s = awkward_bytes();
  EXPECT_EQ(decode_all(*t, t->encode(s, true, false)), s);
  EXPECT_EQ(decode_all(*t, t->encode(s, false, false)), s);  // no dummy space to strip
}

TEST(ByteTokenizer, DecodeSpecialsAndRange) {
  auto t = byte_tokenizer();
  EXPECT_EQ(t->decode(0, 0), "");
  EXPECT_EQ(t->decode(0, Tokenizer::kBos), "");
  EXPECT_EQ(t->decode(0, Tokenizer::kEos), "");
  EXPECT_EQ(t->decode(Tokenizer::kBos, ' ' + 3), " ");  // nothing stripped: there is no dummy prefix
  expect_error([&] { t->decode(0, 259); }, "259");
  expect_error([&] { t->decode(0, -1); }, "-1");
}

TEST(PrintablePiece, DropsLoneControlBytesOnly) {
  EXPECT_EQ(printable_piece("\x08"), "");
  EXPECT_EQ(printable_piece("\x1b"), "");
  EXPECT_EQ(printable_piece("\x7f"), "");
  EXPECT_EQ(printable_piece(std::string(1, '\0')), "");
  EXPECT_EQ(printable_piece("\n"), "\n");
  EXPECT_EQ(printable_piece("\t"), "\t");
  EXPECT_EQ(printable_piece("a"), "a");
  EXPECT_EQ(printable_piece("\xc3"), "\xc3");        // part of a UTF-8 character: kept
  EXPECT_EQ(printable_piece("\x1b[2J"), "\x1b[2J");  // only lone bytes are judged (as llama2.c)
  EXPECT_EQ(printable_piece(""), "");
}

// ---- llama2.c tokenizer files ----

struct Vocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
};

// tokenizer.bin bytes for `v` (the format of llama2.c's tokenizer.py export).
std::string serialize(const Vocab& v, int32_t max_len = -1) {
  auto u32 = [](uint32_t x) { return std::string(reinterpret_cast<const char*>(&x), 4); };
  uint32_t m = 0;
  for (auto& p : v.pieces) m = std::max<uint32_t>(m, static_cast<uint32_t>(p.size()));
  std::string out = u32(max_len >= 0 ? static_cast<uint32_t>(max_len) : m);
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    float s = v.scores[i];
    out += std::string(reinterpret_cast<const char*>(&s), 4) + u32(static_cast<uint32_t>(v.pieces[i].size())) +
           v.pieces[i];
  }
  return out;
}

std::string write_file(const std::string& name, const std::string& bytes) {
  static std::string dir = test::temp_dir("tokenizer");
  std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// <unk>, <s>, </s>, the 256 byte pieces, then `extra` pieces with their scores.
Vocab byte_fallback_vocab(const std::vector<std::pair<std::string, float>>& extra) {
  Vocab v;
  v.pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  v.scores = {0, 0, 0};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.pieces.push_back(buf);
    v.scores.push_back(0);
  }
  for (auto& [p, s] : extra) v.pieces.push_back(p), v.scores.push_back(s);
  return v;
}

std::unique_ptr<Tokenizer> load_vocab(const Vocab& v, const std::string& name) {
  return load_llama2c_tokenizer(write_file(name, serialize(v)), static_cast<int64_t>(v.pieces.size()));
}

constexpr int32_t kFirstExtra = 259;
int32_t byte_id(char c) { return static_cast<unsigned char>(c) + 3; }

TEST(Llama2cTokenizer, HandmadeMergesByScoreLeftmostFirst) {
  // No " " piece: the dummy prefix falls back to byte 0x20 and never merges.
  auto t = load_vocab(byte_fallback_vocab({{"a", -5}, {"b", -6}, {"aa", -1}, {"ab", -2}}), "merges.bin");
  const int32_t a = kFirstExtra, b = kFirstExtra + 1, aa = kFirstExtra + 2, ab = kFirstExtra + 3;
  const int32_t sp = byte_id(' ');
  // "aaa": "aa" at 0 and at 1 tie; the leftmost is taken.
  EXPECT_EQ(t->encode("aaa", false, false), (Ids{sp, aa, a}));
  // "aab": "aa" (-1) beats "ab" (-2).
  EXPECT_EQ(t->encode("aab", false, false), (Ids{sp, aa, b}));
  EXPECT_EQ(t->encode("ab", true, true), (Ids{Tokenizer::kBos, sp, ab, Tokenizer::kEos}));
  // A code point missing from the vocab becomes its bytes; bytes never merge.
  EXPECT_EQ(t->encode("a\xc3\xa9", false, false), (Ids{sp, a, byte_id('\xc3'), byte_id('\xa9')}));
  EXPECT_EQ(t->encode("", true, false), (Ids{Tokenizer::kBos}));  // no dummy prefix for empty text
  EXPECT_EQ(t->encode("", false, false), Ids{});
}

TEST(Llama2cTokenizer, HandmadeHigherScoreWinsAnywhere) {
  auto t = load_vocab(byte_fallback_vocab({{"a", -5}, {"b", -6}, {"aa", -2}, {"ab", -1}, {" ", -9}, {" a", -3}}),
                      "merges2.bin");
  const int32_t aa = kFirstExtra + 2, ab = kFirstExtra + 3, sp = kFirstExtra + 4, sp_a = kFirstExtra + 5;
  // " ", a, a, b: "ab" (-1) first, then " a" (-3); "aa" never forms.
  EXPECT_EQ(t->encode("aab", false, false), (Ids{sp_a, ab}));
  // " ", a, a: "aa" (-2) beats " a" (-3) though " a" is further left.
  EXPECT_EQ(t->encode("aa", false, false), (Ids{sp, aa}));
  EXPECT_EQ(decode_all(*t, t->encode("aab", true, false)), "aab");
}

TEST(Llama2cTokenizer, HandmadeScoreFloorNeverMerges) {
  // llama2.c only merges pieces scoring above -1e10.
  auto t = load_vocab(byte_fallback_vocab({{"a", 0}, {"aa", -2e10f}}), "floor.bin");
  EXPECT_EQ(t->encode("aa", false, false), (Ids{byte_id(' '), kFirstExtra, kFirstExtra}));
}

TEST(Llama2cTokenizer, HandmadeCodePointUnits) {
  // "é" is a piece; a lead byte with a stray run of continuation bytes is cut
  // after four bytes, as llama2.c does.
  auto t = load_vocab(byte_fallback_vocab({{"\xc3\xa9", -1}, {"x", -1}}), "utf8.bin");
  const int32_t e = kFirstExtra, x = kFirstExtra + 1, sp = byte_id(' ');
  EXPECT_EQ(t->encode("x\xc3\xa9x", false, false), (Ids{sp, x, e, x}));
  std::string run = "\xc3\xa9\xa9\xa9\xa9";  // unit 1 = c3 a9 a9 a9, unit 2 = a9
  EXPECT_EQ(t->encode(run, false, false),
            (Ids{sp, byte_id('\xc3'), byte_id('\xa9'), byte_id('\xa9'), byte_id('\xa9'), byte_id('\xa9')}));
  EXPECT_EQ(t->encode("\xa9\xc3\xa9", false, false), (Ids{sp, byte_id('\xa9'), e}));
}

TEST(Llama2cTokenizer, DecodeStripsSpaceAfterBosAndMapsBytes) {
  auto t = load_vocab(byte_fallback_vocab({{" hi", -1}, {"hi", -2}}), "decode.bin");
  EXPECT_EQ(t->decode(Tokenizer::kBos, kFirstExtra), "hi");
  EXPECT_EQ(t->decode(kFirstExtra, kFirstExtra), " hi");
  EXPECT_EQ(t->decode(Tokenizer::kBos, kFirstExtra + 1), "hi");
  EXPECT_EQ(t->decode(7, byte_id('\n')), "\n");
  EXPECT_EQ(t->decode(7, byte_id('\xff')), "\xff");
  EXPECT_EQ(t->decode(7, byte_id('\0')), std::string(1, '\0'));
  EXPECT_EQ(t->decode(7, Tokenizer::kBos), "\n<s>\n");  // the piece as exported
  expect_error([&] { t->decode(7, 261); }, "261");
}

TEST(Llama2cTokenizer, LoadErrors) {
  Vocab v = byte_fallback_vocab({{"ab", -1}});
  const int64_t n = static_cast<int64_t>(v.pieces.size());
  std::string good = serialize(v);
  expect_error([&] { load_llama2c_tokenizer("/nonexistent/tokenizer.bin", n); }, "cannot open");
  expect_error([&] { load_llama2c_tokenizer(write_file("empty.bin", ""), n); }, "truncated");
  expect_error([&] { load_llama2c_tokenizer(write_file("cut1.bin", good.substr(0, good.size() - 1)), n); },
               "truncated inside token 259");
  expect_error([&] { load_llama2c_tokenizer(write_file("cut2.bin", good.substr(0, good.size() - 8)), n); },
               "truncated inside the header of token 259");
  // Exactly at a record boundary, a short file is a vocabulary size mismatch.
  expect_error([&] { load_llama2c_tokenizer(write_file("good.bin", good), n + 1); },
               "holds 260 tokens, but the model's vocabulary size is 261");
  expect_error([&] { load_llama2c_tokenizer(write_file("good.bin", good), n - 1); }, "more than 259 tokens");
  expect_error([&] { load_llama2c_tokenizer(write_file("good.bin", good), 0); }, "must be positive");
  expect_error([&] { load_llama2c_tokenizer(write_file("maxlen0.bin", serialize(v, 0)), n); }, "garbled");
  expect_error([&] { load_llama2c_tokenizer(write_file("maxlen2.bin", serialize(v, 2)), n); },
               "token 0 (byte offset 4) has length 5 > max_token_length 2");
  std::string text(2000, 'x');  // a text file given by mistake
  expect_error([&] { load_llama2c_tokenizer(write_file("text.bin", text), n); }, "garbled");
  Vocab small;
  small.pieces = {"<unk>", "<s>", "</s>", "a"};
  small.scores = {0, 0, 0, 0};
  expect_error([&] { load_vocab(small, "small.bin"); }, "too small for byte fallback");
  Vocab no_bytes = byte_fallback_vocab({});
  no_bytes.pieces[3 + 'A'] = "A\n";
  expect_error([&] { load_vocab(no_bytes, "nobytes.bin"); }, "token 68 is 'A\\x0a', not the byte piece <0x41>");
}

// ---- the real llama2 vocabulary ----

std::string llama_tokenizer_path() {
  std::string shared = test::shared_dir();
  if (shared.empty()) return "";
  std::string p = shared + "/testdata/llama2c/tokenizer.bin";
  return std::filesystem::exists(p) ? p : "";
}

#define REQUIRE_LLAMA_TOKENIZER()     \
  if (llama_tokenizer_path().empty()) \
  GTEST_SKIP() << "../shared/testdata/llama2c/tokenizer.bin is absent (a user's clone): skipped"

// This test's own reader of tokenizer.bin, sharing nothing with the library.
Vocab read_vocab(const std::string& path, int n) {
  std::ifstream f(path, std::ios::binary);
  Vocab v;
  uint32_t max_len, len;
  f.read(reinterpret_cast<char*>(&max_len), 4);
  for (int i = 0; i < n; ++i) {
    float s;
    f.read(reinterpret_cast<char*>(&s), 4);
    f.read(reinterpret_cast<char*>(&len), 4);
    std::string p(len, '\0');
    f.read(p.data(), len);
    v.pieces.push_back(p);
    v.scores.push_back(s);
  }
  EXPECT_TRUE(f.good());
  return v;
}

struct Llama {
  std::unique_ptr<Tokenizer> tok;
  Vocab vocab;
  std::map<std::string, int32_t> id;  // the id of a piece, by scanning the vocab
  int32_t operator[](const std::string& piece) const {
    auto it = id.find(piece);
    EXPECT_NE(it, id.end()) << "piece '" << piece << "' not in the vocab";
    return it == id.end() ? -1 : it->second;
  }
  bool has(const std::string& piece) const { return id.count(piece) != 0; }
};

const Llama& llama() {
  static Llama l = [] {
    Llama l;
    l.tok = load_llama2c_tokenizer(llama_tokenizer_path(), 32000);
    l.vocab = read_vocab(llama_tokenizer_path(), 32000);
    for (size_t i = 0; i < l.vocab.pieces.size(); ++i) l.id.emplace(l.vocab.pieces[i], static_cast<int32_t>(i));
    return l;
  }();
  return l;
}

// llama2.c's encode transcribed plainly: code points, byte fallback, then a
// full rescan for the best pair after every merge.
Ids reference_encode(const Llama& l, const std::string& text) {
  Ids t;
  auto lookup = [&](const std::string& s) {
    auto it = l.id.find(s);
    return it == l.id.end() ? -1 : it->second;
  };
  if (!text.empty()) t.push_back(lookup(" "));  // the dummy prefix, a token of its own
  const std::string& in = text;
  std::string unit;
  for (size_t i = 0; i < in.size(); ++i) {
    unsigned char c = in[i];
    if ((c & 0xC0) != 0x80) unit.clear();
    unit += static_cast<char>(c);
    if (i + 1 < in.size() && (static_cast<unsigned char>(in[i + 1]) & 0xC0) == 0x80 && unit.size() < 4) continue;
    int id = lookup(unit);
    if (id != -1) {
      t.push_back(id);
    } else {
      for (unsigned char b : unit) t.push_back(b + 3);
    }
    unit.clear();
  }
  for (;;) {
    double best = -1e10;
    int best_i = -1, best_id = -1;
    for (size_t i = 0; i + 1 < t.size(); ++i) {
      int id = lookup(l.vocab.pieces[t[i]] + l.vocab.pieces[t[i + 1]]);
      if (id != -1 && l.vocab.scores[id] > best) best = l.vocab.scores[id], best_i = static_cast<int>(i), best_id = id;
    }
    if (best_i < 0) break;
    t[best_i] = best_id;
    t.erase(t.begin() + best_i + 1);
  }
  return t;
}

TEST(Llama2cVocab, KnownEncodings) {
  REQUIRE_LLAMA_TOKENIZER();
  const Llama& l = llama();
  const Tokenizer& t = *l.tok;
  EXPECT_EQ(t.vocab_size(), 32000);
  // sentencepiece: "▁Hello" and "▁world" (exported with "▁" as " ").
  EXPECT_EQ(t.encode("Hello world", true, false), (Ids{1, l[" Hello"], l[" world"]}));
  EXPECT_EQ(t.encode("Hello world", true, true), (Ids{1, l[" Hello"], l[" world"], 2}));
  EXPECT_EQ(t.encode("Hello world", false, false), (Ids{l[" Hello"], l[" world"]}));
  // Pinned too: Llama 2's vocabulary, whose ids every Llama 2 model shares.
  EXPECT_EQ(l[" Hello"], 15043);
  EXPECT_EQ(l[" world"], 3186);
  EXPECT_EQ(t.encode("", true, false), (Ids{1}));
}

TEST(Llama2cVocab, ByteFallbackForUnknownCharacters) {
  REQUIRE_LLAMA_TOKENIZER();
  const Llama& l = llama();
  // U+1F999 LLAMA is not a piece: its four UTF-8 bytes become <0xF0> <0x9F> <0xA6> <0x99>.
  const std::string llama_emoji = "\xf0\x9f\xa6\x99";
  ASSERT_FALSE(l.has(llama_emoji));
  ASSERT_FALSE(l.has(" " + llama_emoji));
  EXPECT_EQ(l["<0xF0>"], 0xF0 + 3);
  EXPECT_EQ(l.tok->encode(llama_emoji, true, false), (Ids{1, l[" "], 0xF0 + 3, 0x9F + 3, 0xA6 + 3, 0x99 + 3}));
  // U+1F30D is a piece of its own.
  const std::string globe = "\xf0\x9f\x8c\x8d";
  ASSERT_TRUE(l.has(globe));
  ASSERT_FALSE(l.has(" " + globe));
  EXPECT_EQ(l.tok->encode(globe, true, false), (Ids{1, l[" "], l[globe]}));
  // Invalid UTF-8.
  EXPECT_EQ(l.tok->encode("\xff", true, false), (Ids{1, l[" "], 0xFF + 3}));
}

std::vector<std::string> sample_texts() {
  return {"Hello world",
          "Once upon a time, there was a little girl named Lily.",
          "  two leading spaces and trailing  ",
          "tabs\tand\nnew\r\nlines\n\n",
          "\xc3\x9cn\xc3\xaf"
          "c\xc3\xb6"
          "d\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\xa6\x99 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
          "\xff\xfe invalid \x80 utf8 \xc3(",
          std::string("nul\0byte", 8),
          "<0x41> looks like a byte piece",
          "1234567890 !@#$%^&*()_+-=[]{};':\",./<>?",
          ""};
}

TEST(Llama2cVocab, DecodeInvertsEncode) {
  REQUIRE_LLAMA_TOKENIZER();
  const Tokenizer& t = *llama().tok;
  for (const std::string& s : sample_texts()) {
    EXPECT_EQ(decode_all(t, t.encode(s, true, false)), s);
    EXPECT_EQ(decode_all(t, t.encode(s, true, true)), s + "\n</s>\n");  // EOS decodes to its exported piece
  }
  std::string bytes = awkward_bytes();
  EXPECT_EQ(decode_all(t, t.encode(bytes, true, false)), bytes);
}

TEST(Llama2cVocab, HeapMergesMatchLlama2cLoop) {
  REQUIRE_LLAMA_TOKENIZER();
  const Llama& l = llama();
  std::vector<std::string> texts = sample_texts();
  texts.push_back(awkward_bytes());
  std::mt19937 rng(11);
  // Random strings over a small alphabet (many competing merges, many ties)
  // and random words from the vocabulary itself.
  const std::string alphabet = "aeinst  \n.\xc3\xa9";
  for (int i = 0; i < 40; ++i) {
    std::string s;
    for (int n = rng() % 200; n > 0; --n) s += alphabet[rng() % alphabet.size()];
    texts.push_back(s);
    std::string w;
    for (int n = rng() % 30; n > 0; --n) w += l.vocab.pieces[259 + rng() % (32000 - 259)];
    texts.push_back(w);
  }
  for (const std::string& s : texts) EXPECT_EQ(l.tok->encode(s, false, false), reference_encode(l, s)) << s;
}

}  // namespace
}  // namespace milrt::llm
