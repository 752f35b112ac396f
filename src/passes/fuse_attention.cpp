// (placeholder until the pass lands)
#include "passes/pass_registry.h"

namespace milrt::passes {
void fuse_attention(Program&) {}
}  // namespace milrt::passes
