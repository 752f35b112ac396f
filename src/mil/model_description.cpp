// The model document's description (interface and metadata) and its text form.
#include "milrt/model_description.h"

#include <set>

#include "mil/mlpackage.h"
#include "mil/model_document.h"
#include "milrt/error.h"

namespace milrt {
namespace {

std::string feature_kind(const coreml::FeatureType& t) {
  switch (t.kind_case()) {
    case coreml::FeatureType::kInt64Type: return "int64";
    case coreml::FeatureType::kDoubleType: return "double";
    case coreml::FeatureType::kStringType: return "string";
    case coreml::FeatureType::kImageType: return "image";
    case coreml::FeatureType::kMultiArray: return "multiArray";
    case coreml::FeatureType::kDictionaryType: return "dictionary";
    case coreml::FeatureType::kSequenceType: return "sequence";
    case coreml::FeatureType::kStateType: return "state";
    default: return "";
  }
}

void read_array(const coreml::ArrayType& a, FeatureDescription& f, const std::string& where) {
  switch (a.data_type()) {
    case coreml::ARRAY_FLOAT16: f.dtype = DType::FP16; break;
    case coreml::ARRAY_FLOAT32: f.dtype = DType::FP32; break;
    case coreml::ARRAY_FLOAT64: f.dtype = DType::FP64; break;
    case coreml::ARRAY_INT8: f.dtype = DType::Int8; break;
    case coreml::ARRAY_INT32: f.dtype = DType::Int32; break;
    default: throw Error(where + ": unknown multiArray data type " + std::to_string(a.data_type()));
  }
  auto dims = [&](const google::protobuf::RepeatedField<int64_t>& ds) {
    Shape s;
    for (int64_t d : ds) {
      if (d < 0) throw Error(where + ": a negative dimension " + std::to_string(d));
      s.push_back(d);
    }
    return s;
  };
  f.shape = dims(a.shape());
  for (auto& s : a.enumerated_shapes().shapes()) f.enumerated_shapes.push_back(dims(s.dims()));
  for (auto& r : a.shape_range().dims()) {
    if (r.lower() > uint64_t(INT64_MAX) || (r.upper() >= 0 && uint64_t(r.upper()) < r.lower()))
      throw Error(where + ": an empty or invalid dimension range");
    f.shape_range.push_back({int64_t(r.lower()), r.upper() < 0 ? -1 : r.upper()});
  }
}

std::vector<FeatureDescription> features(const google::protobuf::RepeatedPtrField<coreml::FeatureDescription>& in,
                                         const std::string& where) {
  std::vector<FeatureDescription> out;
  std::set<std::string> names;
  for (auto& pf : in) {
    FeatureDescription f;
    f.name = pf.name();
    const std::string at = where + " '" + mlpackage::shown(f.name) + "'";
    if (!names.insert(f.name).second) throw Error(at + ": given twice");
    f.short_description = pf.short_description();
    f.optional = pf.type().is_optional();
    f.kind = feature_kind(pf.type());
    if (f.kind.empty()) throw Error(at + ": has no type");
    if (f.kind == "multiArray") read_array(pf.type().multi_array(), f, at);
    if (f.kind == "state") read_array(pf.type().state_type().array(), f, at);
    out.push_back(std::move(f));
  }
  return out;
}

std::string dims_str(const Shape& s) { return shape_str(s); }

void describe_features(std::string& r, const std::vector<FeatureDescription>& fs, const char* what,
                       const std::string& indent) {
  for (auto& f : fs) {
    r += indent + what + " " + f.name + ": ";
    if (f.kind == "multiArray" || f.kind == "state") {
      r += (f.kind == "state" ? "state " : "") + std::string(dtype_name(f.dtype)) + " " + dims_str(f.shape);
    } else {
      r += f.kind;
    }
    if (!f.enumerated_shapes.empty()) {
      r += ", shapes";
      for (size_t i = 0; i < f.enumerated_shapes.size(); ++i) r += (i ? " | " : " ") + dims_str(f.enumerated_shapes[i]);
    }
    if (!f.shape_range.empty()) {
      r += ", ranges [";
      for (size_t i = 0; i < f.shape_range.size(); ++i)
        r += (i ? ", " : "") + std::to_string(f.shape_range[i].lower) + ".." +
             (f.shape_range[i].upper < 0 ? "inf" : std::to_string(f.shape_range[i].upper));
      r += "]";
    }
    if (f.optional) r += ", optional";
    if (!f.short_description.empty()) r += "  (" + f.short_description + ")";
    r += "\n";
  }
}

}  // namespace

namespace mlpackage {

ModelDescription description_from_bytes(const std::string& bytes, const std::string& path) {
  coreml::Model m = parse_model_document(bytes, path);
  const auto& pd = m.description();
  ModelDescription d;
  const std::string at = path + ": error:";
  d.specification_version = m.specification_version();
  d.inputs = features(pd.inputs(), at + " input");
  d.outputs = features(pd.outputs(), at + " output");
  d.states = features(pd.states(), at + " state");
  for (auto& pf : pd.functions()) {
    FunctionDescription f;
    f.name = pf.name();
    const std::string fat = at + " function '" + mlpackage::shown(f.name) + "'";
    for (auto& prev : d.functions)
      if (prev.name == f.name) throw Error(fat + ": given twice");
    f.inputs = features(pf.inputs(), fat + " input");
    f.outputs = features(pf.outputs(), fat + " output");
    f.states = features(pf.states(), fat + " state");
    d.functions.push_back(std::move(f));
  }
  d.default_function = pd.default_function_name();
  if (!d.default_function.empty() && !d.functions.empty()) {
    bool found = false;
    for (auto& f : d.functions) found |= f.name == d.default_function;
    if (!found) throw Error(at + " the default function '" + mlpackage::shown(d.default_function) + "' is not among the functions");
  }
  const auto& md = pd.metadata();
  d.author = md.author();
  d.license = md.license();
  d.version = md.version();
  d.short_description = md.short_description();
  for (auto& e : md.user_defined()) d.user_defined[e.key()] = e.value();  // as a map: the last one wins
  return d;
}

}  // namespace mlpackage

ModelDescription load_model_description(const std::string& path) {
  if (!is_mlpackage(path))
    throw Error(path + ": error: not an .mlpackage (only packages carry a model description)");
  mlpackage::ModelFile f = mlpackage::read_model_file(path);
  return mlpackage::description_from_bytes(f.bytes, f.path);
}

std::string describe(const ModelDescription& d) {
  std::string r = "specification version " + std::to_string(d.specification_version) + "\n";
  auto meta = [&](const char* key, const std::string& v) {
    if (!v.empty()) r += std::string(key) + ": " + v + "\n";
  };
  meta("description", d.short_description);
  meta("author", d.author);
  meta("license", d.license);
  meta("version", d.version);
  for (auto& [k, v] : d.user_defined) r += "metadata " + k + ": " + v + "\n";
  describe_features(r, d.inputs, "input", "");
  describe_features(r, d.states, "state", "");
  describe_features(r, d.outputs, "output", "");
  for (auto& f : d.functions) {
    r += "function " + f.name + (f.name == d.default_function ? " (default)" : "") + "\n";
    describe_features(r, f.inputs, "input", "  ");
    describe_features(r, f.states, "state", "  ");
    describe_features(r, f.outputs, "output", "  ");
  }
  return r;
}

}  // namespace milrt
