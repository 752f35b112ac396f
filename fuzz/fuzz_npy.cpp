// .npy files (parse_npy, what read_npy does after mapping the file): a file
// parsed without error must serialize and parse back to the same tensor.
#include <string>

#include "fuzz_util.h"
#include "milrt/error.h"
#include "milrt/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  milrt::Tensor t;
  try {
    t = milrt::parse_npy(bytes, "fuzz.npy");
  } catch (const milrt::Error&) {
    return 0;
  }
  milrt::Tensor back = milrt::parse_npy(milrt::serialize_npy(t), "round-trip.npy");
  if (!back.same_bytes(t)) milrt_fuzz::finding(".npy round trip changed the tensor");
  return 0;
}
