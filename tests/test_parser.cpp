// The MIL text front end: both dialects, literals, round trips, error positions.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/test_util.h"

namespace milrt {
namespace {
using test::shared_dir;
using test::values;

Program parse(const std::string& text) { return parse_mil(text, "t.mil", "."); }

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Parser, Dialect13ScalarsAndAttributes) {
  Program p = parse(R"(program(1.3)
[buildInfo = dict<string, string>({{"coremlc-version", "3505.4.1"}, {"k", ""}})]
{
    func main<ios18>(tensor<fp16, [1, 64, 1, ?]> x) {
        int32 ax = const()[name = string("ax"), val = int32(-1)];
        bool kd = const()[name=string("kd"), val=bool(false)];
        fp16 eps = const()[name=string("eps"), val=fp16(0.00001)];
        tensor<fp16, [1, 64, 1, ?]> y = add(x = x, y = eps)[name = string("y")];
    } -> (y);
})");
  ASSERT_EQ(p.version, "1.3");
  ASSERT_EQ(p.attrs.size(), 1u);
  EXPECT_EQ(p.attrs[0].key, "buildInfo");
  ASSERT_TRUE(p.attrs[0].value.payload.has_value());
  EXPECT_EQ(p.attrs[0].value.payload->items.size(), 4u);
  const Function& f = p.functions.at(0);
  EXPECT_EQ(f.opset, "ios18");
  EXPECT_EQ(f.params[0].type.shape, (Shape{1, 64, 1, -1}));
  ASSERT_EQ(f.ops.size(), 4u);
  const Op& ax = f.ops[0];
  EXPECT_EQ(ax.name, "ax");
  EXPECT_TRUE(ax.outputs[0].type.bare);
  EXPECT_EQ(ax.arg("val")->lit->value.at(0), -1);
  EXPECT_EQ(f.ops[1].arg("val")->lit->value.at(0), 0);
  // fp16(0.00001) is rounded to the nearest half: 0x1.4f8p-17.
  EXPECT_EQ(f.ops[2].arg("val")->lit->value.at(0), f16_to_f32(f32_to_f16(0.00001f)));
  EXPECT_TRUE(f.ops[3].find("x") && !f.ops[3].find("x")->in_attr_block);
}

TEST(Parser, Dialect10TypedScalarsHexFloatsAndNestedLiterals) {
  Program p = parse(R"(program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"a", "b"}})]
{
    func main<ios16>(tensor<fp32, [2, 2]> x) {
            tensor<fp32, [2, 2]> w = const()[name = tensor<string, []>("w"), val = tensor<fp32, [2, 2]>([[0x1.6ap-4, -0x1p+0], [inf, -inf]])];
            tensor<uint64, []> big = const()[name = tensor<string, []>("big"), val = tensor<uint64, []>(18446744073709551615)];
            tensor<bool, [3]> m = const()[name = tensor<string, []>("m"), val = tensor<bool, [3]>([true, false, true])];
            tensor<fp32, [2, 2]> y = mul(x = x, y = w)[name = tensor<string, []>("y")];
        } -> (y);
})");
  const Function& f = p.functions[0];
  const Tensor& w = f.ops[0].arg("val")->lit->value;
  EXPECT_EQ(w.at(0), 0x1.6ap-4);
  EXPECT_EQ(w.at(1), -1.0);
  EXPECT_TRUE(std::isinf(w.at(2)) && w.at(2) > 0);
  EXPECT_TRUE(std::isinf(w.at(3)) && w.at(3) < 0);
  EXPECT_EQ(f.ops[1].arg("val")->lit->value.ptr<uint64_t>()[0], 18446744073709551615ull);
  EXPECT_EQ(values(f.ops[2].arg("val")->lit->value), (std::vector<double>{1, 0, 1}));
  EXPECT_FALSE(f.ops[0].outputs[0].type.bare);
}

TEST(Parser, TuplesMultipleOutputsBlobsAndSeveralFunctions) {
  Program p = parse(R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [4]> a, tensor<fp32, [4]> b) {
        tensor<fp32, [8]> c = concat(axis = int32(0), interleave = bool(false), values = (a, b))[name = string("c")];
        tensor<fp32, [4]> p, tensor<fp32, [4]> q = split(x = c, num_splits = int32(2), axis = int32(0))[name = string("s")];
        tensor<fp16, [2, 3]> w = const()[name = string("w"), val = tensor<fp16, [2, 3]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))];
    } -> (p, q);
    func other<ios17>(tensor<int32, [1]> z) {
    } -> (z);
})");
  ASSERT_EQ(p.functions.size(), 2u);
  const Op& cat = p.functions[0].ops[0];
  ASSERT_EQ(cat.arg("values")->kind, Arg::Kind::Tuple);
  EXPECT_EQ(cat.arg("values")->elems.size(), 2u);
  EXPECT_EQ(p.functions[0].ops[1].outputs.size(), 2u);
  const Literal& w = *p.functions[0].ops[2].arg("val")->lit;
  EXPECT_EQ(w.blob_path, "@model_path/weights/weight.bin");
  EXPECT_EQ(w.blob_offset, 64u);
  EXPECT_TRUE(w.value.empty());
  EXPECT_EQ(p.functions[1].opset, "ios17");
}

