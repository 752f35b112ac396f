// The ML program of a model document (protobuf) converted to the IR: the same
// Program that parse_mil gives for the program's text, so that everything
// after loading (verify, passes, plans) cannot tell the two apart.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "mil/mlpackage.h"
#include "mil/model_document.h"
#include "milrt/blob.h"
#include "milrt/error.h"

namespace milrt::mlpackage {
namespace {

constexpr int kMaxDepth = 64;  // nested types and values, as the text parser allows

// MIL identifiers as the text lexer reads them, so that a loaded program
// prints as text that parses back.
bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  return true;
}

std::optional<DType> dtype_of(int code) {
  switch (code) {
    case coreml::BOOL: return DType::Bool;
    case coreml::STRING: return DType::String;
    case coreml::FLOAT16: return DType::FP16;
    case coreml::FLOAT32: return DType::FP32;
    case coreml::FLOAT64: return DType::FP64;
    case coreml::BFLOAT16: return DType::BF16;
    case coreml::INT8: return DType::Int8;
    case coreml::INT16: return DType::Int16;
    case coreml::INT32: return DType::Int32;
    case coreml::INT64: return DType::Int64;
    case coreml::INT4: return DType::Int4;
    case coreml::UINT8: return DType::UInt8;
    case coreml::UINT16: return DType::UInt16;
    case coreml::UINT32: return DType::UInt32;
    case coreml::UINT64: return DType::UInt64;
    case coreml::UINT4: return DType::UInt4;
    case coreml::UINT2: return DType::UInt2;
    case coreml::UINT1: return DType::UInt1;
    case coreml::UINT6: return DType::UInt6;
    case coreml::UINT3: return DType::UInt3;
    case coreml::FLOAT8E4M3FN: return DType::FP8E4M3;
    case coreml::FLOAT8E5M2: return DType::FP8E5M2;
    default: return std::nullopt;
  }
}

// Opsets as the file names them (the Core ML release) and as MIL text does.
std::optional<std::string> opset_of(const std::string& s) {
  if (s == "CoreML5") return "ios15";
  if (s == "CoreML6") return "ios16";
  if (s == "CoreML7") return "ios17";
  if (s == "CoreML8") return "ios18";
  return std::nullopt;
}

class Converter {
 public:
  Converter(std::string path, std::string base_dir) : path_(std::move(path)), base_dir_(std::move(base_dir)) {}

  Program program(const coreml::Program& pp) {
    if (pp.version() != 1)
      fail("program", "version " + std::to_string(pp.version()) + " (milrt reads ML program version 1)");
    Program p;
    p.version = "1.0";  // what coremlc writes as text for version 1
    p.path = path_;
    p.base_dir = base_dir_;
    p.attrs = attrs(pp.attributes(), "program");
    std::set<std::string> seen;
    for (auto& e : pp.functions()) {
      if (!seen.insert(e.key()).second) fail("program", "function '" + shown(e.key()) + "' is given twice");
      p.functions.push_back(function(e.key(), e.value()));
    }
    if (p.functions.empty()) fail("program", "has no functions");
    return p;
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& msg) const {
    throw Error(path_ + ": error: " + where + ": " + msg);
  }

  std::string ident(const std::string& s, const std::string& where, const char* what) const {
    if (!is_identifier(s)) fail(where, std::string(what) + " '" + shown(s) + "' is not a MIL identifier");
    return s;
  }

