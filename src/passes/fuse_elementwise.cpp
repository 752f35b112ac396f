// (placeholder until the pass lands)
#include "passes/pass_registry.h"

namespace milrt::passes {
void fuse_elementwise(Program&) {}
}  // namespace milrt::passes
