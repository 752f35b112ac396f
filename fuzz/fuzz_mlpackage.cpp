// .mlpackage model documents (model.mlmodel, protobuf): the bytes go through
// the conversion to the IR and the description reader. A program converted
// without error must print as MIL text that parse_mil accepts (names are
// checked as identifiers on the way in, so nothing unprintable gets through)
// and, if its BLOBFILE values load from the scratch package's weight file,
// they must read whole. The seeds (corpus/mlpackage/) are fuzz/mlpackage_seeds/
// *.txtpb encoded with `protoc -I proto/coreml --encode=milrt.coreml.Model
// proto/coreml/Model.proto`; run.sh adds ../shared's real packages.
#include <filesystem>
#include <string>

#include "fuzz_util.h"
#include "mil/mlpackage.h"
#include "milrt/blob.h"
#include "milrt/error.h"
#include "milrt/mil.h"

namespace {
// @model_path of the documents: a folder holding weights/weight.bin with one
// fp32 [2] record at offset 64 (what the seeds name).
const std::string& model_dir() {
  static const std::string dir = [] {
    const std::string d = milrt_fuzz::scratch_dir() + "/model";
    std::filesystem::create_directories(d + "/weights");
    milrt::BlobWriter w;
    w.add(milrt::Tensor(milrt::DType::FP32, {2}));
    w.write(d + "/weights/weight.bin");
    return d;
  }();
  return dir;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    milrt::mlpackage::description_from_bytes(bytes, "fuzz.mlmodel");
  } catch (const milrt::Error&) {
  }
  milrt::Program p;
  try {
    p = milrt::mlpackage::program_from_bytes(bytes, "fuzz.mlmodel", model_dir());
  } catch (const milrt::Error&) {
    return 0;
  }
  try {
    milrt::parse_mil(milrt::print_mil(p), "printed.mil", model_dir());
  } catch (const milrt::Error& e) {
    milrt_fuzz::finding(std::string("a converted program prints as text that does not parse: ") + e.what());
  }
  try {
    milrt::load_blobs(p);
  } catch (const milrt::Error&) {
  }
  return 0;
}
