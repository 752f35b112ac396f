// (placeholder until the op lands)
#include "ir/op_registry.h"

namespace milrt {
void register_fused_gemm_ops() {}
}  // namespace milrt
