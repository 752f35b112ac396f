// Entry points of the individual passes (one file each in src/passes/).
#pragma once
#include "milrt/ir.h"

namespace milrt::passes {

void legalize_layout_idioms(Program& p);   // legalize_layout_idioms.cpp (notes dropped)

}  // namespace milrt::passes
