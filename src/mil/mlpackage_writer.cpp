// save_mlpackage: a program written as a `.mlpackage` directory, as
// coremltools writes one: Manifest.json, Data/com.apple.CoreML/model.mlmodel
// (a protobuf Model holding the ML program and a description of the default
// function's inputs and outputs) and weights/weight.bin. The inverse of
// mlprogram_proto.cpp: load_model of the result gives the same program.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "mil/literal_blobs.h"
#include "mil/model_document.h"
#include "milrt/blob.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"  // write_file_atomic

namespace milrt {
namespace {

namespace fs = std::filesystem;
using coreml::DataType;

[[noreturn]] void fail(const std::string& dir, const std::string& msg) {
  throw Error(dir + ": error: cannot write an .mlpackage: " + msg);
}

DataType data_type(DType t, const std::string& dir) {
  switch (t) {
    case DType::Bool: return coreml::BOOL;
    case DType::String: return coreml::STRING;
    case DType::FP16: return coreml::FLOAT16;
    case DType::FP32: return coreml::FLOAT32;
    case DType::FP64: return coreml::FLOAT64;
    case DType::BF16: return coreml::BFLOAT16;
    case DType::Int8: return coreml::INT8;
    case DType::Int16: return coreml::INT16;
    case DType::Int32: return coreml::INT32;
    case DType::Int64: return coreml::INT64;
    case DType::Int4: return coreml::INT4;
    case DType::UInt8: return coreml::UINT8;
    case DType::UInt16: return coreml::UINT16;
    case DType::UInt32: return coreml::UINT32;
    case DType::UInt64: return coreml::UINT64;
    case DType::UInt4: return coreml::UINT4;
    case DType::UInt2: return coreml::UINT2;
    case DType::UInt1: return coreml::UINT1;
    case DType::UInt6: return coreml::UINT6;
    case DType::UInt3: return coreml::UINT3;
    case DType::FP8E4M3: return coreml::FLOAT8E4M3FN;
    case DType::FP8E5M2: return coreml::FLOAT8E5M2;
  }
  fail(dir, "dtype " + std::string(dtype_name(t)) + " has no ML program data type");
}

// ios15..ios18 as the file names them, and the specification version that
// introduced each (coremltools: iOS15 -> 6 ... iOS18 -> 9).
struct Opset {
  const char* name;
  int spec;
};
Opset opset(const std::string& ios, const std::string& dir) {
  if (ios == "ios15") return {"CoreML5", 6};
  if (ios == "ios16") return {"CoreML6", 7};
  if (ios == "ios17") return {"CoreML7", 8};
  if (ios == "ios18") return {"CoreML8", 9};
  fail(dir, "opset '" + ios + "' has no Core ML name (ios15 to ios18 do)");
}

class Writer {
 public:
  explicit Writer(std::string dir) : dir_(std::move(dir)) {}

  void type(const Type& t, coreml::ValueType* vt) const {
    switch (t.kind) {
      case Type::Kind::Tensor: {
        auto* tt = vt->mutable_tensor();
        tt->set_data_type(data_type(t.dtype, dir_));
        tt->set_rank(int64_t(t.shape.size()));
        for (int64_t d : t.shape) {
          auto* dim = tt->add_dimensions();
          if (d < 0) dim->mutable_unknown()->set_variadic(false);
          else dim->mutable_constant()->set_size(uint64_t(d));
        }
        return;
      }
      case Type::Kind::List:
        type(t.elems.at(0), vt->mutable_list()->mutable_type());
        if (t.list_len >= 0) vt->mutable_list()->mutable_length()->mutable_constant()->set_size(uint64_t(t.list_len));
        return;
      case Type::Kind::Tuple:
        for (const Type& e : t.elems) type(e, vt->mutable_tuple()->add_types());
        return;
      case Type::Kind::Dict:
        type(t.elems.at(0), vt->mutable_dictionary()->mutable_key_type());
        type(t.elems.at(1), vt->mutable_dictionary()->mutable_value_type());
        return;
      case Type::Kind::State: type(t.elems.at(0), vt->mutable_state()->mutable_wrapped_type()); return;
    }
  }

