#include "ir/op_registry.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

namespace milrt {
namespace {
std::map<std::string, OpSchema>& registry() {
  static std::map<std::string, OpSchema> r;
  return r;
}
}  // namespace

void register_op(OpSchema s) { registry()[s.type] = std::move(s); }

const OpSchema* find_schema(const std::string& type) {
  ensure_ops_registered();
  auto it = registry().find(type);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> registered_ops() {
  ensure_ops_registered();
  std::vector<std::string> r;
  for (auto& [k, v] : registry()) r.push_back(k);
  return r;
}

void ensure_ops_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_const_ops();
    register_elementwise_ops();
    register_linalg_ops();
    register_tensor_ops();
    register_state_ops();
    register_fused_elementwise_ops();
    register_fused_gemm_ops();
    register_fused_attention_ops();
    register_fused_norm_ops();
    register_rope_ops();
    register_swiglu_ops();
    register_fused_conv_ops();
    register_conv_chain_ops();
    register_pool_ops();
    register_control_flow_ops();
  });
}

const InferInput* InferCtx::find(const std::string& key) const {
  for (auto& [k, v] : inputs_) if (k == key) return &v;
  return nullptr;
}

const InferInput& InferCtx::input(const std::string& key) const {
  const InferInput* i = find(key);
  if (!i) fail("missing required input '" + key + "'");
  if (i->is_tuple && i->elems.size() == 1) return i->elems[0];
  if (i->is_tuple) fail("input '" + key + "' is a tuple where one value is expected");
  return *i;
}

std::vector<const InferInput*> InferCtx::tuple(const std::string& key) const {
  const InferInput* i = find(key);
  if (!i) fail("missing required input '" + key + "'");
  std::vector<const InferInput*> r;
  if (i->is_tuple) for (auto& e : i->elems) r.push_back(&e);
  else r.push_back(i);
  return r;
}

const Tensor* InferCtx::const_value(const std::string& key) const {
  const InferInput* i = find(key);
  if (!i || i->is_tuple) return nullptr;
  return i->value;
}

std::optional<int64_t> InferCtx::const_int(const std::string& key) const {
  const Tensor* t = const_value(key);
  if (!t || t->numel() != 1 || t->dtype() == DType::String) return std::nullopt;
  return int64_t(t->at(0));
}
std::optional<double> InferCtx::const_float(const std::string& key) const {
  const Tensor* t = const_value(key);
  if (!t || t->numel() != 1 || t->dtype() == DType::String) return std::nullopt;
  return t->at(0);
}
std::optional<bool> InferCtx::const_bool(const std::string& key) const {
  const Tensor* t = const_value(key);
  if (!t || t->numel() != 1 || t->dtype() == DType::String) return std::nullopt;
  return t->at(0) != 0;
}
std::optional<std::string> InferCtx::const_str(const std::string& key) const {
  const Tensor* t = const_value(key);
  if (!t || t->dtype() != DType::String || t->strings().size() != 1) return std::nullopt;
  return t->strings()[0];
}
std::optional<std::vector<int64_t>> InferCtx::const_ints(const std::string& key) const {
  const Tensor* t = const_value(key);
  if (!t || t->dtype() == DType::String) return std::nullopt;
  std::vector<int64_t> r;
  for (int64_t i = 0; i < t->numel(); ++i) r.push_back(int64_t(t->at(size_t(i))));
  return r;
}

void InferCtx::require_float(const std::string& key) const {
  if (!dtype_is_float(dtype(key)))
    fail("input '" + key + "' must be a float tensor, got " + type(key).str());
}
void InferCtx::require_rank(const std::string& key, int rank) const {
  if (int(shape(key).size()) != rank)
    fail("input '" + key + "' must have rank " + std::to_string(rank) + ", got " + type(key).str());
}
void InferCtx::require_same_dtype(const std::string& a, const std::string& b) const {
  if (dtype(a) != dtype(b))
    fail("inputs '" + a + "' and '" + b + "' must have the same dtype, got " + type(a).str() +
         " and " + type(b).str());
}

void InferCtx::fail(const std::string& msg) const { throw_op_error(op_, msg); }

Shape broadcast_shapes(const InferCtx& ctx, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == 1) r[i] = db;
    else if (db == 1) r[i] = da;
    else if (da == -1 || db == -1) r[i] = da == -1 ? db : da;
    else if (da == db) r[i] = da;
    else ctx.fail("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
  }
  return r;
}

int64_t normalize_axis(const InferCtx& ctx, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return a;
}

}  // namespace milrt
