// (placeholder until the pass lands)
#include "passes/pass_registry.h"

namespace milrt::passes {
void fuse_norms(Program&) {}
}  // namespace milrt::passes