  // A tensor literal, inline or as a reference into the weight file, in the
  // fields coremltools uses: floats, ints, bools, strings, and raw
  // little-endian bytes for fp16, uint32 and the 8-bit and smaller types
  // (its loader reads those types from bytes only).
  void value(const Literal& lit, coreml::Value* v) const {
    if (!lit.type.is_tensor()) fail(dir_, "a " + lit.type.str() + " constant (only tensor constants are written)");
    type(lit.type, v->mutable_type());
    if (!lit.blob_path.empty()) {
      v->mutable_blob_file()->set_file_name(lit.blob_path);
      v->mutable_blob_file()->set_offset(lit.blob_offset);
      return;
    }
    const Tensor& t = lit.value;
    auto* tv = v->mutable_immediate()->mutable_tensor();
    const int64_t n = t.numel();
    switch (t.dtype()) {
      case DType::FP32:
        for (int64_t i = 0; i < n; ++i) tv->mutable_floats()->add_values(t.ptr<float>()[i]);
        return;
      case DType::FP64:
        for (int64_t i = 0; i < n; ++i) tv->mutable_doubles()->add_values(t.ptr<double>()[i]);
        return;
      case DType::Int32:
      case DType::Int16:
      case DType::UInt16:
        for (int64_t i = 0; i < n; ++i) tv->mutable_ints()->add_values(int32_t(t.at(size_t(i))));
        return;
      case DType::Int64:
        for (int64_t i = 0; i < n; ++i) tv->mutable_long_ints()->add_values(t.ptr<int64_t>()[i]);
        return;
      case DType::UInt64:  // its bit pattern, as the reader takes it
        for (int64_t i = 0; i < n; ++i) tv->mutable_long_ints()->add_values(int64_t(t.ptr<uint64_t>()[i]));
        return;
      case DType::Bool:
        for (int64_t i = 0; i < n; ++i) tv->mutable_bools()->add_values(t.at(size_t(i)) != 0);
        return;
      case DType::String:
        for (const std::string& s : t.strings()) tv->mutable_strings()->add_values(s);
        return;
      default: break;
    }
    if (dtype_bits(t.dtype()) < 8) {
      const std::vector<uint8_t> packed = pack_bits(t);
      tv->mutable_bytes()->set_values(packed.data(), packed.size());
    } else {
      tv->mutable_bytes()->set_values(static_cast<const char*>(t.data()), t.nbytes());
    }
  }

  void binding(const Arg& a, coreml::Argument* out) const {
    if (a.kind == Arg::Kind::Tuple) {
      for (const Arg& e : a.elems) binding(e, out);
      return;
    }
    auto* b = out->add_bindings();
    if (a.kind == Arg::Kind::Var) b->set_name(a.var);
    else value(*a.lit, b->mutable_value());
  }

  void op(const Op& o, coreml::Operation* po) const {
    po->set_type(o.type);
    for (const Input& in : o.inputs) {
      if (in.in_attr_block) {
        if (in.arg.kind != Arg::Kind::Const) fail(dir_, "op '" + o.name + "': attribute '" + in.key + "' is not a constant");
        auto* e = po->add_attributes();
        e->set_key(in.key);
        value(*in.arg.lit, e->mutable_value());
        continue;
      }
      auto* e = po->add_inputs();
      e->set_key(in.key);
      binding(in.arg, e->mutable_value());
    }
    if (!o.name.empty()) {
      auto* e = po->add_attributes();
      e->set_key("name");
      Literal name;
      name.type.dtype = DType::String;
      name.value = Tensor::from_strings({}, {o.name});
      value(name, e->mutable_value());
    }
    for (const Output& out : o.outputs) {
      auto* nt = po->add_outputs();
      nt->set_name(out.name);
      type(out.type, nt->mutable_type());
    }
    for (const Block& b : o.blocks) {
      coreml::Block* pb = po->add_blocks();
      for (const Param& prm : b.inputs) {
        auto* nt = pb->add_inputs();
        nt->set_name(prm.name);
        type(prm.type, nt->mutable_type());
      }
      for (const Op& inner : b.ops) op(inner, pb->add_operations());
      for (const std::string& out : b.outputs) pb->add_outputs(out);
    }
  }

  int function(const Function& f, coreml::Function* pf) const {
    const Opset os = opset(f.opset, dir_);
    pf->set_opset(os.name);
    for (const Param& prm : f.params) {
      auto* nt = pf->add_inputs();
      nt->set_name(prm.name);
      type(prm.type, nt->mutable_type());
    }
    auto* be = pf->add_block_specializations();
    be->set_key(os.name);
    coreml::Block* block = be->mutable_value();
    for (const Op& o : f.ops) op(o, block->add_operations());
    for (const std::string& out : f.outputs) block->add_outputs(out);
    return os.spec;
  }

