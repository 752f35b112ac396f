// Writing weights: large tensor literals move into a blob file, as Core ML
// tools keep them, for both bundle writers (save_model, save_mlpackage).
#pragma once
#include <cstdint>

#include "milrt/blob.h"
#include "milrt/ir.h"

namespace milrt {

// Moves every tensor literal of more than `inline_limit` elements (of a dtype
// blob storage has a code for) into `w`, rewriting it as a BLOBFILE reference
// to "@model_path/weights/weight.bin"; a smaller literal that referred to a
// file becomes inline. Returns whether anything went into `w`.
bool move_large_literals_to_blobs(Program& p, BlobWriter& w, int64_t inline_limit);

}  // namespace milrt
