// Packing and the engine program text. See lower.h for the layout.
#include "ane/lower.h"

#include <algorithm>
#include <map>
#include <set>

#include "ir/control_flow.h"
#include "mil/literal_blobs.h"
#include "milrt/blob.h"
#include "milrt/builder.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/passes.h"
#include "passes/rewriter.h"

namespace milrt::ane {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t channels_for(const std::vector<std::pair<std::string, Type>>& values, int64_t S) {
  int64_t c = 0;
  for (auto& [name, t] : values) c += ceil_div(std::max<int64_t>(shape_numel(t.shape), 1), S);
  return c;
}

// Unique value names inside one lowered program.
class Names {
 public:
  explicit Names(const Function& f) {
    for (auto& p : f.params) used_.insert(p.name);
    for (auto& op : f.ops)
      for (auto& o : op.outputs) used_.insert(o.name);
  }
  std::string fresh(const std::string& base) {
    std::string n = base;
    for (int i = 2; used_.count(n); ++i) n = base + "_" + std::to_string(i);
    used_.insert(n);
    return n;
  }

 private:
  std::set<std::string> used_;
};

Op make_op(const std::string& type, const std::string& out, const Type& t,
           const std::vector<std::pair<std::string, Arg>>& in) {
  Op op;
  op.type = type;
  op.name = out;
  for (auto& [k, a] : in) op.inputs.push_back(Input{k, a, false});
  op.outputs.push_back(Output{out, t});
  return op;
}

// buildInfo as the seeds' generated programs carry it (docs: "program(1.3),
// a buildInfo dict"); the versions are placeholders nothing here checks.
std::vector<NamedAttr> build_info() {
  static const std::vector<NamedAttr> attrs = [] {
    Program p = parse_mil(
        "program(1.3)\n[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}, "
        "{\"coremlc-version\", \"3505.4.1\"}, {\"coremltools-component-milinternal\", \"\"}, "
        "{\"coremltools-version\", \"9.0\"}})]\n{\n  func main<ios18>(tensor<fp16, [1]> x) {\n  } -> (x);\n}\n",
        "buildInfo", ".");
    return p.attrs;
  }();
  return attrs;
}

}  // namespace

const std::vector<std::string>& ane_passes() {
  static const std::vector<std::string> passes = {"legalize-layout-idioms", "fold-constexpr", "canonicalize",
                                                  "expand-masked-attention", "decompose-all", "cse", "dce"};
  return passes;
}

Program prepare_for_ane(const Program& p) {
  Program q = p;
  run_passes(q, ane_passes());
  verify(q);
  return q;
}

Packing make_packing(const std::vector<std::pair<std::string, Type>>& values, int64_t max_dim) {
  Packing k;
  int64_t last = 1, rows = 0;
  for (auto& [name, t] : values) {
    if (!t.is_tensor() || t.has_unknown_dims()) throw Error("ane: cannot pack '" + name + "' of type " + t.str());
    const int64_t L = t.shape.empty() ? 1 : std::max<int64_t>(t.shape.back(), 1);
    last = std::max(last, L);
    rows += std::max<int64_t>(shape_numel(t.shape), 1) / L;
  }
  const bool row_layout = last <= max_dim && rows <= max_dim;
  int64_t S = std::min(max_dim, std::max<int64_t>(32, ceil_div(last, 32) * 32));
  if (!row_layout) {
    while (channels_for(values, S) > max_dim && S < max_dim) S = std::min(max_dim, S * 2);
    if (channels_for(values, S) > max_dim)
      throw Error("ane: " + std::to_string(values.size()) + " values of " +
                  std::to_string(channels_for(values, S) * S) +
                  " elements do not fit one [1, C, 1, S] surface with C, S <= " + std::to_string(max_dim));
  }
  k.S = S;
  int64_t c = 0;
  for (auto& [name, t] : values) {
    const int64_t n = std::max<int64_t>(shape_numel(t.shape), 1);
    const int64_t row = row_layout ? (t.shape.empty() ? 1 : std::max<int64_t>(t.shape.back(), 1)) : S;
    const int64_t ch = ceil_div(n, row);
    k.slots.push_back(Packing::Slot{name, t, c, ch, row});
    c += ch;
  }
  k.C = std::max<int64_t>(c, 1);
  return k;
}

uint16_t fp16_bits(const Tensor& v, int64_t j) {
  return v.dtype() == DType::FP16 ? v.ptr<uint16_t>()[j] : f32_to_f16(float(v.at(size_t(j))));
}

