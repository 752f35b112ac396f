// `.mlpackage` models: the real Silero packages against their compiled
// `.mlmodelc` twins (parsed from text: the independent reference), packages
// written here byte by byte with a protobuf encoder of the test's own (field
// numbers from docs/mlpackage.md, not the generated classes), the model
// description, and malformed packages (one-line errors, never a crash).
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "milrt/blob.h"
#include "milrt/model_description.h"
#include "support/test_util.h"
#include "test_cli_util.h"

namespace milrt {
namespace {
namespace fs = std::filesystem;

// ---- protobuf wire format, by hand ----
struct Msg {
  std::string b;
  void put_varint(uint64_t v) {
    while (v >= 0x80) { b += char(v | 0x80); v >>= 7; }
    b += char(v);
  }
  Msg& varint(int field, uint64_t v) { put_varint(uint64_t(field) << 3); put_varint(v); return *this; }
  Msg& bytes(int field, const std::string& s) { put_varint(uint64_t(field) << 3 | 2); put_varint(s.size()); b += s; return *this; }
  Msg& msg(int field, const Msg& m) { return bytes(field, m.b); }
};

template <class T>
std::string raw(const std::vector<T>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)); }
std::string packed_varints(const std::vector<int64_t>& v) { Msg m; for (int64_t x : v) m.put_varint(uint64_t(x)); return m.b; }

// MIL.proto: DataType codes.
enum : int { kBool = 1, kString = 2, kFp16 = 10, kFp32 = 11, kFp64 = 12, kBf16 = 13, kInt8 = 21, kInt16 = 22,
             kInt32 = 23, kInt64 = 24, kInt4 = 25, kUInt8 = 31, kUInt64 = 34, kUInt2 = 36 };

Msg tensor_type(int dtype, const std::vector<int64_t>& dims) {
  Msg t;
  t.varint(1, uint64_t(dtype)).varint(2, dims.size());
  for (int64_t d : dims) t.msg(3, d < 0 ? Msg().msg(2, Msg()) : Msg().msg(1, Msg().varint(1, uint64_t(d))));
  return Msg().msg(1, t);  // ValueType.tensorType
}
// TensorValue fields: floats 1, ints 2, bools 3, strings 4, longInts 5, doubles 6, bytes 7.
Msg tv(int field, const std::string& payload) { return Msg().msg(field, Msg().bytes(1, payload)); }
Msg tv_strings(const std::vector<std::string>& s) { Msg r; for (auto& x : s) r.bytes(1, x); return Msg().msg(4, r); }
Msg immediate(const Msg& type, const Msg& tensor_value) { return Msg().msg(2, type).msg(3, Msg().msg(1, tensor_value)); }
Msg blob(const Msg& type, const std::string& file, uint64_t offset) {
  return Msg().msg(2, type).msg(5, Msg().bytes(1, file).varint(2, offset));
}
Msg str_value(const std::string& s) { return immediate(tensor_type(kString, {}), tv_strings({s})); }
Msg entry(const std::string& key, const Msg& value) { return Msg().bytes(1, key).msg(2, value); }
Msg named(const std::string& name, const Msg& type) { return Msg().bytes(1, name).msg(2, type); }

struct OpSpec {
  std::string type, name;
  std::vector<std::pair<std::string, std::vector<Msg>>> inputs;  // each binding: Binding message
  std::vector<Msg> outputs;
  std::vector<std::pair<std::string, Msg>> attrs;
};
Msg by_name(const std::string& n) { return Msg().bytes(1, n); }
Msg by_value(const Msg& v) { return Msg().msg(2, v); }
Msg op(const OpSpec& s) {
  Msg o;
  o.bytes(1, s.type);
  for (auto& [k, bindings] : s.inputs) {
    Msg arg;
    for (auto& b : bindings) arg.msg(1, b);
    o.msg(2, entry(k, arg));
  }
  for (auto& out : s.outputs) o.msg(3, out);
  for (auto& [k, v] : s.attrs) o.msg(5, entry(k, v));
  o.msg(5, entry("name", str_value(s.name)));
  return o;
}
Msg const_op(const std::string& name, const Msg& type, const Msg& value) {
  return op({"const", name, {}, {named(name, type)}, {{"val", value}}});
}
Msg function(const std::vector<Msg>& inputs, const std::string& opset, const std::vector<Msg>& ops,
             const std::vector<std::string>& outputs) {
  Msg block;
  for (auto& o : outputs) block.bytes(2, o);
  for (auto& o : ops) block.msg(3, o);
  Msg f;
  for (auto& i : inputs) f.msg(1, i);
  f.bytes(2, opset).msg(3, entry(opset, block));
  return f;
}
Msg program(const Msg& main) { return Msg().varint(1, 1).msg(2, entry("main", main)); }
Msg model(int spec, const Msg& program, const Msg& description = Msg()) {
  Msg m;
  m.varint(1, uint64_t(spec));
  if (!description.b.empty()) m.msg(2, description);
  return m.msg(502, program);
}

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string manifest(const std::string& root_path = "com.apple.CoreML/model.mlmodel") {
  return R"({"fileFormatVersion": "1.0.0", "itemInfoEntries": {"A": {"author": "com.apple.CoreML", "name": "model.mlmodel", "path": ")" +
         root_path + R"("}}, "rootModelIdentifier": "A"})";
}

