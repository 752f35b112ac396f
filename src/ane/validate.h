// Which MIL ops the Neural Engine backend sends to the engine, and why each
// other op stays on the host. The supported set is deliberately conservative:
// ops the engine is documented (or shown by the seeds' programs) to run,
// in float dtypes only. Everything else is a host step, with a reason that
// `milrt inspect --target ane` prints.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "milrt/ir.h"

namespace milrt::ane {

// The type of every value of a function (params and op outputs) by name.
using TypeTable = std::map<std::string, Type>;
TypeTable value_types(const Function& f);

// Values defined by `const` ops: copied into every step that reads them, so
// they never cross a step boundary.
std::set<std::string> constant_values(const Function& f);

// Whether an op type is in the engine's supported set (dtypes and shapes
// aside).
bool engine_has_op(const std::string& op_type);

// "" when `op` can run on the engine; otherwise one line saying why not,
// e.g. "lstm: no engine route" or "reduce_argmax: produces int32 values".
// Checks: the op type; every non-constant operand and every result of float
// dtype (fp16/fp32; integer and bool values stay on the host); no dim above
// `max_dim`; conv/linear weights constant (the engine fixes weights at
// compile time); scaled_dot_product_attention without attn_mask (the engine
// ignores masks; docs); no state.
std::string host_reason(const Op& op, const TypeTable& types, const std::set<std::string>& constants,
                        int64_t max_dim = 16384);

}  // namespace milrt::ane
