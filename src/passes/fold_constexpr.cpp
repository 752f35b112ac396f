// Pass: fold compile-time constants into `const` ops.
//
// Every constexpr_* op (a compressed weight: affine / block-wise quantized,
// palettized, sparse, or an fp16 -> fp32 cast) whose inputs are all constants
// becomes one `const` op per output holding the decompressed tensor in the
// declared output dtype. Later passes and the planner then see plain weights.
//
// Data movement and casts of constants (reshape, transpose, squeeze,
// expand_dims, cast, identity, concat, slice_by_index, slice_by_size) fold
// too, but only when the result has at most 2^20 elements. Larger results
// stay computed: a big constant keeps its compact form (possibly compressed,
// possibly shared by several views), and a kernel can read it through the
// view directly instead of the program carrying a second, materialized copy.
//
// The arithmetic lives in kernels/generic (decompress, copy); this file only
// reads the MIL parameters, resolves them (axes, slices) and calls them. It
// never uses the reference executor, which stays an independent oracle.
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "ir/verifier.h"
#include "kernels/generic/copy.h"
#include "kernels/generic/decompress.h"
#include "milrt/error.h"
#include "passes/pass_registry.h"

namespace milrt {
namespace {

constexpr int64_t kMaxMovedElements = int64_t(1) << 20;

using kernels::ArrayRef;

ArrayRef ref(const Tensor& t) { return {t.data(), t.dtype(), t.shape()}; }

// The constant values of an op's inputs, by key (tuples element-wise).
class ConstInputs {
 public:
  // Returns nullopt unless every input of `op` is a constant tensor.
  static std::optional<ConstInputs> of(const Op& op, const ValueTable& values) {
    ConstInputs c;
    for (const Input& in : op.inputs) {
      std::vector<const Tensor*> elems;
      const bool tuple = in.arg.kind == Arg::Kind::Tuple;
      for (const Arg& a : tuple ? in.arg.elems : std::vector<Arg>{in.arg}) {
        const Tensor* t = constant_of(a, values);
        if (!t) return std::nullopt;
        elems.push_back(t);
      }
      c.inputs_[in.key] = std::move(elems);
    }
    return c;
  }

  bool has(const std::string& key) const { return inputs_.count(key) > 0; }
  const Tensor& operator[](const std::string& key) const { return *inputs_.at(key).at(0); }
  const std::vector<const Tensor*>& tuple(const std::string& key) const { return inputs_.at(key); }

  int64_t i64(const std::string& key, int64_t dflt = 0) const {
    return has(key) ? int64_t((*this)[key].at(0)) : dflt;
  }
  std::vector<int64_t> ints(const std::string& key, std::vector<int64_t> dflt = {}) const {
    if (!has(key)) return dflt;
    const Tensor& t = (*this)[key];
    std::vector<int64_t> r(size_t(t.numel()));
    for (size_t i = 0; i < r.size(); ++i) r[i] = int64_t(t.at(i));
    return r;
  }

