// `.mlpackage` models: the package layout (Manifest.json, the root item) and
// the protobuf model document (model.mlmodel) converted to the IR.
#pragma once
#include <string>

#include "milrt/ir.h"
#include "milrt/mil.h"
#include "milrt/model_description.h"

namespace milrt::mlpackage {

// The newest Core ML specification version read: 10 (Core ML 9, iOS 26).
// A newer one may change what fields mean, so it is refused, not guessed at.
constexpr int kMaxSpecificationVersion = 10;
// Limits on what is read into memory before parsing.
constexpr size_t kMaxManifestBytes = size_t(1) << 20;
constexpr size_t kMaxModelBytes = size_t(1) << 30;

// The root model document of a package: its path (for messages), the folder
// holding it (what @model_path names) and its bytes.
struct ModelFile {
  std::string path, dir, bytes;
};

// A name or path from the file as an error message may show it: printable
// ASCII only (no newline can split the one-line message), at most 64 chars.
std::string shown(const std::string& s);

// Reads Manifest.json and the root item it names, confined to the package
// (no absolute path, no `..`, no symbolic link; see LoadOptions).
ModelFile read_model_file(const std::string& package);

// model.mlmodel bytes to the IR, exactly as parse_mil would give for the
// same program written as text: version "1.0", each op's inputs sorted by
// name, attributes (other than `name`) after them. BLOBFILE values are
// recorded, not read. `path` names the document in errors; `base_dir` is
// what @model_path resolves to.
Program program_from_bytes(const std::string& bytes, const std::string& path, const std::string& base_dir);

// model.mlmodel bytes to the model's description.
ModelDescription description_from_bytes(const std::string& bytes, const std::string& path);

// load_model() for a package: the program with its blobs loaded.
Program load(const std::string& package, const LoadOptions& options);

}  // namespace milrt::mlpackage
