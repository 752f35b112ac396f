#include "mil/model_document.h"

#include "mil/mlpackage.h"
#include "milrt/error.h"

namespace milrt::mlpackage {

coreml::Model parse_model_document(const std::string& bytes, const std::string& path) {
  if (bytes.size() > kMaxModelBytes) throw Error(path + ": error: model document larger than 1 GiB");
  coreml::Model m;
  // Protobuf bounds nesting (100 levels) and checks every length against the
  // bytes left, so a hostile document fails here rather than allocating.
  if (!m.ParseFromString(bytes))
    throw Error(path + ": error: not a Core ML model document (the protobuf is truncated or corrupt)");
  const int v = m.specification_version();
  if (v <= 0) throw Error(path + ": error: the model has no specification version");
  if (v > kMaxSpecificationVersion)
    throw Error(path + ": error: specification version " + std::to_string(v) + " is newer than milrt reads (at most " +
                std::to_string(kMaxSpecificationVersion) + ", Core ML 9)");
  return m;
}

}  // namespace milrt::mlpackage