TEST(Parser, FlexibleShapeInformationRoundTrips) {
  std::string text = R"(program(1.0)
{
    func main<ios16>(tensor<fp16, [1, ?, ?]> x) [FlexibleShapeInformation = tuple<tuple<tensor<string, []>, dict<tensor<string, []>, tensor<int32, [?]>>>, tuple<tensor<string, []>, dict<tensor<string, []>, list<tensor<int32, [2]>, ?>>>>((("DefaultShapes", {{"x", [1, 1, 1]}}), ("RangeDims", {{"x", [[1, 1], [1, 2048], [1, 2048]]}})))] {
            tensor<int32, [3]> perm = const()[name = tensor<string, []>("perm"), val = tensor<int32, [3]>([0, 2, 1])];
            tensor<fp16, [1, ?, ?]> y = transpose(perm = perm, x = x)[name = tensor<string, []>("t")];
        } -> (y);
})";
  Program a = parse(text);
  ASSERT_EQ(a.functions[0].attrs.size(), 1u);
  EXPECT_EQ(a.functions[0].attrs[0].key, "FlexibleShapeInformation");
  Program b = parse(print_mil(a));
  EXPECT_EQ(ir_diff(a, b), "");
}

TEST(Parser, RoundTripChangesNothingObservable) {
  std::string text = R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [2]> x) {
        tensor<fp32, [2]> k = const()[name = string("k"), val = tensor<fp32, [2]>([0.1, -3.5e-7])];
        string mode = const()[name = string("mode"), val = string("quote\"d")];
        tensor<fp32, [2]> y = add(x = x, y = k)[name = string("y")];
    } -> (y);
})";
  Program a = parse(text);
  std::string printed = print_mil(a);
  Program b = parse(printed);
  EXPECT_EQ(ir_diff(a, b), "") << printed;
  EXPECT_EQ(print_mil(b), printed);
  // The diff must notice a real change.
  b.functions[0].ops[0].outputs[0].name = "k2";
  EXPECT_NE(ir_diff(a, b), "");
}

struct ErrorCase {
  const char* text;
  const char* where;   // "line:col"
  const char* says;
};

