#include "runtime/numerics.h"

#include <algorithm>
#include <set>

#include "kernels/generic/round_f16.h"

namespace milrt::rt {

std::vector<std::string> passes_for_fp16(const std::vector<std::string>& passes) {
  static const std::set<std::string> hiding = {"fuse-attention", "fuse-norms", "fuse-gemm-epilogue",
                                               "fuse-conv-epilogue", "fuse-conv-chain"};
  std::vector<std::string> r;
  for (const auto& p : passes)
    if (!hiding.count(p)) r.push_back(p);
  return r;
}

namespace {

// Ops whose float results are elements of their float operands (or exact
// small integers, or zeros): on fp16 operands, fp16 values with no rounding.
bool selects_values(const std::string& type) {
  static const std::set<std::string> ops = {
      "reshape", "transpose", "slice_by_index", "slice_by_size", "concat", "split", "squeeze", "expand_dims",
      "tile", "gather", "gather_along_axis", "gather_nd", "identity", "reverse", "pad", "band_part",
      "read_state", "coreml_update_state", "slice_update", "relu", "relu6", "maximum", "minimum", "abs", "select",
      "clip", "floor", "ceil", "round", "sign", "reduce_max", "reduce_min"};
  return ops.count(type) > 0;
}

// Every float operand of `op` (variables and literals, also in tuples) is fp16.
bool float_operands_fp16(const Op& op, const std::unordered_map<std::string, Type>& types) {
  bool ok = true;
  auto check = [&](const Arg& a, auto& self) -> void {
    if (a.kind == Arg::Kind::Var) {
      auto it = types.find(a.var);
      if (it == types.end()) ok = false;
      else if (dtype_is_float(it->second.dtype) && it->second.dtype != DType::FP16) ok = false;
    } else if (a.kind == Arg::Kind::Const) {
      DType d = a.lit->value.dtype();
      if (dtype_is_float(d) && d != DType::FP16) ok = false;
    }
    for (const Arg& e : a.elems) self(e, self);
  };
  for (const Input& in : op.inputs) check(in.arg, check);
  return ok;
}

class RoundedStep final : public Step {
 public:
  RoundedStep(std::unique_ptr<Step> inner, std::vector<std::pair<int, int64_t>> outs)
      : inner_(std::move(inner)), outs_(std::move(outs)) {
    info = inner_->info;
    info.kernel += " +fp16 round";
    for (auto& [id, n] : outs_) info.bytes += 8.0 * double(n);
  }
  void run(const Frame& f) const override {
    inner_->run(f);
    for (auto& [id, n] : outs_) kernels::round_to_f16(f.at<float>(id), n);
  }

 private:
  std::unique_ptr<Step> inner_;
  std::vector<std::pair<int, int64_t>> outs_;
};

}  // namespace

std::unique_ptr<Step> round_fp16_outputs(std::unique_ptr<Step> step, const Op& op, const std::vector<ValueRef>& outs,
                                         const std::unordered_map<std::string, Type>& types) {
  if (op.type == "cast" || op.type == "milrt_elementwise") return step;
  if (selects_values(op.type) && float_operands_fp16(op, types)) return step;
  std::vector<std::pair<int, int64_t>> round;
  for (size_t k = 0; k < op.outputs.size() && k < outs.size(); ++k)
    if (op.outputs[k].type.dtype == DType::FP16 && outs[k].dtype == DType::FP32 && outs[k].numel() > 0)
      round.push_back({outs[k].id, outs[k].numel()});
  if (round.empty()) return step;
  return std::make_unique<RoundedStep>(std::move(step), std::move(round));
}

}  // namespace milrt::rt