void write_slot(const Packing& k, size_t slot, const Tensor& v, uint16_t* surface) {
  const Packing::Slot& s = k.slots.at(slot);
  if (v.numel() != shape_numel(s.type.shape))
    throw Error("ane: pack: '" + s.name + "' has shape " + shape_str(v.shape()) + ", expected " +
                shape_str(s.type.shape));
  for (int64_t j = 0; j < v.numel(); ++j) surface[slot_element(k, s, j)] = fp16_bits(v, j);
}

Tensor read_slot(const Packing& k, size_t slot, const uint16_t* surface) {
  const Packing::Slot& s = k.slots.at(slot);
  Tensor t(s.type.dtype, s.type.shape);
  for (int64_t j = 0; j < t.numel(); ++j) {
    const uint16_t h = surface[slot_element(k, s, j)];
    if (t.dtype() == DType::FP16)
      t.mutable_ptr<uint16_t>()[j] = h;
    else
      t.set(size_t(j), f16_to_f32(h));
  }
  return t;
}

Tensor pack(const Packing& k, const std::vector<Tensor>& values) {
  if (values.size() != k.slots.size())
    throw Error("ane: pack: " + std::to_string(values.size()) + " values for " + std::to_string(k.slots.size()) +
                " slots");
  Tensor out(DType::FP16, k.shape());
  for (size_t i = 0; i < values.size(); ++i) write_slot(k, i, values[i], out.mutable_ptr<uint16_t>());
  return out;
}

std::vector<Tensor> unpack(const Packing& k, const Tensor& packed) {
  if (packed.dtype() != DType::FP16 || packed.numel() != k.C * k.S)
    throw Error("ane: unpack: expected fp16 " + shape_str(k.shape()) + ", got " + std::string(dtype_name(packed.dtype())) +
                " " + shape_str(packed.shape()));
  std::vector<Tensor> out;
  for (size_t i = 0; i < k.slots.size(); ++i) out.push_back(read_slot(k, i, packed.ptr<uint16_t>()));
  return out;
}

std::vector<std::string> op_reads(const Op& op) {
  std::vector<std::string> v;
  for (auto& in : op.inputs) passes::for_each_var(in.arg, [&](const std::string& name) { v.push_back(name); });
  for (auto& c : captured_values(op)) v.push_back(c);
  return v;
}

std::vector<Op> constants_read(const Function& f, const std::vector<size_t>& ops) {
  std::map<std::string, size_t> const_def;
  for (size_t i = 0; i < f.ops.size(); ++i)
    if (f.ops[i].type == "const")
      for (auto& o : f.ops[i].outputs) const_def[o.name] = i;
  std::set<size_t> copied;
  std::vector<Op> out;
  for (size_t i : ops)
    for (auto& v : op_reads(f.ops[i]))
      if (auto it = const_def.find(v); it != const_def.end() && copied.insert(it->second).second)
        out.push_back(f.ops[it->second]);
  return out;
}