// A package in a fresh temp dir: Manifest.json, model.mlmodel and (when
// given) weights/weight.bin.
std::string package(const std::string& model_bytes, const std::vector<uint8_t>& weights = {},
                    const std::string& manifest_text = manifest()) {
  static int n = 0;
  const std::string name = std::to_string(n++) + ".mlpackage";
  fs::path pkg = fs::path(test::temp_dir("mlpackage")) / name;
  write(pkg / "Manifest.json", manifest_text);
  write(pkg / "Data/com.apple.CoreML/model.mlmodel", model_bytes);
  if (!weights.empty()) write(pkg / "Data/com.apple.CoreML/weights/weight.bin", std::string(weights.begin(), weights.end()));
  return pkg.string();
}

// One function: x fp32 [2] -> relu -> y, with `extra` ops before it.
std::string simple_model(int spec = 7, const std::vector<Msg>& extra = {}, const std::string& opset = "CoreML6") {
  std::vector<Msg> ops = extra;
  ops.push_back(op({"relu", "r", {{"x", {by_name("x")}}}, {named("y", tensor_type(kFp32, {2}))}, {}}));
  return model(spec, program(function({named("x", tensor_type(kFp32, {2}))}, opset, ops, {"y"}))).b;
}

// ---- the real packages against their compiled twins ----

// The compiled twin's text differs from the package only where coremlc
// writes it differently (docs/mlpackage.md): function inputs sorted by name,
// and the program's buildInfo attribute, which coremlc replaces with its own
// (the package's, when present, is coremltools'). Exactly that is undone.
void normalize_to_compiled(Program& pkg, Program& compiled) {
  for (Program* p : {&pkg, &compiled}) {
    ASSERT_LE(p->attrs.size(), 1u);
    if (!p->attrs.empty()) {
      EXPECT_EQ(p->attrs[0].key, "buildInfo");
    }
    p->attrs.clear();
  }
  for (auto& f : pkg.functions)
    std::sort(f.params.begin(), f.params.end(), [](const Param& a, const Param& b) { return a.name < b.name; });
}

TEST(Mlpackage, TwinsGiveTheSameIr) {
  MILRT_REQUIRE_SHARED();
  const std::string dir = test::shared_dir() + "/testdata/coreml/";
  int n = 0;
  for (const char* name : {"silero-vad-unified-v6.0.0", "unified_int8", "unified_mixed", "unified_palette_4bit",
                           "unified_pruned_int8"}) {
    SCOPED_TRACE(name);
    Program pkg = load_model(dir + "silero-vad-mlpackage/" + name + ".mlpackage");
    Program compiled = load_model(dir + "silero-vad/" + name + ".mlmodelc");
    EXPECT_EQ(pkg.base_dir, dir + "silero-vad-mlpackage/" + name + ".mlpackage/Data/com.apple.CoreML");
    normalize_to_compiled(pkg, compiled);
    EXPECT_EQ(ir_diff(pkg, compiled), "");
    verify(pkg);
    ++n;
  }
  EXPECT_EQ(n, 5);
}

TEST(Mlpackage, RealDescription) {
  MILRT_REQUIRE_SHARED();
  ModelDescription d = load_model_description(test::shared_dir() +
                                              "/testdata/coreml/silero-vad-mlpackage/unified_int8.mlpackage");
  EXPECT_EQ(d.specification_version, 7);
  ASSERT_EQ(d.inputs.size(), 3u);
  EXPECT_EQ(d.inputs[0].name, "audio_input");
  EXPECT_EQ(d.inputs[0].kind, "multiArray");
  EXPECT_EQ(d.inputs[0].dtype, DType::FP32);
  EXPECT_EQ(d.inputs[0].shape, (Shape{1, 576}));
  ASSERT_EQ(d.outputs.size(), 3u);
  EXPECT_EQ(d.outputs[0].shape, (Shape{1, 1, 1}));
  EXPECT_EQ(d.version, "6.0.0");
  EXPECT_EQ(d.user_defined.at("com.github.apple.coremltools.version"), "9.0b1");
}

// ---- packages written here ----

