// Tokenizers for the Llama trainer and generator: a byte-level one (no file
// needed) and llama2.c's BPE tokenizer (tokenizer.bin). Both share llama's id
// conventions: 0 <unk>, 1 <s> (BOS), 2 </s> (EOS), and byte b -> id b + 3 (the
// byte-fallback pieces <0x00>..<0xFF>), so a byte-level model's ids mean the
// same bytes under the llama vocabulary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace milrt::llm {

class Tokenizer {
 public:
  static constexpr int32_t kBos = 1, kEos = 2;

  virtual ~Tokenizer();
  virtual int64_t vocab_size() const = 0;
  // Token ids of `text` (arbitrary bytes; invalid UTF-8 falls back to byte
  // tokens), with BOS prepended / EOS appended when asked.
  virtual std::vector<int32_t> encode(const std::string& text, bool bos, bool eos) const = 0;
  // The text of token `tok` following `prev` (llama2.c's decode: strips the
  // space after BOS, byte tokens come out as the raw byte). For t =
  // encode(s, true, false), concatenating decode(t[i-1], t[i]) for i >= 1
  // gives back s (a generator never prints the BOS itself). Throws Error for
  // a token outside [0, vocab_size()).
  virtual std::string decode(int32_t prev, int32_t tok) const = 0;
};

// Vocabulary of 259: 0 <unk>, 1 <s>, 2 </s>, byte b -> b + 3. Specials decode
// to "" (they are not text); encode never produces <unk>. No dummy prefix.
std::unique_ptr<Tokenizer> byte_tokenizer();

// llama2.c's tokenizer.bin: uint32 max_token_length, then per token a float32
// score, a uint32 byte length and the piece's bytes (sentencepiece's "▁"
// already replaced by " "). The file does not record its vocabulary size, so
// `vocab_size` (the model's) must equal the number of records it holds.
// encode follows llama2.c's run.c: a dummy prefix " " before non-empty text,
// each UTF-8 code point looked up whole or split into byte tokens, then
// repeatedly the best-scoring adjacent pair merged (leftmost on ties; BOS
// never takes part in merges, as in sentencepiece). decode returns the
// exported piece for specials (BOS is "\n<s>\n", EOS "\n</s>\n").
// Throws Error with a one-line reason for a missing, truncated or garbled file
// or a vocabulary size mismatch.
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, int64_t vocab_size);

// `piece` as safe to print: "" for a lone ASCII byte that is neither
// printable nor whitespace (control codes such as backspace or escape that a
// model may emit), else `piece` unchanged. Like llama2.c's safe_printf, except
// that lone bytes >= 0x80 are kept: a byte-level model emits a multi-byte
// UTF-8 character one byte at a time, and dropping them would lose the text.
std::string printable_piece(const std::string& piece);

}  // namespace milrt::llm
