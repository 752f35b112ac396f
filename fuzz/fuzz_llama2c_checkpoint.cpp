// llama2.c checkpoints (load_llama2c_checkpoint, versions 0 and 1): a file
// accepted must hold exactly the weights its header describes.
#include "fuzz_util.h"
#include "llm/checkpoint.h"
#include "milrt/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = milrt_fuzz::write_input("model.bin", data, size);
  milrt::llm::LlamaWeights w;
  try {
    w = milrt::llm::load_llama2c_checkpoint(path);
  } catch (const milrt::Error&) {
    return 0;
  }
  try {
    milrt::llm::check_llama_weights(w);
  } catch (const milrt::Error& e) {
    milrt_fuzz::finding(std::string("a loaded checkpoint fails check_llama_weights: ") + e.what());
  }
  return 0;
}
