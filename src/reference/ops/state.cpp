// (placeholder until the op lands)
#include "reference/ref_ops.h"

namespace milrt::ref {
void register_ref_state_ops() {}
}  // namespace milrt::ref
