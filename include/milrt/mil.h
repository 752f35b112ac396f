// Reading and writing MIL: text, bundles (.mlmodelc) and weight blobs.
#pragma once
#include <string>
#include <vector>

#include "milrt/ir.h"

namespace milrt {

// Parses MIL text. `path` is used in error messages ("path:line:col: error:
// ...") and `base_dir` is what "@model_path" resolves to. BLOBFILE literals
// are recorded but not read; call load_blobs() to read them.
Program parse_mil(const std::string& text, const std::string& path, const std::string& base_dir);

// Prints a program as MIL text in the dialect of its version; parse_mil of the
// result gives a program equal to the input (ir_diff == "").
std::string print_mil(const Program& p);

// How a model may reach files outside its own bundle.
//
// Confinement (models are untrusted input): every file a model names (each
// BLOBFILE path, and a bundle's model.mil) must lie inside the model's
// directory: the `.mlmodelc` directory, the directory of a bare `.mil` file,
// or Program::base_dir for load_blobs(). A path is taken lexically
// ("@model_path/" and relative paths from that directory, `..` folded) and
// must stay below the real path of the directory; it is then opened one
// component at a time from a descriptor of that directory (openat2 with
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS where the kernel has it), so a
// symlink swapped in after the check is never followed, and the descriptor
// opened is the one memory-mapped. Every symbolic link below the directory
// is refused, also one whose target stays inside (a bundle written by Core
// ML tools has none; refusing them all keeps the rule one line long). The
// directory itself may be reached through symlinks: it is what the user
// named. Absolute paths, `..` leaving the directory, symlinks, and anything
// but a regular file are errors (milrt::Error, one line) before any byte of
// the file is read.
struct LoadOptions {
  // Explicit opt-in: directories from which BLOBFILE paths may also read
  // (absolute paths or `..` paths that land below one of them), for
  // workflows that keep weights apart from the bundle. The same rules apply
  // below each (no symlinks). Empty: the bundle only.
  std::vector<std::string> allow_external_weights;
};

// Reads every BLOBFILE literal of the program: blob storage v2 files (header,
// 0xDEADBEEF metadata records) or raw arrays of the literal's dtype (files
// written by hand, without the v2 header). Files are memory-mapped; every
// offset and size is checked before use. Paths are confined to
// Program::base_dir (see LoadOptions).
void load_blobs(Program& p, const LoadOptions& options = {});

// Loads a model: a `Name.mlmodelc` directory (model.mil + weights/), a
// `Name.mlpackage` directory (Manifest.json + a protobuf model document; see
// milrt/model_description.h for its description), or a bare `.mil` file whose
// blob paths resolve relative to its directory. Parses and loads blobs,
// confined to the model's directory (see LoadOptions); does not verify (see
// verify()). A package gives the same Program as its compiled `.mlmodelc`,
// except that function inputs keep the package's order and the program has
// none of coremlc's buildInfo attributes.
Program load_model(const std::string& path, const LoadOptions& options = {});

// Verifies every function: known ops, required inputs present, input types
// admissible, outputs' types equal to what shape inference gives. Throws
// milrt::Error naming the op, its position and the mismatch. Returns notes
// (non-fatal remarks, e.g. Neural Engine size-1 layout idioms that were
// accepted) one per line.
std::vector<std::string> verify(const Program& p);

}  // namespace milrt

namespace milrt {

// Accepts the size-1 layout idioms of programs written for the Neural
// Engine: an op whose operands or
// declared result only fit the shape rules after moving size-1 dims (e.g.
// matmul of a [1, C, 1, 1] activation by a [N, C] weight declared [1, 1, 1, N])
// gets explicit reshapes around it, so the program becomes well-typed MIL.
// Returns one note per rewritten op; anything else is left for verify().
std::vector<std::string> legalize_layout_idioms(Program& p);

// Writes a program as a bundle directory: DIR/model.mil and, when it has
// tensor literals of more than `inline_limit` elements, DIR/weights/weight.bin
// (blob storage v2) with BLOBFILE references to it. Files are written atomically.
void save_model(const Program& p, const std::string& dir, int64_t inline_limit = 16);

// Writes a program as an `.mlpackage` directory, as coremltools writes one:
// DIR/Manifest.json, DIR/Data/com.apple.CoreML/model.mlmodel (a protobuf
// Model: the ML program, and a description of the `main` function's inputs,
// states and outputs as multi-arrays) and weights/weight.bin (literals of more
// than `inline_limit` elements). load_model of the result gives the program
// back (ir_diff "" up to the order of function inputs). Only tensor
// constants are written; a description needs fp16/fp32/fp64/int32/int8
// inputs and outputs. Files are written atomically; throws milrt::Error.
void save_mlpackage(const Program& p, const std::string& dir, int64_t inline_limit = 16);

}  // namespace milrt
