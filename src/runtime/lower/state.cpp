// (placeholder until the lowering lands)
#include "runtime/lowering.h"

namespace milrt::rt {
void register_state_lowerings() {}
}  // namespace milrt::rt
