#include "reference/ref_ops.h"

#include <map>
#include <mutex>

namespace milrt::ref {
namespace {
std::map<std::string, RefFn>& table() {
  static std::map<std::string, RefFn> t;
  return t;
}
}  // namespace

void register_ref(const std::string& type, RefFn fn) { table()[type] = fn; }

RefFn find_ref(const std::string& type) {
  ensure_ref_ops_registered();
  auto it = table().find(type);
  return it == table().end() ? nullptr : it->second;
}

std::vector<std::string> reference_ops() {
  ensure_ref_ops_registered();
  std::vector<std::string> r;
  for (auto& [k, v] : table()) r.push_back(k);
  return r;
}

void ensure_ref_ops_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_ref_const_ops();
    register_ref_elementwise_ops();
    register_ref_linalg_ops();
    register_ref_tensor_ops();
    register_ref_state_ops();
    register_ref_fused_elementwise_ops();
    register_ref_fused_gemm_ops();
    register_ref_fused_attention_ops();
    register_ref_fused_norm_ops();
    register_ref_rope_ops();
    register_ref_swiglu_ops();
    register_ref_fused_conv_ops();
    register_ref_conv_chain_ops();
    register_ref_pool_ops();
  });
}

NdArray to_nd(const Tensor& t) {
  if (t.dtype() == DType::String) throw Error("a string tensor has no numeric value");
  NdArray a(t.shape());
  for (int64_t i = 0; i < a.numel(); ++i) a.v[size_t(i)] = t.at(size_t(i));
  return a;
}

Tensor from_nd(const NdArray& a, DType dtype) {
  Tensor t(dtype, a.shape);
  for (int64_t i = 0; i < a.numel(); ++i) t.set(size_t(i), a.v[size_t(i)]);
  return t;
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = int(s.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i) + 1] * s[size_t(i) + 1];
  return st;
}

int64_t broadcast_index(const std::vector<int64_t>& idx, const Shape& out_shape, const Shape& src_shape) {
  size_t off = out_shape.size() - src_shape.size();
  int64_t flat = 0;
  for (size_t i = 0; i < src_shape.size(); ++i) {
    int64_t d = src_shape[i];
    flat = flat * d + (d == 1 ? 0 : idx[i + off]);
  }
  return flat;
}

Shape broadcast(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    r[i] = da == 1 ? db : da;
  }
  return r;
}

int64_t norm_axis(int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1))
    throw Error("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return a;
}

const std::vector<Tensor>* RefCtx::find(const std::string& key) const {
  for (auto& [k, v] : inputs_) if (k == key) return &v;
  return nullptr;
}

bool RefCtx::has(const std::string& key) const { return find(key) != nullptr; }

const Tensor& RefCtx::in(const std::string& key) const {
  auto* v = find(key);
  if (!v) fail("missing input '" + key + "'");
  if (v->size() != 1) fail("input '" + key + "' is a tuple where one value is expected");
  return (*v)[0];
}

const std::vector<Tensor>& RefCtx::tuple(const std::string& key) const {
  auto* v = find(key);
  if (!v) fail("missing input '" + key + "'");
  return *v;
}

int64_t RefCtx::i64(const std::string& key, std::optional<int64_t> def) const {
  if (!has(key)) { if (def) return *def; fail("missing input '" + key + "'"); }
  const Tensor& t = in(key);
  if (t.numel() != 1) fail("input '" + key + "' must be a scalar");
  return int64_t(t.at(0));
}
double RefCtx::f64(const std::string& key, std::optional<double> def) const {
  if (!has(key)) { if (def) return *def; fail("missing input '" + key + "'"); }
  const Tensor& t = in(key);
  if (t.numel() != 1) fail("input '" + key + "' must be a scalar");
  return t.at(0);
}
bool RefCtx::flag(const std::string& key, std::optional<bool> def) const {
  if (!has(key)) { if (def) return *def; fail("missing input '" + key + "'"); }
  const Tensor& t = in(key);
  if (t.numel() != 1) fail("input '" + key + "' must be a scalar");
  return t.at(0) != 0;
}
std::string RefCtx::str(const std::string& key, std::optional<std::string> def) const {
  if (!has(key)) { if (def) return *def; fail("missing input '" + key + "'"); }
  const Tensor& t = in(key);
  if (t.dtype() != DType::String || t.strings().size() != 1) fail("input '" + key + "' must be a string");
  return t.strings()[0];
}
std::vector<int64_t> RefCtx::ints(const std::string& key, std::optional<std::vector<int64_t>> def) const {
  if (!has(key)) { if (def) return *def; fail("missing input '" + key + "'"); }
  const Tensor& t = in(key);
  std::vector<int64_t> r;
  for (int64_t i = 0; i < t.numel(); ++i) r.push_back(int64_t(t.at(size_t(i))));
  return r;
}

void RefCtx::set_out(size_t k, Tensor t) {
  if (results_.size() <= k) results_.resize(k + 1);
  results_[k] = std::move(t);
}

void RefCtx::fail(const std::string& msg) const { throw_op_error(op_, msg); }

}  // namespace milrt::ref