  Function function(const std::string& name, const coreml::Function& pf) {
    Function f;
    const std::string where = "function '" + shown(name) + "'";
    f.name = ident(name, where, "function name");
    f.loc = {path_ + ": " + where, 0, 0};
    auto opset = opset_of(pf.opset());
    if (!opset) fail(where, "unknown opset '" + shown(pf.opset()) + "' (milrt reads CoreML5 to CoreML8, ios15 to ios18)");
    f.opset = *opset;
    for (auto& in : pf.inputs()) f.params.push_back(param(in, where, f.loc));
    f.attrs = attrs(pf.attributes(), where);
    const coreml::Block* block = nullptr;
    for (auto& b : pf.block_specializations()) {
      if (b.key() != pf.opset()) continue;
      if (block) fail(where, "two blocks for opset " + shown(pf.opset()));
      block = &b.value();
    }
    if (!block) fail(where, "has no block for its opset " + shown(pf.opset()));
    if (block->inputs_size()) fail(where, "the function's block has inputs of its own");
    f.ops = ops(*block, where);
    for (auto& o : block->outputs()) f.outputs.push_back(ident(o, where, "output name"));
    return f;
  }

  std::vector<Op> ops(const coreml::Block& block, const std::string& where) {
    std::vector<Op> out;
    for (int i = 0; i < block.operations_size(); ++i) {
      const std::string at = where + ", op " + std::to_string(i);
      if (block.operations(i).type() == "write_state") {
        out.push_back(update_state(block, i, at));
        ++i;  // the read_state it was paired with
        continue;
      }
      out.push_back(op(block.operations(i), at));
    }
    return out;
  }

  // A nested block of a control-flow op (cond, while_loop).
  Block nested_block(const coreml::Block& pb, const std::string& where) {
    if (++depth_ > kMaxDepth) fail(where, "blocks are nested too deeply");
    Block b;
    b.loc = {path_ + ": " + where, 0, 0};
    for (auto& in : pb.inputs()) b.inputs.push_back(param(in, where, b.loc));
    b.ops = ops(pb, where);
    for (auto& o : pb.outputs()) b.outputs.push_back(ident(o, where, "block output name"));
    --depth_;
    return b;
  }

  // An input of a function or of a nested block.
  Param param(const coreml::NamedValueType& in, const std::string& where, const SourceLoc& loc) const {
    Param prm;
    prm.name = ident(in.name(), where, "input name");
    prm.type = type(in.type(), where + " input '" + prm.name + "'", 0);
    prm.loc = loc;
    return prm;
  }

  // The name bound to input `key` of `po`, or "" when it is not one plain name.
  static std::string bound_name(const coreml::Operation& po, const std::string& key) {
    for (auto& e : po.inputs())
      if (e.key() == key && e.value().bindings_size() == 1 &&
          e.value().bindings(0).binding_case() == coreml::Argument::Binding::kName)
        return e.value().bindings(0).name();
    return "";
  }

  // coremltools serializes each iOS18 `coreml_update_state(state, value) -> v`
  // as `write_state(input = state, data = value)` (no outputs) immediately
  // followed by `v = read_state(input = state)`; coremlc's MIL text, and so
  // milrt's IR, has the single op. The pair at operations i, i+1 becomes it.
  Op update_state(const coreml::Block& block, int i, const std::string& at) {
    const std::string where = at + " (write_state)";
    const coreml::Operation& w = block.operations(i);
    if (w.blocks_size() || w.outputs_size()) fail(where, "must have no outputs and no nested blocks");
    const std::string state = bound_name(w, "input");
    if (state.empty() || bound_name(w, "data").empty() || w.inputs_size() != 2)
      fail(where, "must have exactly the inputs 'input' (a state) and 'data', each one named value");
    if (i + 1 >= block.operations_size() || block.operations(i + 1).type() != "read_state" ||
        bound_name(block.operations(i + 1), "input") != state)
      fail(where, "is not followed by a read_state of state '" + shown(state) +
                      "' (milrt reads write_state only as coremltools writes coreml_update_state)");
    Op r = op(block.operations(i + 1), where + " + read_state");
    Op u;
    u.type = "coreml_update_state";
    u.name = r.name;
    u.loc = r.loc;
    u.outputs = std::move(r.outputs);
    u.inputs.push_back({"state", Arg::of_var(ident(state, where, "value name")), false});
    u.inputs.push_back({"value", Arg::of_var(ident(bound_name(w, "data"), where, "value name")), false});
    return u;
  }

