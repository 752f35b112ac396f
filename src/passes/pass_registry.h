// Entry points of the individual passes (one file each in src/passes/).
#pragma once
#include "milrt/ir.h"

namespace milrt::passes {

void legalize_layout_idioms(Program& p);   // legalize_layout_idioms.cpp (notes dropped)
void fuse_quantized_weights(Program& p);   // fuse_quantized_weights.cpp
void fold_constexpr(Program& p);           // fold_constexpr.cpp
void cse(Program& p);                      // cse.cpp
void dce(Program& p);                      // dce.cpp
void canonicalize(Program& p);             // canonicalize.cpp
void decompose(Program& p);                // decompose.cpp: what has no compiled kernel
void decompose_all(Program& p);            // decompose.cpp: every composite op
void sink_reshapes(Program& p);            // sink_reshapes.cpp
void fold_scatter_add(Program& p);         // fold_scatter_add.cpp
void fuse_attention(Program& p);           // fuse_attention.cpp
void expand_masked_attention(Program& p);  // expand_masked_attention.cpp (the Neural Engine's pipeline)
void fuse_norms(Program& p);               // fuse_norms.cpp
void fuse_gemm_epilogue(Program& p);       // fuse_gemm_epilogue.cpp
void fuse_conv_epilogue(Program& p);       // fuse_conv_epilogue.cpp
void fuse_conv_chain(Program& p);          // fuse_conv_chain.cpp
void fuse_elementwise(Program& p);         // fuse_elementwise.cpp
void schedule(Program& p);                 // schedule.cpp

}  // namespace milrt::passes
