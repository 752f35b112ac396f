// (placeholder until the lowering lands)
#include "runtime/lowering.h"

namespace milrt::rt {
void register_fused_conv_lowerings() {}
}  // namespace milrt::rt
