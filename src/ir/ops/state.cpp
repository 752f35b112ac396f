// (placeholder until the op lands)
#include "ir/op_registry.h"

namespace milrt {
void register_state_ops() {}
}  // namespace milrt
