// llama2.c's tokenizer.bin (load_llama2c_tokenizer), then encode and decode.
// The input is the file. Its vocabulary size is what the file holds (counted
// here as the format says), so most files load; a size one larger must be
// refused. Texts: fixed ones (ASCII, multi-byte and broken UTF-8) and the
// input's last 64 bytes. Every token encode returns must decode.
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "llm/tokenizer.h"
#include "milrt/error.h"

namespace {
// Records in the file, read as the format says (0 if the header is cut).
int64_t count_records(const uint8_t* d, size_t n) {
  int64_t count = 0;
  size_t off = 4;
  while (n >= off + 8) {
    uint32_t len;
    std::memcpy(&len, d + off + 4, 4);
    if (n - off - 8 < len) break;
    off += 8 + size_t(len);
    ++count;
  }
  return count;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = milrt_fuzz::write_input("tokenizer.bin", data, size);
  const int64_t vocab = count_records(data, size);
  try {
    milrt::llm::load_llama2c_tokenizer(path, vocab + 1);
    milrt_fuzz::finding("a tokenizer loaded with a vocabulary size one above its record count");
  } catch (const milrt::Error&) {
  }
  std::unique_ptr<milrt::llm::Tokenizer> tok;
  try {
    tok = milrt::llm::load_llama2c_tokenizer(path, vocab);
  } catch (const milrt::Error&) {
    return 0;
  }
  if (tok->vocab_size() != vocab) milrt_fuzz::finding("vocab_size() differs from the file's");
  const size_t tail = size < 64 ? size : 64;
  const std::string texts[] = {
      "", " ", "hello world", "the thin theme", "a\nb\tc  d", "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
      "\x80\xbf\xc3\xff\xfe broken", std::string(reinterpret_cast<const char*>(data + size - tail), tail)};
  for (const std::string& text : texts)
    for (bool bos : {false, true}) {
      std::vector<int32_t> ids = tok->encode(text, bos, !bos);
      int32_t prev = milrt::llm::Tokenizer::kBos;
      for (int32_t id : ids) {
        try {
          tok->decode(prev, id);
        } catch (const milrt::Error& e) {
          milrt_fuzz::finding(std::string("encode returned a token decode refuses: ") + e.what());
        }
        prev = id;
      }
    }
  for (int32_t bad : {-1, int32_t(vocab)}) {
    try {
      tok->decode(0, bad);
      milrt_fuzz::finding("decode accepted a token outside the vocabulary");
    } catch (const milrt::Error&) {
    }
  }
  return 0;
}
