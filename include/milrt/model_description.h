// The interface a Core ML model declares beside its program: named inputs,
// outputs and states with their shapes and flexible shapes, the functions of
// a multifunction model, and the author's metadata. Only `.mlpackage` models
// carry it (their model.mlmodel); load_model() gives the program itself.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "milrt/tensor.h"

namespace milrt {

// One input, output or state as the model describes it.
struct FeatureDescription {
  // "multiArray" and "state" (a state wraps a multiArray) carry dtype and
  // shapes; "int64", "double", "string", "image", "dictionary" and
  // "sequence" are reported by kind only.
  std::string kind;
  std::string name, short_description;
  bool optional = false;
  DType dtype = DType::FP32;          // FP16, FP32, FP64, Int8 or Int32
  Shape shape;                        // the default shape
  // Flexible shapes, at most one of the two: the shapes accepted, or an
  // inclusive range per dimension (upper -1: unbounded).
  std::vector<Shape> enumerated_shapes;
  struct Range {
    int64_t lower = 0, upper = -1;
  };
  std::vector<Range> shape_range;
};

// One function of a multifunction model (iOS18): what `function_name=` picks.
struct FunctionDescription {
  std::string name;
  std::vector<FeatureDescription> inputs, outputs, states;
};

struct ModelDescription {
  int specification_version = 0;     // the Core ML specification version
  // The default (or only) function's interface.
  std::vector<FeatureDescription> inputs, outputs, states;
  std::vector<FunctionDescription> functions;   // empty unless multifunction
  std::string default_function;
  // Metadata: what coremltools sets as author, license, version, short_description, user_defined_metadata.
  std::string author, license, version, short_description;
  std::map<std::string, std::string> user_defined;
};

// Reads the description of an `.mlpackage` (its manifest and model.mlmodel,
// confined as load_model() does). Throws milrt::Error (one line) for any
// other path or a malformed package.
ModelDescription load_model_description(const std::string& path);

// Is `path` an `.mlpackage` directory (a directory holding Manifest.json)?
bool is_mlpackage(const std::string& path);

// The description as text, one feature per line, as `milrt check` prints it.
std::string describe(const ModelDescription& d);

}  // namespace milrt
