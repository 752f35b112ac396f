// Entry points of the individual passes (one file each in src/passes/).
#pragma once
#include "milrt/ir.h"

namespace milrt::passes {

void legalize_layout_idioms(Program& p);   // legalize_layout_idioms.cpp (notes dropped)
void fold_constexpr(Program& p);           // fold_constexpr.cpp
void cse(Program& p);                      // cse.cpp
void dce(Program& p);                      // dce.cpp
void canonicalize(Program& p);             // canonicalize.cpp
void decompose(Program& p);                // decompose.cpp

}  // namespace milrt::passes
