// Which values a bf16 plan stores as bf16 (CompileOptions::bf16_operands).
//
// Under matmul_precision bf16 every GEMM rounds its operands to bf16 before
// it multiplies. A value that only GEMMs read is therefore used only in its
// bf16 rounding: its producer can write that rounding directly, in half the
// bytes, and each GEMM reads it without converting (a training step's
// normed activations feed three products forward and three backward, each
// converting them again). The results are bit for bit those of fp32
// storage: the same nearest-even rounding happens once, earlier.
#pragma once
#include <set>
#include <string>

#include "milrt/ir.h"
#include "runtime/buffer_analysis.h"

namespace milrt::rt {

// The ops whose lowerings can write a bf16 result (each output of the op
// qualifies on its own).
bool writes_bf16_results(const std::string& op_type);

// The values of `f` (an optimized function, captures exposed) to store as
// bf16: fp32 tensors produced by an op writes_bf16_results() accepts, that
// are not outputs or kept in a state's or an output's memory, and whose
// every use is the A or B operand of a matmul, linear or milrt_gemm whose
// other operand is a variable (constant and quantized weights go to kernels
// that read fp32 A), or a view (a reshape) whose uses are; with their views.
// A pure function of the IR and the buffer decisions.
std::set<std::string> bf16_operand_values(const Function& f, const BufferDecisions& decided);

}  // namespace milrt::rt
