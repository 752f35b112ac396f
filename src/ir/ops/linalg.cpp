// Schemas and type inference of the linalg op family: matmul, linear, conv,
// conv_transpose, the normalizations, lstm and scaled_dot_product_attention.
//
// Rules follow coremltools (ops/defs/iOS15/{linear,conv,normalization,
// recurrent}.py, the iOS17 overrides, iOS18/transformers.py). Inference cannot
// see the function's opset, so the iOS17 relaxations (weights of a dtype
// independent of x's; fp16 lstm; same_lower conv padding) apply to every
// opset. Parameters that coremltools declares `const` must be compile-time
// constants here too. rms_norm is milrt's extension op (docs/mil-format.md).
#include <algorithm>
#include <cctype>

#include "ir/op_registry.h"

namespace milrt {
namespace {

using Domain = std::vector<DType>;
const Domain kFloat = {DType::FP16, DType::FP32};
const Domain kNumeric = {DType::FP16, DType::FP32, DType::Int32};

bool known(int64_t d) { return d >= 0; }
std::string str(int64_t v) { return std::to_string(v); }

std::string domain_str(const Domain& d) {
  std::string s;
  for (DType t : d) s += (s.empty() ? "" : ", ") + std::string(dtype_name(t));
  return s;
}

void require_domain(const InferCtx& c, const std::string& key, const Domain& d) {
  const Type& t = c.type(key);
  if (!t.is_tensor() || std::find(d.begin(), d.end(), t.dtype) == d.end())
    c.fail("input '" + key + "' must be a tensor of " + domain_str(d) + ", got " + t.str());
}

void require_rank_between(const InferCtx& c, const std::string& key, int lo, int hi) {
  int r = int(c.shape(key).size());
  if (r < lo || r > hi)
    c.fail("input '" + key + "' must have rank " + str(lo) + (hi == lo ? "" : " to " + str(hi)) +
           ", got " + c.type(key).str());
}

// An optional input that must be a rank-1 tensor of `n` elements (-1: unknown).
void require_vector(const InferCtx& c, const std::string& key, int64_t n, const Domain& d) {
  if (!c.has(key)) return;
  require_domain(c, key, d);
  c.require_rank(key, 1);
  int64_t m = c.shape(key)[0];
  if (known(m) && known(n) && m != n)
    c.fail("input '" + key + "' has " + str(m) + " elements, expected " + str(n));
}

// An optional scalar parameter (coremltools' `const T`) of a float dtype.
void require_float_scalar(const InferCtx& c, const std::string& key) {
  if (!c.has(key)) return;
  require_domain(c, key, kFloat);
  if (shape_numel(c.shape(key)) != 1) c.fail("input '" + key + "' must be a scalar, got " + c.type(key).str());
  if (!c.const_value(key)) c.fail("input '" + key + "' must be a compile-time constant");
}

// Values of `const` parameters: the default when absent, an error when given
// but not known at compile time.
bool const_bool_or(const InferCtx& c, const std::string& key, bool def) {
  if (!c.has(key)) return def;
  if (c.dtype(key) != DType::Bool) c.fail("input '" + key + "' must be a bool, got " + c.type(key).str());
  auto v = c.const_bool(key);
  if (!v) c.fail("input '" + key + "' must be a compile-time constant");
  return *v;
}
int64_t const_int_or(const InferCtx& c, const std::string& key, int64_t def) {
  if (!c.has(key)) return def;
  if (!dtype_is_int(c.dtype(key))) c.fail("input '" + key + "' must be an integer, got " + c.type(key).str());
  auto v = c.const_int(key);
  if (!v) c.fail("input '" + key + "' must be a compile-time constant scalar");
  return *v;
}
std::string const_str_or(const InferCtx& c, const std::string& key, const std::string& def) {
  if (!c.has(key)) return def;
  auto v = c.const_str(key);
  if (!v) c.fail("input '" + key + "' must be a compile-time constant string");
  return *v;
}
std::vector<int64_t> const_ints_or(const InferCtx& c, const std::string& key, std::vector<int64_t> def) {
  if (!c.has(key)) return def;
  if (!dtype_is_int(c.dtype(key))) c.fail("input '" + key + "' must be integers, got " + c.type(key).str());
  auto v = c.const_ints(key);
  if (!v) c.fail("input '" + key + "' must be a compile-time constant");
  return *v;
}

// A tensor of input `key`'s dtype.
Type tensor_of(const InferCtx& c, const std::string& key, Shape shape) {
  return Type::tensor(c.dtype(key), std::move(shape));
}

// ---- matmul, linear -------------------------------------------------------

// matmul's y and linear's weight: also bf16 when a compile-time constant. A
// milrt extension beside iOS17's const-operand relaxation (Core ML has no
// bf16): a weight stored in half the bytes of fp32 with fp32's range.
void require_weight_domain(const InferCtx& c, const std::string& key) {
  if (c.has(key) && c.type(key).is_tensor() && c.dtype(key) == DType::BF16) {
    if (!c.const_value(key)) c.fail("input '" + key + "' may be bf16 only as a compile-time constant");
    return;
  }
  require_domain(c, key, kNumeric);
}

void infer_matmul(InferCtx& c) {
  require_domain(c, "x", kNumeric);
  require_weight_domain(c, "y");
  Shape xs = c.shape("x"), ys = c.shape("y");
  bool tx = const_bool_or(c, "transpose_x", false), ty = const_bool_or(c, "transpose_y", false);
  size_t xr = xs.size(), yr = ys.size();
  if (xr == 0 || yr == 0) c.fail("x and y must have rank >= 1, got " + c.type("x").str() + " and " + c.type("y").str());
  if (xr == 1 && tx) c.fail("x is rank 1, so transpose_x must be false");
  if (yr == 1 && ty) c.fail("y is rank 1, so transpose_y must be false");
  if (tx) std::swap(xs[xr - 1], xs[xr - 2]);
  if (ty) std::swap(ys[yr - 1], ys[yr - 2]);
  if (xr == 1) xs.insert(xs.begin(), 1);
  if (yr == 1) ys.push_back(1);
  int64_t kx = xs.back(), ky = ys[ys.size() - 2];
  if (known(kx) && known(ky) && kx != ky)
    c.fail("inner dimensions do not match: x " + c.type("x").str() + ", y " + c.type("y").str() +
           (tx || ty ? " (after transposes)" : "") + " give K = " + str(kx) + " vs " + str(ky));
  Shape out = broadcast_shapes(c, Shape(xs.begin(), xs.end() - 2), Shape(ys.begin(), ys.end() - 2));
  out.push_back(xs[xs.size() - 2]);
  out.push_back(ys.back());
  // Drop the dims added to rank-1 operands (y's sits last, x's just before it).
  if (yr == 1) out.pop_back();
  if (xr == 1) out.erase(out.end() - (yr == 1 ? 1 : 2));
  // iOS17: a const operand may differ in dtype; the result takes the other's.
  bool xc = c.const_value("x") != nullptr, yc = c.const_value("y") != nullptr;
  if (xc == yc) c.require_same_dtype("x", "y");
  c.set_out(Type::tensor(xc && !yc ? c.dtype("y") : c.dtype("x"), out));
}

// x may have any rank >= 1 (x·Wᵀ + b over the last dim, every leading dim a
// batch dim). coremltools documents 1 <= rank <= 3, but its type inference
// does not check it (its value inference is np.matmul(x, Wᵀ) + b, any rank),
// its converter emits rank-4 inputs and Core ML runs them: milrt follows the
// runtime (docs/mil-deviations.md).
void infer_linear(InferCtx& c) {
  require_domain(c, "x", kNumeric);
  require_weight_domain(c, "weight");
  if (c.shape("x").empty()) c.fail("input 'x' must have rank >= 1, got " + c.type("x").str());
  c.require_rank("weight", 2);
  const Shape& xs = c.shape("x");
  const Shape& ws = c.shape("weight");
  if (known(xs.back()) && known(ws[1]) && xs.back() != ws[1])
    c.fail("the last dim of x " + c.type("x").str() + " does not match weight " + c.type("weight").str() +
           " ([D_out, D_in])");
  require_vector(c, "bias", ws[0], kNumeric);
  Shape out = xs;
  out.back() = ws[0];
  c.set_out(tensor_of(c, "x", out));
}

// ---- conv, conv_transpose -------------------------------------------------

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// The conv parameters shared by conv and conv_transpose, checked.
struct ConvParams {
  int nsp = 0;                         // number of spatial dims
  std::vector<int64_t> strides, dilations, pad;
  std::string pad_type;
  int64_t groups = 1;
};

ConvParams conv_params(const InferCtx& c) {
  require_domain(c, "x", kFloat);
  require_domain(c, "weight", kFloat);
  require_rank_between(c, "x", 3, 5);
  ConvParams p;
  p.nsp = int(c.shape("x").size()) - 2;
  if (c.shape("weight").size() != c.shape("x").size())
    c.fail("weight " + c.type("weight").str() + " must have the rank of x " + c.type("x").str());
  size_t n = size_t(p.nsp);
  p.strides = const_ints_or(c, "strides", std::vector<int64_t>(n, 1));
  p.dilations = const_ints_or(c, "dilations", std::vector<int64_t>(n, 1));
  p.groups = const_int_or(c, "groups", 1);
  p.pad_type = const_str_or(c, "pad_type", "valid");
  // Only custom padding reads `pad`; the other modes ignore it.
  p.pad = p.pad_type == "custom" ? const_ints_or(c, "pad", std::vector<int64_t>(2 * n, 0))
                                 : std::vector<int64_t>(2 * n, 0);
  if (p.strides.size() != n) c.fail("strides must have " + str(p.nsp) + " values (one per spatial dim)");
  if (p.dilations.size() != n) c.fail("dilations must have " + str(p.nsp) + " values (one per spatial dim)");
  if (p.pad.size() != 2 * n) c.fail("pad must have " + str(2 * p.nsp) + " values (before, after per spatial dim)");
  for (size_t i = 0; i < n; ++i)
    if (p.strides[i] < 1 || p.dilations[i] < 1) c.fail("strides and dilations must be >= 1");
  for (int64_t v : p.pad)
    if (v < 0) c.fail("pad values must be >= 0");
  if (p.groups < 1) c.fail("groups must be >= 1, got " + str(p.groups));
  return p;
}

void infer_conv(InferCtx& c) {
  ConvParams p = conv_params(c);
  if (p.pad_type != "valid" && p.pad_type != "same" && p.pad_type != "same_lower" && p.pad_type != "custom")
    c.fail("pad_type must be valid, same, same_lower or custom, got '" + p.pad_type + "'");
  const Shape& xs = c.shape("x");
  const Shape& ws = c.shape("weight");
  int64_t cin = xs[1], cout = ws[0];
  if (known(cin) && cin % p.groups != 0)
    c.fail("input channels " + str(cin) + " are not divisible by groups " + str(p.groups));
  if (known(cin) && known(ws[1]) && cin / p.groups != ws[1])
    c.fail("weight " + c.type("weight").str() + " needs dim 1 = C_in / groups = " + str(cin) + " / " +
           str(p.groups));
  if (known(cout) && cout % p.groups != 0)
    c.fail("output channels " + str(cout) + " are not divisible by groups " + str(p.groups));
  require_vector(c, "bias", cout, kFloat);
  Shape out = {xs[0], cout};
  for (int i = 0; i < p.nsp; ++i) {
    int64_t in = xs[size_t(i) + 2], k = ws[size_t(i) + 2], s = p.strides[size_t(i)];
    if (!known(in) || !known(k)) { out.push_back(-1); continue; }
    int64_t ek = (k - 1) * p.dilations[size_t(i)] + 1;
    int64_t total = p.pad[2 * size_t(i)] + p.pad[2 * size_t(i) + 1];
    if (p.pad_type == "same" || p.pad_type == "same_lower")
      total = std::max<int64_t>(0, s * ((in + s - 1) / s) - in + ek - s);
    int64_t o = floor_div(in + total - ek, s) + 1;
    if (o <= 0)
      c.fail("spatial dim " + str(i) + " gets output size " + str(o) + " (input " + str(in) +
             ", dilated kernel " + str(ek) + ", padding " + str(total) + ")");
    out.push_back(o);
  }
  c.set_out(tensor_of(c, "x", out));
}

void infer_conv_transpose(InferCtx& c) {
  ConvParams p = conv_params(c);
  if (p.pad_type != "valid" && p.pad_type != "same" && p.pad_type != "custom")
    c.fail("pad_type must be valid, same or custom, got '" + p.pad_type + "'");
  const Shape& xs = c.shape("x");
  const Shape& ws = c.shape("weight");
  int64_t cin = xs[1];
  if (known(cin) && known(ws[0]) && cin != ws[0])
    c.fail("weight " + c.type("weight").str() + " needs dim 0 = C_in = " + str(cin));
  if (known(cin) && cin % p.groups != 0)
    c.fail("input channels " + str(cin) + " are not divisible by groups " + str(p.groups));
  int64_t cout = known(ws[1]) ? ws[1] * p.groups : -1;
  require_vector(c, "bias", cout, kFloat);
  if (c.has("output_shape")) {
    std::vector<int64_t> os = const_ints_or(c, "output_shape", {});
    if (os.size() != xs.size())
      c.fail("output_shape must have " + str(int64_t(xs.size())) + " values [n, C_out, spatial...]");
    if ((known(xs[0]) && os[0] != xs[0]) || (known(cout) && os[1] != cout))
      c.fail("output_shape " + shape_str(os) + " must start with [n, C_out] = [" + str(xs[0]) + ", " +
             str(cout) + "]");
    for (int64_t d : os)
      if (d < 1) c.fail("output_shape " + shape_str(os) + " must be positive");
    c.set_out(tensor_of(c, "x", os));
    return;
  }
  Shape out = {xs[0], cout};
  for (int i = 0; i < p.nsp; ++i) {
    int64_t in = xs[size_t(i) + 2], k = ws[size_t(i) + 2], s = p.strides[size_t(i)];
    if (!known(in) || !known(k)) { out.push_back(-1); continue; }
    int64_t ek = (k - 1) * p.dilations[size_t(i)] + 1;
    int64_t o = p.pad_type == "same" ? in * s
                                     : (in - 1) * s + ek - p.pad[2 * size_t(i)] - p.pad[2 * size_t(i) + 1];
    if (o <= 0) c.fail("spatial dim " + str(i) + " gets output size " + str(o));
    out.push_back(o);
  }
  c.set_out(tensor_of(c, "x", out));
}

// ---- normalizations -------------------------------------------------------

bool compatible(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (known(a[i]) && known(b[i]) && a[i] != b[i]) return false;
  return true;
}

void infer_layer_norm(InferCtx& c) {
  require_domain(c, "x", kFloat);
  const Shape& xs = c.shape("x");
  int64_t rank = int64_t(xs.size());
  std::vector<int64_t> all(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) all[size_t(i)] = i;
  std::vector<bool> normed(size_t(rank), false);
  for (int64_t a : const_ints_or(c, "axes", all)) normed[size_t(normalize_axis(c, a, rank))] = true;
  Shape normalized;
  for (int64_t i = 0; i < rank; ++i)
    if (normed[size_t(i)]) normalized.push_back(xs[size_t(i)]);
  for (const char* key : {"gamma", "beta"}) {
    if (!c.has(key)) continue;
    require_domain(c, key, kFloat);
    if (!compatible(c.shape(key), normalized))
      c.fail(std::string("input '") + key + "' must have shape " + shape_str(normalized) + " (x's normalized dims), got " +
             c.type(key).str());
  }
  require_float_scalar(c, "epsilon");
  c.set_out(c.type("x"));
}

// batch_norm, instance_norm: per-channel parameters along dim 1.
void infer_channel_norm(InferCtx& c, std::initializer_list<const char*> params, int min_rank) {
  require_domain(c, "x", kFloat);
  require_rank_between(c, "x", min_rank, 5);
  int64_t ch = c.shape("x")[1];
  for (const char* key : params) require_vector(c, key, ch, kFloat);
  require_float_scalar(c, "epsilon");
  c.set_out(c.type("x"));
}

void infer_l2_norm(InferCtx& c) {
  require_domain(c, "x", kFloat);
  if (c.shape("x").size() < 3) c.fail("x must have rank >= 3, got " + c.type("x").str());
  require_float_scalar(c, "epsilon");
  c.set_out(c.type("x"));
}

void infer_local_response_norm(InferCtx& c) {
  require_domain(c, "x", kFloat);
  require_rank_between(c, "x", 3, 5);
  int64_t size = const_int_or(c, "size", 0);
  if (size < 1) c.fail("size must be >= 1, got " + str(size));
  for (const char* key : {"alpha", "beta", "k"}) require_float_scalar(c, key);
  c.set_out(c.type("x"));
}

// rms_norm normalizes dim 1 of the seeds' rank-4 [1, C, 1, S] layout and the
// last dim otherwise; w holds one scale per normalized element, in any shape.
void infer_rms_norm(InferCtx& c) {
  require_domain(c, "x", kFloat);
  const Shape& xs = c.shape("x");
  if (xs.empty()) c.fail("x must have rank >= 1");
  int64_t n = xs[xs.size() == 4 ? 1 : xs.size() - 1];
  if (c.has("w")) {
    require_domain(c, "w", kFloat);
    const Shape& ws = c.shape("w");
    bool unknown = std::any_of(ws.begin(), ws.end(), [](int64_t d) { return d < 0; });
    if (!unknown && known(n) && shape_numel(ws) != n)
      c.fail("w " + c.type("w").str() + " must have " + str(n) + " elements (the normalized dim of x " +
             c.type("x").str() + ")");
  }
  require_float_scalar(c, "eps");
  c.set_out(c.type("x"));
}

// ---- lstm -----------------------------------------------------------------

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// One direction's weights: weight_ih [4H, I], weight_hh [4H, H], bias [4H],
// peephole [3H].
void check_lstm_weights(const InferCtx& c, const std::string& sfx, int64_t in, int64_t h) {
  std::string wih = "weight_ih" + sfx, whh = "weight_hh" + sfx;
  require_domain(c, wih, kFloat);
  require_domain(c, whh, kFloat);
  c.require_rank(wih, 2);
  c.require_rank(whh, 2);
  const Shape& a = c.shape(wih);
  const Shape& b = c.shape(whh);
  auto mismatch = [](int64_t x, int64_t y) { return known(x) && known(y) && x != y; };
  if (mismatch(b[1], h) || mismatch(b[0], known(h) ? 4 * h : -1))
    c.fail("'" + whh + "' " + c.type(whh).str() + " must be [4*H, H] with H = " + str(h));
  if (mismatch(a[0], known(h) ? 4 * h : -1) || mismatch(a[1], in))
    c.fail("'" + wih + "' " + c.type(wih).str() + " must be [4*H, input_size] = [" + str(4 * h) + ", " + str(in) + "]");
  require_vector(c, "bias" + sfx, known(h) ? 4 * h : -1, kFloat);
  require_vector(c, "peephole" + sfx, known(h) ? 3 * h : -1, kFloat);
}

void infer_lstm(InferCtx& c) {
  require_domain(c, "x", kFloat);
  c.require_rank("x", 3);
  std::string dir = const_str_or(c, "direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    c.fail("direction must be forward, reverse or bidirectional, got '" + dir + "'");
  bool seq = const_bool_or(c, "output_sequence", false);
  for (const char* key : {"recurrent_activation", "cell_activation", "activation"}) {
    std::string a = lower(const_str_or(c, key, key == std::string("recurrent_activation") ? "sigmoid" : "tanh"));
    if (a != "tanh" && a != "scaled_tanh" && a != "sigmoid" && a != "hard_sigmoid" && a != "relu" && a != "linear")
      c.fail(std::string("activation `") + a + "` of '" + key +
             "' is not supported (tanh, scaled_tanh, sigmoid, hard_sigmoid, relu, linear)");
  }
  require_float_scalar(c, "clip");
  const Shape& xs = c.shape("x");
  c.require_rank("weight_hh", 2);
  int64_t h = c.shape("weight_hh")[1];
  int64_t dirs = dir == "bidirectional" ? 2 : 1;
  check_lstm_weights(c, "", xs[2], h);
  if (dirs == 2) {
    if (!c.has("weight_ih_back") || !c.has("weight_hh_back"))
      c.fail("a bidirectional lstm needs 'weight_ih_back' and 'weight_hh_back'");
    check_lstm_weights(c, "_back", xs[2], h);
  }
  int64_t hd = known(h) ? dirs * h : -1;
  for (const char* key : {"initial_h", "initial_c"}) {
    require_domain(c, key, kFloat);
    if (!compatible(c.shape(key), {xs[1], hd}))
      c.fail(std::string("'") + key + "' " + c.type(key).str() + " must be [batch, DIRECTIONS*H] = " +
             shape_str({xs[1], hd}));
  }
  DType dt = c.dtype("x");
  c.out = {Type::tensor(dt, {seq ? xs[0] : 1, xs[1], hd}), Type::tensor(dt, {xs[1], hd}),
           Type::tensor(dt, {xs[1], hd})};
}

// ---- scaled_dot_product_attention ------------------------------------------

void infer_sdpa(InferCtx& c) {
  for (const char* key : {"query", "key", "value"}) require_domain(c, key, kFloat);
  const Shape& q = c.shape("query");
  const Shape& k = c.shape("key");
  const Shape& v = c.shape("value");
  if (q.size() != k.size() || q.size() != v.size())
    c.fail("query, key and value must have the same rank, got " + c.type("query").str() + ", " +
           c.type("key").str() + ", " + c.type("value").str());
  if (q.size() < 3) c.fail("query, key and value must have rank >= 3, got " + c.type("query").str());
  size_t r = q.size();
  if (!compatible(Shape(q.begin(), q.end() - 2), Shape(k.begin(), k.end() - 2)) ||
      !compatible(Shape(q.begin(), q.end() - 2), Shape(v.begin(), v.end() - 2)))
    c.fail("query, key and value must have the same batch dims, got " + c.type("query").str() + ", " +
           c.type("key").str() + ", " + c.type("value").str());
  if (known(q[r - 1]) && known(k[r - 1]) && q[r - 1] != k[r - 1])
    c.fail("query and key must have the same embedding size, got " + str(q[r - 1]) + " and " + str(k[r - 1]));
  if (known(k[r - 2]) && known(v[r - 2]) && k[r - 2] != v[r - 2])
    c.fail("key and value must have the same sequence length, got " + str(k[r - 2]) + " and " + str(v[r - 2]));
  if (c.has("attn_mask")) {
    require_domain(c, "attn_mask", {DType::Bool, DType::FP16, DType::FP32});
    const Shape& m = c.shape("attn_mask");
    if (m.empty()) c.fail("attn_mask must have rank >= 1");
    if (known(m.back()) && known(k[r - 2]) && m.back() != k[r - 2])
      c.fail("attn_mask's last dim " + str(m.back()) + " must be the key sequence length " + str(k[r - 2]));
    Shape scores(q.begin(), q.end() - 1);
    Shape b = broadcast_shapes(c, scores, Shape(m.begin(), m.end() - 1));
    if (!compatible(b, scores))
      c.fail("attn_mask " + c.type("attn_mask").str() + " must broadcast to the scores' shape [*B, L, S]");
  }
  Shape out(q.begin(), q.end() - 1);
  out.push_back(v.back());
  c.set_out(tensor_of(c, "query", out));
}

}  // namespace

void register_linalg_ops() {
  register_op({"matmul", {{"x"}, {"y"}, {"transpose_x", false}, {"transpose_y", false}}, 1, 1, infer_matmul});
  register_op({"linear", {{"x"}, {"weight"}, {"bias", false}}, 1, 1, infer_linear});
  register_op({"conv",
               {{"x"}, {"weight"}, {"bias", false}, {"strides", false}, {"pad_type", false}, {"pad", false},
                {"dilations", false}, {"groups", false}},
               1, 1, infer_conv});
  register_op({"conv_transpose",
               {{"x"}, {"weight"}, {"bias", false}, {"pad", false}, {"output_shape", false}, {"pad_type", false},
                {"strides", false}, {"dilations", false}, {"groups", false}},
               1, 1, infer_conv_transpose});
  register_op({"layer_norm", {{"x"}, {"axes", false}, {"gamma", false}, {"beta", false}, {"epsilon", false}}, 1, 1,
               infer_layer_norm});
  register_op({"batch_norm",
               {{"x"}, {"mean"}, {"variance"}, {"gamma", false}, {"beta", false}, {"epsilon", false}}, 1, 1,
               [](InferCtx& c) { infer_channel_norm(c, {"mean", "variance", "gamma", "beta"}, 2); }});
  register_op({"instance_norm", {{"x"}, {"gamma", false}, {"beta", false}, {"epsilon", false}}, 1, 1,
               [](InferCtx& c) { infer_channel_norm(c, {"gamma", "beta"}, 3); }});
  register_op({"l2_norm", {{"x"}, {"epsilon", false}}, 1, 1, infer_l2_norm});
  register_op({"local_response_norm", {{"x"}, {"size"}, {"alpha", false}, {"beta", false}, {"k", false}}, 1, 1,
               infer_local_response_norm});
  register_op({"rms_norm", {{"x"}, {"w", false}, {"eps", false}}, 1, 1, infer_rms_norm});
  register_op({"lstm",
               {{"x"}, {"initial_h"}, {"initial_c"}, {"weight_ih"}, {"weight_hh"}, {"bias", false},
                {"peephole", false}, {"weight_ih_back", false}, {"weight_hh_back", false}, {"bias_back", false},
                {"peephole_back", false}, {"direction", false}, {"output_sequence", false},
                {"recurrent_activation", false}, {"cell_activation", false}, {"activation", false}, {"clip", false}},
               3, 3, infer_lstm});
  register_op({"scaled_dot_product_attention", {{"query"}, {"key"}, {"value"}, {"attn_mask", false}}, 1, 1,
               infer_sdpa});
}

}  // namespace milrt
