// Parsing a Core ML model document (model.mlmodel) with the generated
// protobuf classes, shared by the program and the description readers.
#pragma once
#include <string>

#include "Model.pb.h"  // generated from proto/coreml/ (see proto/coreml_proto.cmake)

namespace milrt::mlpackage {

// Parses `bytes` (at most kMaxModelBytes) and checks the specification
// version; throws Error("path: error: ...") on anything malformed.
coreml::Model parse_model_document(const std::string& bytes, const std::string& path);

}  // namespace milrt::mlpackage
