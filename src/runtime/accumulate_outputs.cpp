#include "runtime/accumulate_outputs.h"

#include <algorithm>
#include <set>

#include "milrt/error.h"

namespace milrt::rt {

std::vector<OutputAccumulator> add_output_accumulators(Function& f, const std::vector<std::string>& outputs) {
  std::vector<OutputAccumulator> r;
  std::set<std::string> seen;
  for (const std::string& name : outputs) {
    const std::string what = "error: accumulated output '" + name + "' of function '" + f.name + "': ";
    if (!seen.insert(name).second) throw Error(what + "named twice");
    const auto n = std::count(f.outputs.begin(), f.outputs.end(), name);
    if (n == 0) throw Error(what + "not an output");
    if (n > 1) throw Error(what + "returned twice");
    if (f.param(name)) throw Error(what + "an input, not computed by an op");
    const Output* out = nullptr;
    for (const Op& op : f.ops)
      for (const Output& o : op.outputs)
        if (o.name == name) out = &o;
    if (!out) throw Error(what + "not computed by an op");
    if (!out->type.is_tensor() || out->type.dtype != DType::FP32)
      throw Error(what + "only fp32 tensors accumulate, this is " + out->type.str());
    OutputAccumulator a{name, "__milrt_sum_" + name, "__milrt_acc_" + name};
    for (const std::string& taken : {a.sum, a.acc}) {
      bool clash = f.param(taken) != nullptr;
      walk_ops(f.ops, [&](const Op& op) {
        for (const Output& o : op.outputs) clash |= o.name == taken;
      });
      if (clash) throw Error(what + "the function already has a value named '" + taken + "'");
    }
    const Type type = out->type;
    f.params.push_back(Param{a.acc, type, f.loc});
    Op add;
    add.type = "add";
    add.name = a.sum;
    add.inputs = {Input{"x", Arg::of_var(a.acc)}, Input{"y", Arg::of_var(name)}};
    add.outputs = {Output{a.sum, type}};
    add.loc = f.loc;
    f.ops.push_back(std::move(add));
    *std::find(f.outputs.begin(), f.outputs.end(), name) = a.sum;
    r.push_back(std::move(a));
  }
  return r;
}

}  // namespace milrt::rt