 private:
  std::map<std::string, std::vector<const Tensor*>> inputs_;
};

// What a folder sees: the op, its constant inputs and the types inference
// gives its outputs (exact: every input is known).
struct Fold {
  const Op& op;
  const ConstInputs& in;
  const std::vector<Type>& out;
  DType out_dtype(size_t k = 0) const { return out.at(k).dtype; }
};

int64_t normalize(const Fold& f, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) throw_op_error(f.op, "axis " + std::to_string(axis) + " is out of range");
  return axis < 0 ? axis + rank : axis;
}

// ---------------------------------------------------------------- constexpr_*

Tensor fold_affine_dequantize(const Fold& f) {
  const Tensor& q = f.in["quantized_data"];
  Tensor out(f.out_dtype(), q.shape());
  kernels::affine_dequantize(ref(q), normalize(f, f.in.i64("axis"), q.rank()), ref(f.in["zero_point"]),
                             ref(f.in["scale"]), out.mutable_data(), out.dtype());
  return out;
}

Tensor fold_blockwise_shift_scale(const Fold& f) {
  const Tensor& data = f.in["data"];
  Tensor out(f.out_dtype(), data.shape());
  std::optional<ArrayRef> offset;
  if (f.in.has("offset")) offset = ref(f.in["offset"]);
  kernels::blockwise_shift_scale(ref(data), ref(f.in["scale"]), offset ? &*offset : nullptr, out.mutable_data(),
                                 out.dtype());
  return out;
}

int64_t vector_axis(const Fold& f, int64_t rank) {
  return f.in.has("vector_axis") ? normalize(f, f.in.i64("vector_axis"), rank) : -1;
}

// The iOS16 forms carry a `shape` and bit-packed uint8 indices / mask.
Tensor fold_lut_to_dense(const Fold& f) {
  const Tensor& lut = f.in["lut"];
  if (!f.in.has("shape")) {
    const Tensor& indices = f.in["indices"];
    Tensor out(f.out_dtype(), f.out[0].shape);
    kernels::lut_lookup(ref(indices), ref(lut), vector_axis(f, indices.rank()), out.mutable_data());
    return out;
  }
  const Shape shape = f.in.ints("shape");
  const int64_t n = shape_numel(shape), palettes = lut.numel();
  int nbits = 0;
  while ((int64_t(1) << nbits) < palettes) ++nbits;
  std::vector<uint8_t> keys(static_cast<size_t>(n));
  kernels::unpack_bits(f.in["indices"].ptr<uint8_t>(), n, nbits, keys.data());
  Tensor out(f.out_dtype(), shape);
  kernels::lut_lookup({keys.data(), DType::UInt8, {n}}, {lut.data(), lut.dtype(), {1, palettes, 1}}, -1,
                      out.mutable_data());
  return out;
}

Tensor fold_sparse_to_dense(const Fold& f) {
  const Tensor& values = f.in["nonzero_data"];
  const Tensor& mask = f.in["mask"];
  Tensor out(f.out_dtype(), f.out[0].shape);
  const int64_t n = out.numel();
  std::vector<uint8_t> bits;
  const uint8_t* m = mask.ptr<uint8_t>();
  if (f.in.has("shape")) {
    bits.resize(size_t(n));
    kernels::unpack_bits(m, n, 1, bits.data());
    m = bits.data();
  }
  kernels::scatter_masked(values.data(), values.numel(), m, n, dtype_size(values.dtype()), out.mutable_data());
  return out;
}

Tensor fold_constexpr_cast(const Fold& f) {
  const Tensor& x = f.in["source_val"];
  Tensor out(f.out_dtype(), x.shape());
  kernels::convert(x.data(), x.dtype(), x.numel(), out.mutable_data(), out.dtype());
  return out;
}

std::vector<Tensor> fold_lut_to_sparse(const Fold& f) {
  const Tensor& mask = f.in["indices_mask"];
  Tensor out_mask(f.out_dtype(0), f.out[0].shape), values(f.out_dtype(1), f.out[1].shape);
  kernels::sparse_lut_lookup(ref(mask), ref(f.in["indices_nonzero_data"]), ref(f.in["lut"]),
                             vector_axis(f, mask.rank()), out_mask.mutable_ptr<uint8_t>(), values.mutable_data());
  return {out_mask, values};
}

std::vector<Tensor> fold_sparse_blockwise_shift_scale(const Fold& f) {
  const Tensor& mask = f.in["data_mask"];
  Tensor values(f.out_dtype(1), f.out[1].shape);
  std::optional<ArrayRef> offset;
  if (f.in.has("offset")) offset = ref(f.in["offset"]);
  kernels::sparse_blockwise_shift_scale(ref(mask), ref(f.in["nonzero_data"]), ref(f.in["scale"]),
                                        offset ? &*offset : nullptr, values.mutable_data(), values.dtype());
  return {mask, values};
}

// ---------------------------------------------------------------- data movement

// reshape, squeeze, expand_dims, identity: the same elements, the inferred shape.
Tensor fold_view(const Fold& f) { return f.in["x"].reshaped(f.out[0].shape); }

Tensor fold_transpose(const Fold& f) {
  const Tensor& x = f.in["x"];
  std::vector<int64_t> perm = f.in.ints("perm");
  for (int64_t& p : perm) p = normalize(f, p, x.rank());
  Tensor out(x.dtype(), f.out[0].shape);
  kernels::permute(x.data(), x.shape(), perm, dtype_size(x.dtype()), out.mutable_data());
  return out;
}

Tensor fold_cast(const Fold& f) {
  const Tensor& x = f.in["x"];
  Tensor out(f.out_dtype(), x.shape());
  kernels::convert(x.data(), x.dtype(), x.numel(), out.mutable_data(), out.dtype());
  return out;
}

Tensor fold_concat(const Fold& f) {
  std::vector<const void*> srcs;
  std::vector<Shape> shapes;
  for (const Tensor* t : f.in.tuple("values")) {
    srcs.push_back(t->data());
    shapes.push_back(t->shape().empty() ? Shape{1} : t->shape());  // scalars concatenate into a vector
  }
  const Tensor& first = *f.in.tuple("values").at(0);
  const int64_t axis = first.rank() == 0 ? 0 : normalize(f, f.in.i64("axis"), first.rank());
  const bool interleave = f.in.has("interleave") && f.in["interleave"].at(0) != 0;
  Tensor out(first.dtype(), f.out[0].shape);
  kernels::concat(srcs, shapes, axis, interleave, dtype_size(first.dtype()), out.mutable_data());
  return out;
}

// Python slicing of a dim of size n: the first position and the count.
std::pair<int64_t, int64_t> python_slice(int64_t n, std::optional<int64_t> begin, std::optional<int64_t> end,
                                         int64_t step) {
  const int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? n : n - 1;
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + n : v, lo, hi); };
  const int64_t b = begin ? clamp(*begin) : (step > 0 ? 0 : n - 1);
  const int64_t e = end ? clamp(*end) : (step > 0 ? n : -1);
  const int64_t count = step > 0 ? (e - b + step - 1) / step : (b - e - step - 1) / -step;
  return {b, std::max<int64_t>(count, 0)};
}

