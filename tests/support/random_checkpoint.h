// Random llama2.c checkpoints for tests: written by
// ../shared/peers/make_llama2c_checkpoint.py (an implementation of the file
// format independent of milrt's writer) when it and numpy are there, else by
// milrt's init_llama_weights + save_llama2c_checkpoint, said on stdout.
#pragma once
#include <string>

namespace milrt::test {

// The path of a checkpoint of preset `config` ("tiny", "stories15m",
// "stories15m-gqa", "stories110m"), with a separate classifier when
// `unshared`, from `seed`; made once per test process and reused.
std::string random_llama2c_checkpoint(const std::string& config, bool unshared, int seed = 7);

// A "tiny" checkpoint with the byte vocabulary (259) that `milrt generate`
// uses without --tokenizer, written by milrt under temp_dir(`test_dir`).
std::string byte_vocab_checkpoint(const std::string& test_dir);

}  // namespace milrt::test
