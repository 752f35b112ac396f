// (placeholder until the pass lands)
#include "passes/pass_registry.h"

namespace milrt::passes {
void schedule(Program&) {}
}  // namespace milrt::passes