  Op op(const coreml::Operation& po, const std::string& at) {
    Op o;
    o.type = ident(po.type(), at, "op type");
    const std::string where = at + " (" + o.type + ")";
    o.loc = {path_ + ": " + where, 0, 0};
    for (int k = 0; k < po.blocks_size(); ++k)
      o.blocks.push_back(nested_block(po.blocks(k), where + " block " + std::to_string(k)));
    if (!po.outputs_size() && o.type != "cond") fail(where, "has no outputs");
    for (auto& out : po.outputs()) {
      Output x;
      x.name = ident(out.name(), where, "output name");
      x.type = type(out.type(), where + " output '" + x.name + "'", 0);
      o.outputs.push_back(std::move(x));
    }
    // Protobuf maps have no order; MIL text (coremlc's) lists each block's
    // entries by name, so the IR does too.
    std::vector<const coreml::ArgumentEntry*> ins;
    for (auto& e : po.inputs()) ins.push_back(&e);
    std::sort(ins.begin(), ins.end(), [](auto* a, auto* b) { return a->key() < b->key(); });
    for (auto* e : ins) add(o, ident(e->key(), where, "input name"), arg(e->value(), where + " input '" + e->key() + "'"), false, where);
    std::vector<const coreml::ValueEntry*> ats;
    for (auto& e : po.attributes()) ats.push_back(&e);
    std::sort(ats.begin(), ats.end(), [](auto* a, auto* b) { return a->key() < b->key(); });
    bool named = false;
    for (auto* e : ats) {
      const std::string key = ident(e->key(), where, "attribute name");
      Literal lit = literal(e->value(), where + " attribute '" + key + "'", 0);
      if (key == "name") {
        if (named) fail(where, "attribute 'name' is given twice");
        if (!lit.type.is_tensor() || lit.value.dtype() != DType::String || lit.value.strings().size() != 1)
          fail(where, "attribute 'name' must be a string");
        o.name = lit.value.strings()[0];
        named = true;
        continue;
      }
      add(o, key, Arg::of_const(std::move(lit)), true, where);
    }
    return o;
  }

  void add(Op& o, const std::string& key, Arg a, bool attr, const std::string& where) const {
    if (o.has(key)) fail(where, "input '" + key + "' is given twice");
    o.inputs.push_back({key, std::move(a), attr});
  }

  Arg arg(const coreml::Argument& pa, const std::string& where) {
    if (pa.bindings_size() == 0) fail(where, "has no value");
    std::vector<Arg> elems;
    for (auto& b : pa.bindings()) {
      if (b.has_value()) elems.push_back(Arg::of_const(literal(b.value(), where, 0)));
      else if (b.binding_case() == coreml::Argument::Binding::kName) elems.push_back(Arg::of_var(ident(b.name(), where, "value name")));
      else fail(where, "a binding names neither a value nor a constant");
    }
    // Several bindings are a variadic input (a tuple in text); a tuple of one
    // is not distinguishable from a plain value here, and means the same.
    if (elems.size() == 1) return std::move(elems[0]);
    return Arg::of_tuple(std::move(elems));
  }

  std::vector<NamedAttr> attrs(const google::protobuf::RepeatedPtrField<coreml::ValueEntry>& entries,
                               const std::string& where) {
    std::vector<NamedAttr> out;
    for (auto& e : entries) {
      NamedAttr a;
      a.key = ident(e.key(), where, "attribute name");
      for (auto& prev : out)
        if (prev.key == a.key) fail(where, "attribute '" + a.key + "' is given twice");
      a.value = literal(e.value(), where + " attribute '" + a.key + "'", 0);
      out.push_back(std::move(a));
    }
    return out;
  }

  // ---- types ----
  int64_t dim(const coreml::Dimension& d, const std::string& where) const {
    switch (d.dimension_case()) {
      case coreml::Dimension::kConstant:
        if (d.constant().size() > uint64_t(std::numeric_limits<int64_t>::max())) fail(where, "a dimension is too large");
        return int64_t(d.constant().size());
      case coreml::Dimension::kUnknown: return -1;
      default: fail(where, "a dimension is neither constant nor unknown");
    }
  }

