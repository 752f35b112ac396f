// The seed layer's tensor file (checkpoint.bin, load_tensor_file): a file
// accepted must save and load back to the same tensors.
#include "fuzz_util.h"
#include "llm/checkpoint.h"
#include "milrt/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = milrt_fuzz::write_input("checkpoint.bin", data, size);
  bool magic = milrt::llm::is_tensor_file(path);
  milrt::TensorMap t;
  try {
    t = milrt::llm::load_tensor_file(path);
  } catch (const milrt::Error&) {
    return 0;
  }
  if (!magic) milrt_fuzz::finding("load_tensor_file accepted a file is_tensor_file refuses");
  std::string again = milrt_fuzz::scratch_dir() + "/again.bin";
  milrt::llm::save_tensor_file(again, t);
  milrt::TensorMap b = milrt::llm::load_tensor_file(again);
  bool same = b.size() == t.size();
  for (const auto& [name, x] : t)
    if (same) same = b.count(name) && b.at(name).same_bytes(x);
  if (!same) milrt_fuzz::finding("tensor file round trip changed the tensors");
  return 0;
}