TEST(Mlpackage, EveryDtypeAndBindingAsTheTextParserGivesThem) {
  BlobWriter w;
  Tensor wt(DType::FP32, {2});
  wt.mutable_ptr<float>()[0] = 0.5f;
  wt.mutable_ptr<float>()[1] = -4.f;
  const uint64_t off = w.add(wt);
  auto c = [](const std::string& n, int dt, std::vector<int64_t> dims, const Msg& value) {
    return const_op(n, tensor_type(dt, dims), immediate(tensor_type(dt, dims), value));
  };
  std::vector<Msg> ops = {
      c("c_fp16", kFp16, {2}, tv(7, raw(std::vector<uint16_t>{f32_to_f16(1.5f), f32_to_f16(-2.f)}))),
      c("c_fp32", kFp32, {2}, tv(1, raw(std::vector<float>{0.25f, -3.f}))),
      c("c_fp64", kFp64, {}, tv(6, raw(std::vector<double>{0.1}))),
      c("c_i32", kInt32, {3}, tv(2, packed_varints({1, -2, 2147483647}))),
      c("c_i64", kInt64, {2}, tv(5, packed_varints({-5, int64_t(1) << 40}))),
      c("c_u64", kUInt64, {}, tv(5, packed_varints({-1}))),
      c("c_i8", kInt8, {3}, tv(7, std::string("\x80\x7f\x01", 3))),
      c("c_u8", kUInt8, {2}, tv(7, std::string("\xff\x00", 2))),
      c("c_i16", kInt16, {2}, tv(2, packed_varints({-300, 300}))),
      c("c_i4", kInt4, {3}, tv(7, std::string("\x7f\x08", 2))),        // -1, 7, -8 packed LSB-first
      c("c_u2", kUInt2, {5}, tv(7, std::string("\x39\x01", 2))),        // 1, 2, 3, 0, 1
      c("c_bool", kBool, {3}, tv(3, packed_varints({1, 0, 1}))),
      Msg(),
      c("c_bf16", kBf16, {}, tv(7, raw(std::vector<uint16_t>{f32_to_bf16(1.5f)}))),
      const_op("w", tensor_type(kFp32, {2}), blob(tensor_type(kFp32, {2}), "@model_path/weights/weight.bin", off)),
      op({"add", "add_0", {{"y", {by_name("w")}}, {"x", {by_name("x")}}}, {named("s", tensor_type(kFp32, {2}))}, {}}),
      op({"concat", "cat", {{"values", {by_name("x"), by_name("s")}},
                            {"axis", {by_value(immediate(tensor_type(kInt32, {}), tv(2, packed_varints({0}))))}},
                            {"interleave", {by_value(immediate(tensor_type(kBool, {}), tv(3, packed_varints({0}))))}}},
          {named("cat", tensor_type(kFp32, {4}))}, {}}),
  };
  ops[12] = const_op("c_str", tensor_type(kString, {2}), immediate(tensor_type(kString, {2}), tv_strings({"a", "b\"c"})));
  const std::string pkg = package(model(8, program(function({named("x", tensor_type(kFp32, {2}))}, "CoreML8", ops, {"cat"}))).b,
                                  w.bytes());
  auto s = [](const std::string& t) { return "tensor<" + t + ">"; };
  auto k = [&](const std::string& type, const std::string& name, const std::string& val) {
    return "    " + s(type) + " " + name + " = const()[name = tensor<string, []>(\"" + name + "\"), val = " + s(type) + "(" +
           val + ")];\n";
  };
  const std::string text =
      "program(1.0)\n{\n  func main<ios18>(tensor<fp32, [2]> x) {\n" + k("fp16, [2]", "c_fp16", "[1.5, -2]") +
      k("fp32, [2]", "c_fp32", "[0.25, -3]") + k("fp64, []", "c_fp64", "0.1") +
      k("int32, [3]", "c_i32", "[1, -2, 2147483647]") + k("int64, [2]", "c_i64", "[-5, 1099511627776]") +
      k("uint64, []", "c_u64", "18446744073709551615") + k("int8, [3]", "c_i8", "[-128, 127, 1]") +
      k("uint8, [2]", "c_u8", "[255, 0]") + k("int16, [2]", "c_i16", "[-300, 300]") + k("int4, [3]", "c_i4", "[-1, 7, -8]") +
      k("uint2, [5]", "c_u2", "[1, 2, 3, 0, 1]") + k("bool, [3]", "c_bool", "[true, false, true]") +
      k("string, [2]", "c_str", "[\"a\", \"b\\\"c\"]") + k("bf16, []", "c_bf16", "1.5") +
      k("fp32, [2]", "w",
        "BLOBFILE(path = tensor<string, []>(\"@model_path/weights/weight.bin\"), offset = tensor<uint64, []>(" +
            std::to_string(off) + "))") +
      "    tensor<fp32, [2]> s = add(x = x, y = w)[name = tensor<string, []>(\"add_0\")];\n"
      "    tensor<fp32, [4]> cat = concat(axis = tensor<int32, []>(0), interleave = tensor<bool, []>(false), "
      "values = (x, s))[name = tensor<string, []>(\"cat\")];\n  } -> (cat);\n}\n";
  Program expected = parse_mil(text, "expected.mil", pkg + "/Data/com.apple.CoreML");
  load_blobs(expected);
  Program got = load_model(pkg);
  EXPECT_EQ(ir_diff(got, expected), "");
  EXPECT_EQ(got.function("main")->ops[14].arg("val")->lit->value.ptr<float>()[1], -4.f);  // the blob was read
  // And printed as text, the package parses back to itself.
  Program again = parse_mil(print_mil(got), "again.mil", got.base_dir);
  load_blobs(again);
  EXPECT_EQ(ir_diff(again, expected), "");
}