Tensor fold_slice_by_index(const Fold& f) {
  const Tensor& x = f.in["x"];
  const size_t rank = size_t(x.rank());
  const std::vector<int64_t> begin = f.in.ints("begin"), end = f.in.ints("end");
  const std::vector<int64_t> stride = f.in.ints("stride", std::vector<int64_t>(rank, 1));
  const std::vector<int64_t> bm = f.in.ints("begin_mask", std::vector<int64_t>(rank, 0));
  const std::vector<int64_t> em = f.in.ints("end_mask", std::vector<int64_t>(rank, 0));
  const std::vector<int64_t> sm = f.in.ints("squeeze_mask", std::vector<int64_t>(rank, 0));
  std::vector<int64_t> start(rank), step(rank);
  Shape full(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t n = x.shape()[d];
    if (sm[d]) {  // one position, the dim dropped from the result
      const int64_t i = bm[d] ? 0 : begin[d];
      start[d] = i < 0 ? i + n : i;
      step[d] = full[d] = 1;
      continue;
    }
    std::optional<int64_t> b, e;
    if (!bm[d]) b = begin[d];
    if (!em[d]) e = end[d];
    std::tie(start[d], full[d]) = python_slice(n, b, e, stride[d]);
    step[d] = stride[d];
    if (full[d] == 0) start[d] = 0;
  }
  Tensor out(x.dtype(), full);
  kernels::slice_copy(x.data(), x.shape(), start, step, full, dtype_size(x.dtype()), out.mutable_data());
  return out.reshaped(f.out[0].shape);
}

Tensor fold_slice_by_size(const Fold& f) {
  const Tensor& x = f.in["x"];
  std::vector<int64_t> begin = f.in.ints("begin");
  const std::vector<int64_t> size = f.in.ints("size");
  Shape out_shape(begin.size());
  for (size_t d = 0; d < begin.size(); ++d) {
    if (begin[d] < 0) begin[d] += x.shape()[d];
    out_shape[d] = size[d] == -1 ? x.shape()[d] - begin[d] : size[d];
  }
  Tensor out(x.dtype(), out_shape);
  kernels::slice_copy(x.data(), x.shape(), begin, std::vector<int64_t>(begin.size(), 1), out_shape,
                        dtype_size(x.dtype()), out.mutable_data());
  return out;
}

// ---------------------------------------------------------------- the pass

using Folder = std::vector<Tensor> (*)(const Fold&);

