// Schemas and type inference of the state op family.
#include "ir/op_registry.h"

namespace milrt {

void register_state_ops() {}

}  // namespace milrt