TEST(Mlpackage, DescriptionWithFlexibleShapesStatesFunctionsAndMetadata) {
  auto array = [](int64_t dtype, const std::vector<int64_t>& shape) {
    return Msg().bytes(1, packed_varints(shape)).varint(2, uint64_t(dtype));
  };
  Msg enumerated = array(65568, {1, 3});
  enumerated.msg(21, Msg().msg(1, Msg().bytes(1, packed_varints({1, 3}))).msg(1, Msg().bytes(1, packed_varints({2, 3}))));
  Msg ranged = array(65552, {1, 16});
  ranged.msg(31, Msg().msg(1, Msg().varint(1, 1).varint(2, 4)).msg(1, Msg().varint(1, 16).varint(2, uint64_t(-1))));
  auto feature = [](const std::string& name, int kind_field, const Msg& kind, bool optional = false) {
    Msg type = Msg().msg(kind_field, kind);
    if (optional) type.varint(1000, 1);
    return Msg().bytes(1, name).bytes(2, "about " + name).msg(3, type);
  };
  Msg desc;
  desc.msg(1, feature("a", 5, enumerated)).msg(1, feature("b", 5, ranged, true)).msg(1, feature("n", 1, Msg()));
  desc.msg(13, feature("kv", 8, Msg().msg(1, array(65552, {2, 8}))));
  desc.msg(10, feature("out", 5, array(131104, {4})));
  desc.msg(20, Msg().bytes(1, "first").msg(2, feature("a", 5, array(65568, {1}))).msg(3, feature("o", 5, array(65600, {1}))));
  desc.msg(20, Msg().bytes(1, "second").msg(6, feature("kv", 8, Msg().msg(1, array(131080, {2})))));
  desc.bytes(21, "second");
  desc.msg(100, Msg().bytes(1, "a test").bytes(2, "1.2").bytes(3, "me").bytes(4, "MIT").msg(100, Msg().bytes(1, "k").bytes(2, "v"))
                    .msg(100, Msg().bytes(1, "k").bytes(2, "w"))  // a map: the last entry wins
                    .msg(100, Msg().bytes(1, "k2").bytes(2, "v2")));
  const std::string pkg = package(model(9, program(function({named("x", tensor_type(kFp32, {2}))}, "CoreML8",
                                                            {op({"relu", "r", {{"x", {by_name("x")}}}, {named("y", tensor_type(kFp32, {2}))}, {}})},
                                                            {"y"})), desc).b);
  ModelDescription d = load_model_description(pkg);
  EXPECT_EQ(d.specification_version, 9);
  ASSERT_EQ(d.inputs.size(), 3u);
  EXPECT_EQ(d.inputs[0].enumerated_shapes, (std::vector<Shape>{{1, 3}, {2, 3}}));
  EXPECT_EQ(d.inputs[1].dtype, DType::FP16);
  EXPECT_TRUE(d.inputs[1].optional);
  ASSERT_EQ(d.inputs[1].shape_range.size(), 2u);
  EXPECT_EQ(d.inputs[1].shape_range[0].upper, 4);
  EXPECT_EQ(d.inputs[1].shape_range[1].upper, -1);
  EXPECT_EQ(d.inputs[2].kind, "int64");
  ASSERT_EQ(d.states.size(), 1u);
  EXPECT_EQ(d.states[0].shape, (Shape{2, 8}));
  EXPECT_EQ(d.outputs[0].dtype, DType::Int32);
  ASSERT_EQ(d.functions.size(), 2u);
  EXPECT_EQ(d.functions[0].outputs[0].dtype, DType::FP64);
  EXPECT_EQ(d.functions[1].states[0].dtype, DType::Int8);
  EXPECT_EQ(d.default_function, "second");
  EXPECT_EQ(d.author, "me");
  EXPECT_EQ(d.license, "MIT");
  EXPECT_EQ(d.version, "1.2");
  EXPECT_EQ(d.short_description, "a test");
  EXPECT_EQ(d.user_defined, (std::map<std::string, std::string>{{"k", "w"}, {"k2", "v2"}}));
  const std::string text = describe(d);
  for (const char* line : {"input a: fp32 [1, 3], shapes [1, 3] | [2, 3]  (about a)\n",
                           "input b: fp16 [1, 16], ranges [1..4, 16..inf], optional", "input n: int64",
                           "state kv: state fp16 [2, 8]", "output out: int32 [4]", "function second (default)\n",
                           "  state kv: state int8 [2]", "license: MIT\n", "metadata k2: v2\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;

  // `milrt check` prints it before the op histogram.
  auto r = test::run_cli({"check", pkg});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("input b: fp16 [1, 16], ranges [1..4, 16..inf]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("function main<ios18>: 1 inputs, 1 ops, 1 outputs"), std::string::npos) << r.out;
}

// ---- malformed packages ----

void expect_load_error(const std::string& pkg, const std::string& fragment) {
  SCOPED_TRACE(fragment);
  test::expect_error_containing([&] { load_model(pkg); }, fragment);
  test::expect_error_containing([&] { load_model(pkg); }, pkg);
}

TEST(Mlpackage, BadManifests) {
  const std::string good = simple_model();
  std::string pkg = package(good);
  fs::remove(fs::path(pkg) / "Manifest.json");
  expect_load_error(pkg, "package has no Manifest.json");
  expect_load_error(package(good, {}, "{\"rootModelIdentifier\": "), "Manifest.json: error: not valid JSON");
  expect_load_error(package(good, {}, "[1]"), "not a JSON object");
  expect_load_error(package(good, {}, R"({"itemInfoEntries": {}})"), "no rootModelIdentifier string");
  expect_load_error(package(good, {}, R"({"rootModelIdentifier": "B", "itemInfoEntries": {"A": {"path": "x"}}})"),
                    "the root model 'B' is not among itemInfoEntries");
  expect_load_error(package(good, {}, R"({"rootModelIdentifier": "A", "itemInfoEntries": {"A": {"path": 3}}})"),
                    "item 'A' has no path string");
  expect_load_error(package(good, {}, manifest("../../outside.mlmodel")), "has a '..' component");
  expect_load_error(package(good, {}, manifest("/etc/passwd")), "is absolute");
  expect_load_error(package(good, {}, manifest("com.apple.CoreML/none.mlmodel")), "cannot open");
  // The model document through a symbolic link, even one that stays inside.
  pkg = package(good);
  fs::path doc = fs::path(pkg) / "Data/com.apple.CoreML";
  fs::rename(doc / "model.mlmodel", doc / "real.mlmodel");
  fs::create_symlink("real.mlmodel", doc / "model.mlmodel");
  expect_load_error(pkg, "is a symbolic link");
}

TEST(Mlpackage, BadDocuments) {
  const std::string good = simple_model();
  EXPECT_EQ(ir_diff(load_model(package(good)), load_model(package(good))), "");
  expect_load_error(package(good.substr(0, good.size() - 5)), "the protobuf is truncated or corrupt");
  expect_load_error(package(std::string("\xff\xff\xff\xff garbage", 12)), "the protobuf is truncated or corrupt");
  expect_load_error(package(""), "has no specification version");
  expect_load_error(package(simple_model(11)), "specification version 11 is newer than milrt reads (at most 10");
  expect_load_error(package(Msg().varint(1, 4).msg(500, Msg().bytes(1, "layers")).b), "holds a neural network");
  expect_load_error(package(simple_model(7, {}, "CoreML99")), "unknown opset 'CoreML99'");
  auto bad_const = [](int dt, std::vector<int64_t> dims, const Msg& value) {
    return simple_model(7, {const_op("c", tensor_type(dt, dims), immediate(tensor_type(dt, dims), value))});
  };
  expect_load_error(package(bad_const(kFp16, {3}, tv(7, std::string(2, '\0')))), "holds 2 bytes (6 expected)");
  expect_load_error(package(bad_const(kFp32, {4}, tv(1, raw(std::vector<float>{1, 2})))), "holds 2 values (4 expected)");
  expect_load_error(package(bad_const(kFp32, {1LL << 40}, tv(7, std::string(1, '\0')))), "holds 1 bytes (4398046511104 expected)");
  expect_load_error(package(bad_const(kFp32, {1LL << 40, 1LL << 40}, tv(7, std::string(1, '\0')))), "has too many elements");
  expect_load_error(package(bad_const(kInt8, {1}, tv(2, packed_varints({300})))), "value 300 is not a valid int8");
  expect_load_error(package(bad_const(kInt32, {1}, tv(1, raw(std::vector<float>{1})))), "stored as floats");
  expect_load_error(package(bad_const(kFp32, {-1}, tv(1, ""))), "cannot have unknown dimensions");
  expect_load_error(package(bad_const(77, {1}, tv(1, ""))), "unknown data type 77");
  // A rank that disagrees with the dimensions listed.
  Msg wrong_rank = Msg().msg(1, Msg().varint(1, kFp32).varint(2, 3));
  expect_load_error(package(simple_model(7, {const_op("c", wrong_rank, immediate(wrong_rank, tv(1, "")))})),
                    "tensor type of rank 3 lists 0 dimensions");
  // A bad op inside a nested block (control flow loads; test_control_flow runs it) names the block.
  Msg bad_inner = op({"relu", "bad", {{"x", {by_name("not an id\n")}}}, {named("q", tensor_type(kFp32, {2}))}, {}});
  Msg with_block = op({"cond", "c", {}, {named("z", tensor_type(kFp32, {}))}, {}});
  with_block.msg(4, Msg().msg(3, bad_inner));  // Operation.blocks, Block.operations
  expect_load_error(package(simple_model(7, {with_block})), "op 0 (cond) block 0, op 0 (relu) input 'x': value name 'not an id?'");
  expect_load_error(package(simple_model(7, {op({"relu", "bad", {{"x", {by_name("not an id\n")}}}, {named("q", tensor_type(kFp32, {2}))}, {}})})),
                    "value name 'not an id?' is not a MIL identifier");
  // BLOBFILE values past the end of the weight file, and outside the package.
  const Msg t = tensor_type(kFp32, {4});
  expect_load_error(package(simple_model(7, {const_op("w", t, blob(t, "@model_path/weights/weight.bin", 4096))}), {1, 2, 3}),
                    "weight.bin");
  expect_load_error(package(simple_model(7, {const_op("w", t, blob(t, "@model_path/../../../x.bin", 0))})),
                    "resolves outside the model's directory");
}

// coremltools writes each coreml_update_state as write_state (no outputs) and
// a read_state of the same state right after it; the IR has the single op,
// as coremlc's MIL text does. A write_state in any other form is refused.
TEST(Mlpackage, WriteStateThenReadStateIsCoremlUpdateState) {
  const Msg t = tensor_type(kFp16, {2});
  const Msg st = Msg().msg(5, Msg().msg(1, t));  // ValueType.state{wrapped_type}
  auto write_state = [&](const std::string& state) {
    return op({"write_state", "w", {{"input", {by_name(state)}}, {"data", {by_name("x")}}}, {}, {}});
  };
  auto read_state = [&](const std::string& state, const std::string& out) {
    return op({"read_state", out, {{"input", {by_name(state)}}}, {named(out, t)}, {}});
  };
  auto pkg = [&](const std::vector<Msg>& ops, const std::string& out) {
    return package(model(9, program(function({named("s", st), named("k", st), named("x", t)}, "CoreML8", ops, {out}))).b);
  };
  Program got = load_model(pkg({write_state("s"), read_state("s", "v"), read_state("k", "r")}, "v"));
  Program expected = parse_mil(
      "program(1.0)\n{\n  func main<ios18>(state<tensor<fp16, [2]>> s, state<tensor<fp16, [2]>> k, tensor<fp16, [2]> x) {\n"
      "    tensor<fp16, [2]> v = coreml_update_state(state = s, value = x)[name = tensor<string, []>(\"v\")];\n"
      "    tensor<fp16, [2]> r = read_state(input = k)[name = tensor<string, []>(\"r\")];\n"
      "  } -> (v);\n}\n",
      "expected.mil", ".");
  EXPECT_EQ(ir_diff(got, expected), "");
  verify(got);
  expect_load_error(pkg({write_state("s")}, "x"), "(write_state): is not followed by a read_state of state 's'");
  expect_load_error(pkg({write_state("s"), read_state("k", "v")}, "v"), "is not followed by a read_state of state 's'");
  expect_load_error(pkg({op({"write_state", "w", {{"input", {by_name("s")}}}, {}, {}}), read_state("s", "v")}, "v"),
                    "must have exactly the inputs 'input' (a state) and 'data'");
}

TEST(Mlpackage, CliExitCodeForAMalformedPackage) {
  auto r = test::run_cli({"check", package(simple_model(11))});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("specification version 11"), std::string::npos) << r.err;
}


// ---- save_mlpackage ----

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The protobuf writer (save_mlpackage, read back by the protobuf reader)
// against the text writer (save_model: print_mil, read back by the text
// parser): two independent paths must give the same program, blobs and all.
void expect_writers_agree(const Program& p, int64_t inline_limit) {
  const std::string dir = test::temp_dir("mlpackage_writer");
  save_model(p, dir + "/m.mlmodelc", inline_limit);
  save_mlpackage(p, dir + "/m.mlpackage", inline_limit);
  Program text = load_model(dir + "/m.mlmodelc"), proto = load_model(dir + "/m.mlpackage");
  for (Program* q : {&text, &proto}) q->attrs.clear();  // program attributes (buildInfo) are not written
  EXPECT_EQ(ir_diff(proto, text), "");
  verify(proto);
}

TEST(MlpackageWriter, SameProgramAsTheBundleWriterForEveryDtype) {
  const std::string text =
      "program(1.0)\n{\n  func main<ios18>(tensor<fp32, [2]> x, tensor<int32, [3]> i) {\n"
      "    tensor<fp16, [2]> c_fp16 = const()[name = tensor<string, []>(\"c_fp16\"), val = tensor<fp16, [2]>([1.5, -2])];\n"
      "    tensor<fp64, []> c_fp64 = const()[name = tensor<string, []>(\"c_fp64\"), val = tensor<fp64, []>(0.1)];\n"
      "    tensor<int64, [2]> c_i64 = const()[name = tensor<string, []>(\"c_i64\"), val = tensor<int64, [2]>([-5, 1099511627776])];\n"
      "    tensor<uint64, []> c_u64 = const()[name = tensor<string, []>(\"c_u64\"), val = tensor<uint64, []>(18446744073709551615)];\n"
      "    tensor<int8, [3]> c_i8 = const()[name = tensor<string, []>(\"c_i8\"), val = tensor<int8, [3]>([-128, 127, 1])];\n"
      "    tensor<uint16, [2]> c_u16 = const()[name = tensor<string, []>(\"c_u16\"), val = tensor<uint16, [2]>([65535, 3])];\n"
      "    tensor<uint32, [1]> c_u32 = const()[name = tensor<string, []>(\"c_u32\"), val = tensor<uint32, [1]>([4000000000])];\n"
      "    tensor<int4, [3]> c_i4 = const()[name = tensor<string, []>(\"c_i4\"), val = tensor<int4, [3]>([-1, 7, -8])];\n"
      "    tensor<uint2, [5]> c_u2 = const()[name = tensor<string, []>(\"c_u2\"), val = tensor<uint2, [5]>([1, 2, 3, 0, 1])];\n"
      "    tensor<bool, [3]> c_bool = const()[name = tensor<string, []>(\"c_bool\"), val = tensor<bool, [3]>([true, false, true])];\n"
      "    tensor<string, [2]> c_str = const()[name = tensor<string, []>(\"c_str\"), val = tensor<string, [2]>([\"a\", \"b\\\"c\"])];\n"
      "    tensor<bf16, []> c_bf16 = const()[name = tensor<string, []>(\"c_bf16\"), val = tensor<bf16, []>(1.5)];\n"
      "    tensor<fp32, [2]> s = add(x = x, y = tensor<fp32, [2]>([0.5, -4]))[name = tensor<string, []>(\"add_0\")];\n"
      "    tensor<fp32, [4]> cat = concat(axis = tensor<int32, []>(0), interleave = tensor<bool, []>(false), "
      "values = (x, s))[name = tensor<string, []>(\"cat\")];\n"
      "    tensor<int32, [3]> j = add(x = i, y = i)[name = tensor<string, []>(\"j\")];\n"
      "  } -> (cat, j);\n}\n";
  const Program p = parse_mil(text, "every.mil", ".");
  for (int64_t limit : {int64_t(16), int64_t(1)}) {  // inline, then every literal of 2+ elements in weight.bin
    SCOPED_TRACE("inline_limit " + std::to_string(limit));
    expect_writers_agree(p, limit);
  }
}

TEST(MlpackageWriter, RealModelsAndTheirDescription) {
  MILRT_REQUIRE_SHARED();
  const std::string dir = test::shared_dir() + "/testdata/coreml/silero-vad/";
  for (const char* name : {"silero-vad-unified-v6.0.0", "unified_int8", "unified_palette_4bit"}) {
    SCOPED_TRACE(name);
    expect_writers_agree(load_model(dir + name + ".mlmodelc"), 16);
  }
  const std::string out = test::temp_dir("mlpackage_desc") + "/s.mlpackage";
  save_mlpackage(load_model(dir + "unified_int8.mlmodelc"), out);
  const ModelDescription d = load_model_description(out);
  EXPECT_EQ(d.specification_version, 7);  // ios16
  ASSERT_EQ(d.inputs.size(), 3u);
  for (const auto& in : d.inputs) {
    EXPECT_EQ(in.kind, "multiArray");
    EXPECT_EQ(in.dtype, DType::FP32) << in.name;
  }
  EXPECT_EQ(d.inputs[0].name, "audio_input");
  EXPECT_EQ(d.inputs[0].shape, (Shape{1, 576}));
  ASSERT_EQ(d.outputs.size(), 3u);
  EXPECT_EQ(d.outputs[0].shape, (Shape{1, 1, 1}));
  // The same program gives the same bytes (identifiers derived from the content).
  const std::string again = test::temp_dir("mlpackage_desc2") + "/s.mlpackage";
  save_mlpackage(load_model(dir + "unified_int8.mlmodelc"), again);
  for (const char* f : {"/Manifest.json", "/Data/com.apple.CoreML/model.mlmodel", "/Data/com.apple.CoreML/weights/weight.bin"})
    EXPECT_EQ(file_bytes(out + f), file_bytes(again + f)) << f;
}

TEST(MlpackageWriter, FlexibleInputsGetARangeAndUnsupportedOnesAreRefused) {
  Program flex = parse_mil("program(1.0)\n{\n  func main<ios17>(tensor<fp32, [1, ?]> x) {\n"
                           "    tensor<fp32, [1, ?]> y = relu(x = x)[name = tensor<string, []>(\"y\")];\n  } -> (y);\n}\n",
                           "flex.mil", ".");
  const std::string dir = test::temp_dir("mlpackage_flex");
  save_mlpackage(flex, dir + "/f.mlpackage");
  const ModelDescription d = load_model_description(dir + "/f.mlpackage");
  EXPECT_EQ(d.specification_version, 8);  // ios17
  ASSERT_EQ(d.inputs.size(), 1u);
  EXPECT_EQ(d.inputs[0].shape, (Shape{1, 1}));
  ASSERT_EQ(d.inputs[0].shape_range.size(), 2u);
  EXPECT_EQ(d.inputs[0].shape_range[1].lower, 1);
  EXPECT_EQ(d.inputs[0].shape_range[1].upper, -1);
  EXPECT_EQ(ir_diff(load_model(dir + "/f.mlpackage"), flex), "");

  Program bf16 = parse_mil("program(1.0)\n{\n  func main<ios18>(tensor<bf16, [2]> x) {\n"
                           "    tensor<bf16, [2]> y = relu(x = x)[name = tensor<string, []>(\"y\")];\n  } -> (y);\n}\n",
                           "bf16.mil", ".");
  try {
    save_mlpackage(bf16, dir + "/b.mlpackage");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'x' is bf16: Core ML's multi-arrays are"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}


// milrt convert: a bundle to a package and back, and to text; the package
// holds the bundle's program and never points at the bundle's files.
TEST(ConvertCli, BundleToPackageToBundleAndText) {
  MILRT_REQUIRE_SHARED();
  const std::string src = test::shared_dir() + "/testdata/coreml/silero-vad/unified_int8.mlmodelc";
  const std::string dir = test::temp_dir("convert_cli");
  auto r = test::run_cli({"convert", src, "--out", dir + "/s.mlpackage"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 1 function, 137 ops: "), std::string::npos) << r.out;
  r = test::run_cli({"convert", dir + "/s.mlpackage", "--out", dir + "/s.mlmodelc"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_cli({"convert", dir + "/s.mlpackage", "--out", dir + "/s.mil"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Program pkg = load_model(dir + "/s.mlpackage"), bundle = load_model(dir + "/s.mlmodelc");
  for (Program* q : {&pkg, &bundle}) q->attrs.clear();
  EXPECT_EQ(ir_diff(pkg, bundle), "");
  EXPECT_EQ(file_bytes(dir + "/s.mil"), print_mil(load_model(dir + "/s.mlpackage")));
  // Nothing in the package refers to the source bundle.
  EXPECT_EQ(file_bytes(dir + "/s.mlpackage/Data/com.apple.CoreML/model.mlmodel").find("silero-vad"), std::string::npos);
  // An existing model is kept without --overwrite; --format names what to write.
  r = test::run_cli({"convert", src, "--out", dir + "/s.mlpackage"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("exists; give --overwrite"), std::string::npos) << r.err;
  r = test::run_cli({"convert", src, "--out", dir + "/x", "--format", "zip"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--format must be mlmodelc or mlpackage"), std::string::npos) << r.err;
  r = test::run_cli({"convert", src, "--out", dir + "/s.mlmodelc", "--format", "mlpackage", "--overwrite"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is not a package"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir + "/s.mlmodelc/model.mil")) << "the refused overwrite left the bundle alone";
}

}  // namespace
}  // namespace milrt
