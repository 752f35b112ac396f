// Training data for the Llama trainer: a token stream split into train and
// validation parts, and a seeded sampler of random training windows whose
// position can be saved in a checkpoint and restored exactly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llm/tokenizer.h"

namespace milrt::llm {

struct TokenData {
  std::vector<int32_t> train, val;
  std::string source;  // one line saying where the tokens came from, for logs
};

// Loads a token stream from `path`:
//   ""            the embedded corpus: the license texts every Debian system
//                 carries (the regular files of /usr/share/common-licenses,
//                 read at run time, sorted by name; symlinks such as GPL ->
//                 GPL-3 are skipped so no text appears twice);
//   "*.bin"       pretokenized little-endian uint16 tokens (llama2.c's
//                 TinyStories format), taken as they are;
//   anything else UTF-8 text, encoded with `tok`.
// Text is one document per file, each encoded with a leading BOS. The last
// `val_fraction` (in [0, 1)) of the stream, rounded down, is validation; the
// rest is training. Throws Error (one line) for a missing or unreadable file,
// an empty one, a .bin file of odd size or holding a token id >=
// tok.vocab_size() (naming its offset), and, when seq > 0, fewer than seq + 1
// tokens in train (or in val when val_fraction > 0).
TokenData load_token_data(const std::string& path, const Tokenizer& tok, double val_fraction = 0.1, int64_t seq = 0);

// The directory load_token_data("") reads.
inline constexpr const char* kEmbeddedCorpusDir = "/usr/share/common-licenses";

// Draws `batch` windows of seq + 1 consecutive tokens at uniformly random
// starts (with replacement); for each, x = w[0..seq) and y = w[1..seq]. The
// random generator is xoshiro256** seeded through splitmix64, written here
// rather than taken from <random> so that the same seed gives the same
// batches with every standard library, and a restored State resumes exactly.
class BatchSampler {
 public:
  // `tokens` must outlive the sampler (it is not copied: datasets are large).
  // Throws Error if batch or seq is not positive or tokens has fewer than seq + 1.
  BatchSampler(const std::vector<int32_t>& tokens, int64_t batch, int64_t seq, uint64_t seed);
  BatchSampler(std::vector<int32_t>&&, int64_t, int64_t, uint64_t) = delete;  // would dangle

  // Writes batch * seq token ids to each of x and y (row-major [batch, seq]).
  void next(int32_t* x, int32_t* y);

  struct State {
    uint64_t rng[4];
    uint64_t step;  // batches drawn so far
  };
  State state() const { return state_; }
  // Resumes from a state() taken earlier (from a sampler over the same tokens,
  // batch and seq). Throws Error for the all-zero generator state, which
  // xoshiro can never reach.
  void restore(const State& s);

  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }

 private:
  uint64_t next_u64();
  uint64_t uniform(uint64_t n);  // in [0, n)

  const std::vector<int32_t>& tokens_;
  int64_t batch_, seq_;
  State state_;
};

}  // namespace milrt::llm
