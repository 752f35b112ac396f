// Reference implementations of the iOS18 state ops. A state value arrives
// here as the tensor it currently holds; writing the state is the executor's
// part (see executor.cpp), as it owns the values that persist between calls.
#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

// read_state: a copy of the state's current contents.
void read_state(RefCtx& c) { c.set_out(0, c.in("input").cast(c.out_dtype())); }

// coreml_update_state: returns the value that it stores.
void coreml_update_state(RefCtx& c) { c.set_out(0, c.in("value").cast(c.out_dtype())); }

}  // namespace

void register_ref_state_ops() {
  register_ref("read_state", read_state);
  register_ref("coreml_update_state", coreml_update_state);
}

}  // namespace milrt::ref
