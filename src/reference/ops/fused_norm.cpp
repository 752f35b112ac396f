// (placeholder until the op lands)
#include "reference/ref_ops.h"

namespace milrt::ref {
void register_ref_fused_norm_ops() {}
}  // namespace milrt::ref