  Type type(const coreml::ValueType& vt, const std::string& where, int depth) const {
    if (depth > kMaxDepth) fail(where, "type nesting is too deep");
    Type t;
    switch (vt.type_case()) {
      case coreml::ValueType::kTensor: {
        const auto& tt = vt.tensor();
        auto dt = dtype_of(tt.data_type());
        if (!dt) fail(where, "unknown data type " + std::to_string(tt.data_type()));
        t.dtype = *dt;
        if (tt.rank() != tt.dimensions_size())
          fail(where, "tensor type of rank " + std::to_string(tt.rank()) + " lists " +
                          std::to_string(tt.dimensions_size()) + " dimensions");
        for (auto& d : tt.dimensions()) t.shape.push_back(dim(d, where));
        return t;
      }
      case coreml::ValueType::kList:
        t.kind = Type::Kind::List;
        t.elems.push_back(type(vt.list().type(), where, depth + 1));
        t.list_len = vt.list().has_length() ? dim(vt.list().length(), where) : -1;
        return t;
      case coreml::ValueType::kTuple:
        t.kind = Type::Kind::Tuple;
        for (auto& e : vt.tuple().types()) t.elems.push_back(type(e, where, depth + 1));
        return t;
      case coreml::ValueType::kDictionary:
        t.kind = Type::Kind::Dict;
        t.elems.push_back(type(vt.dictionary().key_type(), where, depth + 1));
        t.elems.push_back(type(vt.dictionary().value_type(), where, depth + 1));
        return t;
      case coreml::ValueType::kState:
        t.kind = Type::Kind::State;
        t.elems.push_back(type(vt.state().wrapped_type(), where, depth + 1));
        return t;
      default: fail(where, "has no type");
    }
  }

  // ---- values ----
  Literal literal(const coreml::Value& v, const std::string& where, int depth) const {
    Literal lit;
    lit.type = type(v.type(), where, depth);
    if (lit.type.is_tensor()) {
      for (int64_t d : lit.type.shape)
        if (d < 0) fail(where, "a constant cannot have unknown dimensions");
      if (v.has_blob_file()) {
        if (lit.type.dtype == DType::String) fail(where, "a string tensor cannot live in a weight file");
        lit.blob_path = v.blob_file().file_name();
        lit.blob_offset = v.blob_file().offset();
        if (lit.blob_path.empty()) fail(where, "a weight file reference without a file name");
      } else if (v.immediate().value_case() == coreml::Value::Immediate::kTensor) {
        lit.value = tensor(v.immediate().tensor(), lit.type, where);
      } else {
        fail(where, "a " + lit.type.str() + " constant without a tensor value");
      }
    } else {
      lit.payload = payload(v, lit.type, where, depth);
    }
    return lit;
  }

  static int64_t checked_numel(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) {
      if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
      n *= d;
    }
    return n;
  }