TEST(Parser, ErrorsCarryLineAndColumn) {
  const ErrorCase cases[] = {
      {"program(1.3)\n{\n  func main<ios18>(tensor<fp32, [2]> x) {\n    tensor<fp32, [2]> y = relu(x = x)\n  } -> (y);\n}",
       "t.mil:5:3", "expected ';'"},
      {"program(1.3)\n{\n  func main<ios99>() {\n  } -> ();\n}", "t.mil:3:13", "unknown opset"},
      {"program(1.3)\n{\n  func main<ios18>(tensor<fp99, [2]> x) {\n  } -> (x);\n}", "t.mil:3:27", "unknown dtype"},
      {"program(1.3)\n{\n  func main<ios18>() {\n    tensor<fp32, [3]> k = const()[val = tensor<fp32, [3]>([1, 2])];\n  } -> (k);\n}",
       "t.mil:4:41", "2 values along dim 0"},
      {"program(1.3)\n{\n  func main<ios18>() {\n    string s = const()[val = string(\"abc)];\n  } -> (s);\n}",
       "t.mil:4:37", "unterminated string"},
      {"program(1.3)\n{\n  func main<ios18>() {\n    int8 s = const()[val = int8(300)];\n  } -> (s);\n}",
       "t.mil:4:28", "not a valid int8"},
      {"program(1.3)\n{\n  func main<ios18>() {\n    int32 s = const()[val = int32(1.5x)];\n  } -> (s);\n}",
       "t.mil:4:38", "expected ')'"},
      {"program(1.3)\n{\n  func main<ios18>(tensor<fp32, [2]> x) {\n  } -> (x)\n}", "t.mil:5:1", "expected ';'"},
      {"program(1.3)\n{\n  func main<ios18>(tensor<fp32, [2]> x) {\n  }\n}", "t.mil:5:1", "expected '->'"},
      {"program(1.3) $", "t.mil:1:14", "unexpected character"},
      {"", "t.mil:1:1", "expected 'program'"},
  };
  for (auto& c : cases) {
    std::string e = error_of(c.text);
    EXPECT_NE(e.find(std::string(c.where) + ": error: "), std::string::npos) << c.text << "\n-> " << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.text << "\n-> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "error spans lines: " << e;
  }
}

TEST(Parser, HostileInputsFailCleanly) {
  // Deep nesting: refused, not a stack overflow.
  std::string deep = "program(1.3)\n{\n func main<ios18>() {\n  tensor<fp32, [1]> k = const()[val = tensor<fp32, [1]>(" +
                     std::string(100000, '[') + "1" + std::string(100000, ']') + ")];\n } -> (k);\n}";
  EXPECT_NE(error_of(deep).find("nesting is too deep"), std::string::npos);
  // A huge declared shape with a tiny payload: refused before allocating.
  std::string huge = "program(1.3)\n{\n func main<ios18>() {\n  tensor<fp32, [100000000000000]> k = const()[val = tensor<fp32, [100000000000000]>([1])];\n } -> (k);\n}";
  EXPECT_NE(error_of(huge).find("error:"), std::string::npos);
  // Every prefix of a valid program fails with an error, never a crash.
  std::string ok = "program(1.3)\n{\n  func main<ios18>(tensor<fp32, [2]> x) {\n    tensor<fp32, [2]> y = relu(x = x)[name = string(\"y\")];\n  } -> (y);\n}\n";
  EXPECT_NO_THROW(parse(ok));
  for (size_t n = 0; n + 2 < ok.size(); ++n) EXPECT_THROW(parse(ok.substr(0, n)), Error) << n;
}

// Every model.mil in ../shared/testdata: parse -> print -> parse is the identity,
// before and after its blobs are loaded.
TEST(Parser, RoundTripsEveryModelInSharedTestdata) {
  MILRT_REQUIRE_SHARED();
  namespace fs = std::filesystem;
  int n = 0;
  for (auto& e : fs::recursive_directory_iterator(shared_dir() + "/testdata/coreml")) {
    if (e.path().filename() != "model.mil") continue;
    std::string dir = e.path().parent_path().string();
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Program a = parse_mil(text, e.path().string(), dir);
    Program b = parse_mil(print_mil(a), "printed", dir);
    EXPECT_EQ(ir_diff(a, b), "") << e.path();
    load_blobs(a);
    load_blobs(b);
    EXPECT_EQ(ir_diff(a, b), "") << e.path();
    ++n;
  }
  EXPECT_EQ(n, 19);
}

}  // namespace
}  // namespace milrt