template <Tensor (*F)(const Fold&)>
std::vector<Tensor> one(const Fold& f) { return {F(f)}; }

struct FoldRule {
  Folder fold;
  bool data_movement;  // subject to the kMaxMovedElements limit
};

const std::map<std::string, FoldRule>& rules() {
  static const std::map<std::string, FoldRule> r = {
      {"constexpr_affine_dequantize", {one<fold_affine_dequantize>, false}},
      {"constexpr_blockwise_shift_scale", {one<fold_blockwise_shift_scale>, false}},
      {"constexpr_lut_to_dense", {one<fold_lut_to_dense>, false}},
      {"constexpr_sparse_to_dense", {one<fold_sparse_to_dense>, false}},
      {"constexpr_cast", {one<fold_constexpr_cast>, false}},
      {"constexpr_lut_to_sparse", {fold_lut_to_sparse, false}},
      {"constexpr_sparse_blockwise_shift_scale", {fold_sparse_blockwise_shift_scale, false}},
      {"reshape", {one<fold_view>, true}},
      {"squeeze", {one<fold_view>, true}},
      {"expand_dims", {one<fold_view>, true}},
      {"identity", {one<fold_view>, true}},
      {"transpose", {one<fold_transpose>, true}},
      {"cast", {one<fold_cast>, true}},
      {"concat", {one<fold_concat>, true}},
      {"slice_by_index", {one<fold_slice_by_index>, true}},
      {"slice_by_size", {one<fold_slice_by_size>, true}},
  };
  return r;
}

bool numeric(const Type& t) { return t.is_tensor() && t.dtype != DType::String; }

// The `const` op defining output k of `op` as `value`. It keeps the declared
// type (its spelling included) unless inference knew more dims.
Op make_const(const Op& op, size_t k, const Tensor& value) {
  Type t = op.outputs[k].type;
  if (t.shape != value.shape()) t.shape = value.shape();
  Literal l;
  l.type = t;
  l.value = value;
  Op c;
  c.type = "const";
  c.name = op.outputs.size() == 1 ? op.name : op.outputs[k].name;
  c.loc = op.loc;
  c.inputs.push_back({"val", Arg::of_const(std::move(l)), true});
  c.outputs.push_back({op.outputs[k].name, t});
  return c;
}

// The folded values of op's outputs, or nullopt when the op stays.
std::optional<std::vector<Tensor>> try_fold(const Op& op, const ValueTable& values, const std::string& opset) {
  auto rule = rules().find(op.type);
  if (rule == rules().end()) return std::nullopt;
  std::optional<ConstInputs> in = ConstInputs::of(op, values);
  if (!in) return std::nullopt;
  const std::vector<Type> out = infer_op(op, values, opset);
  for (const Type& t : out) {
    if (!numeric(t) || t.has_unknown_dims()) return std::nullopt;
    if (rule->second.data_movement && shape_numel(t.shape) > kMaxMovedElements) return std::nullopt;
  }
  std::vector<Tensor> r;
  try {
    r = rule->second.fold(Fold{op, *in, out});
  } catch (const Error& e) {
    throw_op_error(op, std::string("cannot fold: ") + e.what());
  }
  for (size_t k = 0; k < r.size(); ++k)
    if (r[k].dtype() != out[k].dtype || r[k].shape() != out[k].shape)
      throw_op_error(op, "folding gave " + Type::tensor(r[k].dtype(), r[k].shape()).str() + " for output '" +
                             op.outputs[k].name + "' where inference gives " + out[k].str());
  return r;
}

void fold_function(Function& f) {
  ValueTable values = param_table(f);
  std::vector<Op> ops;
  ops.reserve(f.ops.size());
  for (Op& op : f.ops) {
    if (auto folded = try_fold(op, values, f.opset)) {
      for (size_t k = 0; k < folded->size(); ++k) {
        ops.push_back(make_const(op, k, (*folded)[k]));
        define_outputs(ops.back(), values);
      }
      continue;
    }
    ops.push_back(std::move(op));
    define_outputs(ops.back(), values);
  }
  f.ops = std::move(ops);
}

}  // namespace

namespace passes {
void fold_constexpr(Program& p) {
  for (Function& f : p.functions) fold_function(f);
}
}  // namespace passes

}  // namespace milrt