  Tensor tensor(const coreml::TensorValue& tv, const Type& ty, const std::string& where) const {
    const DType dt = ty.dtype;
    const int64_t n = checked_numel(ty.shape);
    if (n < 0) fail(where, "a constant of type " + ty.str() + " has too many elements");
    auto count = [&](size_t have) {
      if (have != uint64_t(n))
        fail(where, "a constant of type " + ty.str() + " holds " + std::to_string(have) + " values (" +
                        std::to_string(n) + " expected)");
    };
    auto refuse = [&](const char* field) -> Tensor {
      fail(where, std::string("a constant of type ") + ty.str() + " stored as " + field);
    };
    if (dt == DType::String) {
      if (tv.value_case() != coreml::TensorValue::kStrings && !(n == 0 && tv.value_case() == coreml::TensorValue::VALUE_NOT_SET))
        refuse("non-strings");
      count(size_t(tv.strings().values_size()));
      return Tensor::from_strings(ty.shape, {tv.strings().values().begin(), tv.strings().values().end()});
    }
    switch (tv.value_case()) {
      case coreml::TensorValue::kBytes: return from_bytes(tv.bytes().values(), ty, n, where);
      case coreml::TensorValue::kFloats:
        if (!dtype_is_float(dt)) refuse("floats");
        count(size_t(tv.floats().values_size()));
        return fill(ty, [&](size_t i) { return double(tv.floats().values(int(i))); });
      case coreml::TensorValue::kDoubles:
        if (!dtype_is_float(dt)) refuse("doubles");
        count(size_t(tv.doubles().values_size()));
        return fill(ty, [&](size_t i) { return tv.doubles().values(int(i)); });
      case coreml::TensorValue::kBools:
        if (dt != DType::Bool) refuse("bools");
        count(size_t(tv.bools().values_size()));
        return fill(ty, [&](size_t i) { return tv.bools().values(int(i)) ? 1.0 : 0.0; });
      case coreml::TensorValue::kInts:
        if (!dtype_is_int(dt) || dt == DType::Int64 || dt == DType::UInt64) refuse("32-bit ints");
        count(size_t(tv.ints().values_size()));
        return fill(ty, [&](size_t i) { return in_range(double(tv.ints().values(int(i))), dt, where); });
      case coreml::TensorValue::kLongInts: {
        if (!dtype_is_int(dt)) refuse("64-bit ints");
        count(size_t(tv.long_ints().values_size()));
        Tensor t(dt, ty.shape);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t v = tv.long_ints().values(int(i));
          if (dt == DType::Int64) t.mutable_ptr<int64_t>()[i] = v;
          else if (dt == DType::UInt64) t.mutable_ptr<uint64_t>()[i] = uint64_t(v);  // stored as its bit pattern
          else t.set(size_t(i), in_range(double(v), dt, where));
        }
        return t;
      }
      case coreml::TensorValue::kStrings: return refuse("strings");
      default:
        count(0);
        return Tensor(dt, ty.shape);
    }
  }

  double in_range(double v, DType dt, const std::string& where) const {
    if (v < dtype_min(dt) || v > dtype_max(dt))
      fail(where, "value " + std::to_string(int64_t(v)) + " is not a valid " + std::string(dtype_name(dt)));
    return v;
  }

  template <class F>
  static Tensor fill(const Type& ty, F value) {
    Tensor t(ty.dtype, ty.shape);
    for (size_t i = 0, n = size_t(t.numel()); i < n; ++i) t.set(i, value(i));
    return t;
  }

  // Raw little-endian elements; sub-byte types packed LSB-first, as in weight files.
  Tensor from_bytes(const std::string& b, const Type& ty, int64_t n, const std::string& where) const {
    const DType dt = ty.dtype;
    const int bits = dtype_bits(dt);
    const uint64_t un = uint64_t(n), size = dtype_size(dt);
    const bool overflow = bits >= 8 && un > std::numeric_limits<uint64_t>::max() / size;
    const uint64_t need = bits < 8 ? un / 8 * uint64_t(bits) + (un % 8 * uint64_t(bits) + 7) / 8 : overflow ? 0 : un * size;
    if (overflow || b.size() != need)
      fail(where, "a constant of type " + ty.str() + " holds " + std::to_string(b.size()) + " bytes (" +
                      (overflow ? std::string("more") : std::to_string(need)) + " expected)");
    Tensor t(dt, ty.shape);
    if (n == 0) return t;
    auto* dst = static_cast<uint8_t*>(t.mutable_data());
    const auto* src = reinterpret_cast<const uint8_t*>(b.data());
    if (bits >= 8) {
      std::memcpy(dst, src, size_t(need));
      if (dt == DType::Bool)  // one canonical byte per bool, as the text parser stores them
        for (int64_t i = 0; i < n; ++i) dst[i] = dst[i] != 0;
      return t;
    }
    return unpack_bits(src, dt, ty.shape, n);
  }

  // Values of dict, list and tuple types, as the text parser's payload tree.
  Payload payload(const coreml::Value& v, const Type& ty, const std::string& where, int depth) const {
    if (depth > kMaxDepth) fail(where, "value nesting is too deep");
    Payload p;
    if (v.has_blob_file()) {
      p.kind = Payload::Kind::Blob;
      p.blob_path = v.blob_file().file_name();
      p.blob_offset = v.blob_file().offset();
      return p;
    }
    const auto& im = v.immediate();
    switch (im.value_case()) {
      case coreml::Value::Immediate::kTensor: {
        if (!ty.is_tensor()) fail(where, "a tensor value where the type is " + ty.str());
        for (int64_t d : ty.shape)
          if (d < 0) fail(where, "a constant cannot have unknown dimensions");
        Tensor t = tensor(im.tensor(), ty, where);
        size_t i = 0;
        return nested(t, 0, i);
      }
      case coreml::Value::Immediate::kTuple:
      case coreml::Value::Immediate::kList: {
        const bool tuple = im.value_case() == coreml::Value::Immediate::kTuple;
        const auto& vals = tuple ? im.tuple().values() : im.list().values();
        p.kind = tuple ? Payload::Kind::Tuple : Payload::Kind::List;
        for (auto& e : vals) p.items.push_back(payload(e, type(e.type(), where, depth + 1), where, depth + 1));
        return p;
      }
      case coreml::Value::Immediate::kDictionary:
        p.kind = Payload::Kind::Dict;
        for (auto& kv : im.dictionary().values()) {
          p.items.push_back(payload(kv.key(), type(kv.key().type(), where, depth + 1), where, depth + 1));
          p.items.push_back(payload(kv.value(), type(kv.value().type(), where, depth + 1), where, depth + 1));
        }
        return p;
      default: fail(where, "a constant without a value");
    }
  }

  static Payload nested(const Tensor& t, size_t d, size_t& i) {
    Payload p;
    if (d == t.shape().size()) {
      if (t.dtype() == DType::String) {
        p.kind = Payload::Kind::String;
        p.text = t.strings()[i++];
      } else if (t.dtype() == DType::Bool) {
        p.kind = Payload::Kind::Bool;
        p.b = t.at(i++) != 0;
      } else if (t.dtype() == DType::Int64) {
        p.text = std::to_string(t.ptr<int64_t>()[i++]);
      } else if (t.dtype() == DType::UInt64) {
        p.text = std::to_string(t.ptr<uint64_t>()[i++]);
      } else {
        const double v = t.at(i++);
        char buf[64];
        if (std::isnan(v)) std::snprintf(buf, sizeof buf, "nan");
        else if (std::isinf(v)) std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
        else std::snprintf(buf, sizeof buf, dtype_is_float(t.dtype()) ? "%a" : "%.0f", v);
        p.text = buf;
      }
      return p;
    }
    p.kind = Payload::Kind::List;
    for (int64_t k = 0; k < t.shape()[d]; ++k) p.items.push_back(nested(t, d + 1, i));
    return p;
  }

  std::string path_, base_dir_;
  int depth_ = 0;
};

}  // namespace

Program program_from_bytes(const std::string& bytes, const std::string& path, const std::string& base_dir) {
  coreml::Model m = parse_model_document(bytes, path);
  if (!m.has_ml_program()) {
    const char* kind = m.has_neural_network() || m.has_neural_network_classifier() ? "a neural network"
                       : m.has_pipeline() || m.has_pipeline_classifier() || m.has_pipeline_regressor() ? "a pipeline"
                                                                                                       : "no ML program";
    throw Error(path + ": error: the model holds " + std::string(kind) + " (milrt runs ML programs only)");
  }
  return Converter(path, base_dir).program(m.ml_program());
}

}  // namespace milrt::mlpackage
