// Views: ops whose result is the same bytes as their input under another
// shape or dtype name, so a plan gives them no kernel and no memory.
//
//  - reshape (and identity): a new shape over the same row-major elements;
//  - cast between dtypes a plan stores alike (fp16/bf16/fp32 are all fp32 in a
//    plan, every integer dtype is int32): nothing to convert.
//
// A view's value lives in its root's buffer (following chains of views). The
// memory plan is made for the function with views removed and their uses
// renamed to the root, which extends the root's lifetime to cover them.
#pragma once
#include <map>
#include <string>

#include "milrt/ir.h"

namespace milrt::rt {

// view output name -> the root value it shares memory with (a parameter, a
// constant or an op output that is not a view).
std::map<std::string, std::string> find_views(const Function& f);

// `f` without its view ops, every use of a view (function outputs included)
// renamed to its root. A function output that is a view thus makes its root a
// function output. Names may then repeat in f.outputs.
Function without_views(const Function& f, const std::map<std::string, std::string>& views);

}  // namespace milrt::rt