EngineProgram lower_engine_program(const Function& f, const std::vector<size_t>& ops,
                                   const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                                   int64_t max_dim) {
  const TypeTable types = value_types(f);
  std::vector<std::pair<std::string, Type>> in_values, out_values;
  for (auto& n : inputs) in_values.emplace_back(n, types.at(n));
  for (auto& n : outputs) out_values.emplace_back(n, types.at(n));
  EngineProgram ep;
  ep.input = make_packing(in_values, max_dim);
  ep.output = make_packing(out_values, max_dim);

  Names names(f);
  Function g;
  g.name = "main";
  g.opset = "ios18";
  const std::string x = names.fresh("ane_in");
  g.params.push_back(Param{x, Type::tensor(DType::FP16, ep.input.shape()), {}});

  // Constants the ops read, each copied once, first.
  for (Op& c : constants_read(f, ops)) g.ops.push_back(std::move(c));

  // Unpack: slice each operand's block, drop its padding, reshape, cast.
  const int64_t S = ep.input.S;
  for (const Packing::Slot& s : ep.input.slots) {
    const int64_t n = shape_numel(s.type.shape);
    const Type h = Type::tensor(DType::FP16, {1, s.channels, 1, s.row});
    std::string v = names.fresh(s.name + "__ane_slot");
    g.ops.push_back(make_op("slice_by_size", v, h,
                            {{"x", Arg::of_var(x)},
                             {"begin", lit_i32s({0, s.channel, 0, 0})},
                             {"size", lit_i32s({1, s.channels, 1, s.row})}}));
    if (n != s.channels * s.row) {  // flat layout: drop the padding at the end of the block
      std::string row = names.fresh(s.name + "__ane_row");
      g.ops.push_back(make_op("reshape", row, Type::tensor(DType::FP16, {1, s.channels * S}),
                              {{"x", Arg::of_var(v)}, {"shape", lit_i32s({1, s.channels * S})}}));
      v = names.fresh(s.name + "__ane_trim");
      g.ops.push_back(make_op("slice_by_size", v, Type::tensor(DType::FP16, {1, n}),
                              {{"x", Arg::of_var(row)}, {"begin", lit_i32s({0, 0})}, {"size", lit_i32s({1, n})}}));
    }
    const bool cast = s.type.dtype != DType::FP16;
    const std::string shaped = cast ? names.fresh(s.name + "__ane_h") : s.name;
    g.ops.push_back(make_op("reshape", shaped, Type::tensor(DType::FP16, s.type.shape),
                            {{"x", Arg::of_var(v)}, {"shape", lit_i32s(s.type.shape)}}));
    if (cast)
      g.ops.push_back(make_op("cast", s.name, s.type,
                              {{"x", Arg::of_var(shaped)}, {"dtype", lit_str(std::string(dtype_name(s.type.dtype)))}}));
  }

  for (size_t i : ops) g.ops.push_back(f.ops[i]);

  // Pack: cast to fp16, flatten, pad to whole channels, concatenate on C.
  const int64_t So = ep.output.S;
  std::vector<Arg> blocks;
  for (const Packing::Slot& s : ep.output.slots) {
    const int64_t n = shape_numel(s.type.shape);
    std::string v = s.name;
    if (s.type.dtype != DType::FP16) {
      std::string h = names.fresh(s.name + "__ane_h");
      g.ops.push_back(make_op("cast", h, Type::tensor(DType::FP16, s.type.shape),
                              {{"x", Arg::of_var(v)}, {"dtype", lit_str("fp16")}}));
      v = h;
    }
    if (n == s.channels * s.row && s.row < So) {  // row layout: pad each row to S
      std::string rows = names.fresh(s.name + "__ane_rows");
      g.ops.push_back(make_op("reshape", rows, Type::tensor(DType::FP16, {1, s.channels, 1, s.row}),
                              {{"x", Arg::of_var(v)}, {"shape", lit_i32s({1, s.channels, 1, s.row})}}));
      std::string padded = names.fresh(s.name + "__ane_pad");
      g.ops.push_back(make_op("concat", padded, Type::tensor(DType::FP16, {1, s.channels, 1, So}),
                              {{"values", Arg::of_tuple({Arg::of_var(rows),
                                                         lit(Tensor(DType::FP16, {1, s.channels, 1, So - s.row}))})},
                               {"axis", lit_i32(3)},
                               {"interleave", lit_bool(false)}}));
      v = padded;
    } else if (n != s.channels * So) {  // flat layout: pad the end of the block
      std::string row = names.fresh(s.name + "__ane_row");
      g.ops.push_back(make_op("reshape", row, Type::tensor(DType::FP16, {1, n}),
                              {{"x", Arg::of_var(v)}, {"shape", lit_i32s({1, n})}}));
      std::string padded = names.fresh(s.name + "__ane_pad");
      g.ops.push_back(make_op("concat", padded, Type::tensor(DType::FP16, {1, s.channels * So}),
                              {{"values", Arg::of_tuple({Arg::of_var(row),
                                                         lit(Tensor(DType::FP16, {1, s.channels * So - n}))})},
                               {"axis", lit_i32(1)},
                               {"interleave", lit_bool(false)}}));
      v = padded;
    }
    std::string block = names.fresh(s.name + "__ane_out");
    g.ops.push_back(make_op("reshape", block, Type::tensor(DType::FP16, {1, s.channels, 1, So}),
                            {{"x", Arg::of_var(v)}, {"shape", lit_i32s({1, s.channels, 1, So})}}));
    blocks.push_back(Arg::of_var(block));
  }
  if (blocks.empty()) throw Error("ane: an engine program with no outputs");
  if (blocks.size() == 1) {
    g.outputs.push_back(blocks[0].var);
  } else {
    std::string out = names.fresh("ane_out");
    g.ops.push_back(make_op("concat", out, Type::tensor(DType::FP16, ep.output.shape()),
                            {{"values", Arg::of_tuple(blocks)}, {"axis", lit_i32(1)}, {"interleave", lit_bool(false)}}));
    g.outputs.push_back(out);
  }

  Program prog = make_program({g}, "1.3");
  prog.attrs = build_info();
  verify(prog);
  BlobWriter w;
  if (move_large_literals_to_blobs(prog, w, 16)) ep.weights = w.bytes();
  ep.mil = print_mil(prog);
  return ep;
}

}  // namespace milrt::ane
