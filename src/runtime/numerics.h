// CompileOptions::numerics fp16: what compile() does differently so that a
// plan rounds every fp16 value as the reference executor does (fp16 after
// every op), while still computing in fp32 and storing fp32.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/lowering.h"

namespace milrt::rt {

// `passes` without the fusions whose kernels compute several fp16 ops in one
// step with fp32 intermediates (attention, norms, GEMM and conv epilogues,
// conv chains).
// fuse-elementwise stays: its program rounds after each op (EwProgram::round_f16).
std::vector<std::string> passes_for_fp16(const std::vector<std::string>& passes);

// `step`, lowered from `op`, followed by rounding each of its fp16 outputs
// (`outs`, op.outputs' values in order) to fp16 in place; the step itself
// when nothing needs rounding: ops that round themselves (cast; a fused
// elementwise program compiled with round_f16) and ops that only select or
// move values of fp16 operands (reshape, transpose, concat, relu, maximum,
// select, ...), whose results are fp16 values already. `types`: the declared
// type of every value of the function.
std::unique_ptr<Step> round_fp16_outputs(std::unique_ptr<Step> step, const Op& op, const std::vector<ValueRef>& outs,
                                         const std::unordered_map<std::string, Type>& types);

}  // namespace milrt::rt