  // The default function's tensors as the model description lists them
  // (multi-arrays; a dim of unknown size gets 1 as its default and an open range).
  void feature(const std::string& name, const Type& t, coreml::FeatureDescription* fd) const {
    fd->set_name(name);
    const Type& arr = t.kind == Type::Kind::State ? t.elems.at(0) : t;
    if (!arr.is_tensor()) fail(dir_, "'" + name + "' is not a tensor: the description lists only multi-arrays");
    coreml::ArrayType* a = t.kind == Type::Kind::State ? fd->mutable_type()->mutable_state_type()->mutable_array()
                                                       : fd->mutable_type()->mutable_multi_array();
    switch (arr.dtype) {
      case DType::FP16: a->set_data_type(coreml::ARRAY_FLOAT16); break;
      case DType::FP32: a->set_data_type(coreml::ARRAY_FLOAT32); break;
      case DType::FP64: a->set_data_type(coreml::ARRAY_FLOAT64); break;
      case DType::Int32: a->set_data_type(coreml::ARRAY_INT32); break;
      case DType::Int8: a->set_data_type(coreml::ARRAY_INT8); break;
      default: fail(dir_, "'" + name + "' is " + std::string(dtype_name(arr.dtype)) + ": Core ML's multi-arrays are fp16, fp32, fp64, int32 or int8");
    }
    bool flexible = false;
    for (int64_t d : arr.shape) {
      a->add_shape(d < 0 ? 1 : d);
      flexible |= d < 0;
    }
    if (flexible)
      for (int64_t d : arr.shape) {
        auto* r = a->mutable_shape_range()->add_dims();
        r->set_lower(d < 0 ? 1 : uint64_t(d));
        r->set_upper(d < 0 ? -1 : d);
      }
  }

  void describe(const Function& f, coreml::ModelDescription* d) const {
    std::unordered_map<std::string, const Type*> types;
    for (const Op& o : f.ops)
      for (const Output& out : o.outputs) types[out.name] = &out.type;
    for (const Param& prm : f.params)
      feature(prm.name, prm.type, prm.type.kind == Type::Kind::State ? d->add_states() : d->add_inputs());
    for (const std::string& out : f.outputs) {
      auto it = types.find(out);
      const Param* prm = f.param(out);
      if (it == types.end() && !prm) fail(dir_, "output '" + out + "' is not defined");
      feature(out, it != types.end() ? *it->second : prm->type, d->add_outputs());
    }
  }

 private:
  std::string dir_;
};

// A UUID-shaped identifier derived from the document's bytes, so that the
// same program gives the same package byte for byte.
std::string item_id(const std::string& bytes, uint64_t salt) {
  uint64_t h1 = 1469598103934665603ull ^ salt, h2 = 0x9e3779b97f4a7c15ull + salt;
  for (unsigned char c : bytes) {
    h1 = (h1 ^ c) * 1099511628211ull;
    h2 = (h2 ^ c) * 0x100000001b3ull + 0x7f4a7c15;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08X-%04X-4%03X-A%03X-%012llX", unsigned(h1 >> 32), unsigned(h1 >> 16) & 0xffff,
                unsigned(h1) & 0xfff, unsigned(h2 >> 52) & 0xfff, (unsigned long long)(h2 & 0xffffffffffffull));
  return buf;
}

}  // namespace

void save_mlpackage(const Program& p, const std::string& dir, int64_t inline_limit) {
  if (p.functions.empty()) fail(dir, "the program has no functions");
  Program q = p;
  BlobWriter blobs;
  const bool has_blobs = move_large_literals_to_blobs(q, blobs, inline_limit);

  coreml::Model model;
  Writer w(dir);
  auto* prog = model.mutable_ml_program();
  prog->set_version(1);
  int spec = 6;
  for (const Function& f : q.functions) {
    auto* fe = prog->add_functions();
    fe->set_key(f.name);
    spec = std::max(spec, w.function(f, fe->mutable_value()));
  }
  model.set_specification_version(spec);
  const Function* main = q.function("main");
  w.describe(main ? *main : q.functions.front(), model.mutable_description());
  std::string bytes;
  if (!model.SerializeToString(&bytes)) fail(dir, "protobuf serialization failed");

  const fs::path data = fs::path(dir) / "Data" / "com.apple.CoreML";
  std::error_code ec;
  fs::create_directories(data / "weights", ec);
  if (ec) throw Error(dir + ": error: cannot create directory: " + ec.message());
  write_file_atomic((data / "model.mlmodel").string(), bytes);
  if (has_blobs) blobs.write((data / "weights" / "weight.bin").string());
  const std::string model_id = item_id(bytes, 1), weights_id = item_id(bytes, 2);
  nlohmann::ordered_json manifest = {
      {"fileFormatVersion", "1.0.0"},
      {"itemInfoEntries",
       {{model_id,
         {{"author", "com.apple.CoreML"}, {"description", "CoreML Model Specification"}, {"name", "model.mlmodel"},
          {"path", "com.apple.CoreML/model.mlmodel"}}},
        {weights_id,
         {{"author", "com.apple.CoreML"}, {"description", "CoreML Model Weights"}, {"name", "weights"},
          {"path", "com.apple.CoreML/weights"}}}}},
      {"rootModelIdentifier", model_id}};
  write_file_atomic((fs::path(dir) / "Manifest.json").string(), manifest.dump(2) + "\n");
}

}  // namespace milrt
