// The training state (train_state.bin, load_train_state): a file accepted
// must save and load back to the same state.
#include "fuzz_util.h"
#include "llm/checkpoint.h"
#include "milrt/error.h"

namespace {
bool same(const milrt::TensorMap& a, const milrt::TensorMap& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end() || !it->second.same_bytes(t)) return false;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = milrt_fuzz::write_input("train_state.bin", data, size);
  milrt::llm::TrainState s;
  try {
    s = milrt::llm::load_train_state(path);
  } catch (const milrt::Error&) {
    return 0;
  }
  std::string again = milrt_fuzz::scratch_dir() + "/again.bin";
  milrt::llm::save_train_state(again, s);
  milrt::llm::TrainState b = milrt::llm::load_train_state(again);
  if (b.step != s.step || b.extra != s.extra || !same(b.m, s.m) || !same(b.v, s.v))
    milrt_fuzz::finding("train state round trip changed the state");
  return 0;
}
