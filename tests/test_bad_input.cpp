// Bad input through the milrt CLI: malformed MIL text, ill-typed programs,
// broken weight blobs and malformed .npy files. Every case must end with exit
// code 2 and exactly one line on stderr saying "error:" (with file:line:col
// for MIL text), never a crash, a hang or a large allocation.
#include <cstring>
#include <filesystem>
#include <regex>

#include "milrt/blob.h"
#include "milrt/npy.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Helpers

struct Pos {
  int line = 0, col = 0;
};

// The 1-based line and column of the first occurrence of `needle` in `text`.
Pos pos_of(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  if (at == std::string::npos) {
    ADD_FAILURE() << "'" << needle << "' is not in the text";
    return {};
  }
  Pos p{1, 1};
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') { ++p.line; p.col = 1; } else { ++p.col; }
  }
  return p;
}

// The position just past the last character: where an end-of-file error points.
Pos end_of(const std::string& text) {
  Pos p{1, 1};
  for (char c : text) {
    if (c == '\n') { ++p.line; p.col = 1; } else { ++p.col; }
  }
  return p;
}

// `text` with the first occurrence of `from` replaced by `to` (which must exist).
std::string replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  if (at == std::string::npos) {
    ADD_FAILURE() << "'" << from << "' is not in the text";
    return text;
  }
  return text.replace(at, from.size(), to);
}

// Writes `text` as a .mil file and runs `milrt check` on it.
struct Checked {
  std::string path;
  CliResult r;
};
Checked check_text(const std::string& text, const std::string& tag = "bad_mil") {
  Checked c;
  c.path = temp_dir(tag) + "/model.mil";
  write_bytes(c.path, text);
  c.r = run_cli({"check", c.path});
  return c;
}

::testing::AssertionResult ErrorAt(const Checked& c, Pos p) { return IsErrorAt(c.r, c.path, p.line, p.col); }

::testing::AssertionResult Mentions(const CliResult& r, const std::string& what) {
  if (r.err.find(what) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "stderr does not mention '" << what << "'\n" << describe(r);
}

// The CLI's peak memory stayed within 100 MB of its baseline (what `milrt
// check --ops` takes: a few MB in Release, ~200 MB of sanitizer shadow and
// debug info under ASan): nothing absurd was allocated.
::testing::AssertionResult SmallPeakMemory(const CliResult& r) {
  static const long baseline_kb = run_cli({"check", "--ops"}).max_rss_kb;
  const long limit_kb = baseline_kb + 100 * 1024;
  if (r.max_rss_kb > 0 && baseline_kb > 0 && r.max_rss_kb < limit_kb) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "peak RSS " << r.max_rss_kb << " KB, baseline " << baseline_kb << " KB";
}

constexpr const char* kGood = R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [2, 3]> x) {
        fp32 half = const()[name = string("half"), val = fp32(0.5)];
        tensor<fp32, [2, 3]> y = relu(x = x)[name = string("y")];
        tensor<fp32, [2, 3]> z = mul(x = y, y = half)[name = string("z")];
    } -> (z);
}
)";

TEST(BadMil, TheBaseProgramIsGood) {
  Checked c = check_text(kGood);
  EXPECT_TRUE(Succeeded(c.r));
}

// ---------------------------------------------------------------------------
// Malformed MIL text

TEST(BadMil, MissingSemicolonBeforeNextStatement) {
  std::string t = replace(kGood, R"(string("y")];)", R"(string("y")])");
  Checked c = check_text(t);
  // Reported at the token where ';' was due: the next statement's type.
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "tensor<fp32, [2, 3]> z")));
  EXPECT_TRUE(Mentions(c.r, "';'"));
}

TEST(BadMil, MissingSemicolonBeforeClosingBrace) {
  std::string t = replace(kGood, R"(string("z")];)", R"(string("z")])");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "} -> (z)")));
}

TEST(BadMil, MissingSemicolonAfterOutputs) {
  std::string t = replace(kGood, "-> (z);", "-> (z)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, end_of(t.substr(0, t.rfind('}')))));
}

TEST(BadMil, UnknownDtypeInStatement) {
  std::string t = replace(kGood, "tensor<fp32, [2, 3]> y", "tensor<fp31, [2, 3]> y");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "fp31")));
  EXPECT_TRUE(Mentions(c.r, "fp31"));
}

TEST(BadMil, UnknownDtypeInParameter) {
  std::string t = replace(kGood, "tensor<fp32, [2, 3]> x", "tensor<float, [2, 3]> x");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "float")));
  EXPECT_TRUE(Mentions(c.r, "float"));
}

TEST(BadMil, UnknownBareScalarType) {
  std::string t = replace(kGood, "fp32 half", "fp33 half");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "fp33")));
  EXPECT_TRUE(Mentions(c.r, "fp33"));
}

TEST(BadMil, UnknownDtypeInLiteral) {
  std::string t = replace(kGood, "val = fp32(0.5)", "val = tensor<fp99, []>(0.5)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "fp99")));
}

TEST(BadMil, UnclosedAttributeBlock) {
  std::string t = replace(kGood, R"(string("y")];)", R"(string("y");)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, R"(;
        tensor<fp32, [2, 3]> z)")));
}

TEST(BadMil, UnclosedArgumentList) {
  std::string t = replace(kGood, "relu(x = x)[", "relu(x = x[");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "[name = string(\"y\")")));
}

TEST(BadMil, ExtraClosingParenthesis) {
  std::string t = replace(kGood, "relu(x = x)[", "relu(x = x))[");
  Checked c = check_text(t);
  Pos second = pos_of(t, "))");
  ++second.col;
  EXPECT_TRUE(ErrorAt(c, second));
}

TEST(BadMil, UnclosedShapeBracket) {
  std::string t = replace(kGood, "tensor<fp32, [2, 3]> y", "tensor<fp32, [2, 3> y");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "> y")));
}

TEST(BadMil, ExtraClosingBraceAfterProgram) {
  std::string t = std::string(kGood) + "}\n";
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, Pos{9, 1}));
}

TEST(BadMil, MissingFunctionClosingBrace) {
  std::string t = replace(kGood, "    } -> (z);", "    -> (z);");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "-> (z)")));
}

TEST(BadMil, BadNumberTwoDecimalPoints) {
  std::string t = replace(kGood, "fp32(0.5)", "fp32(1.2.3)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "1.2.3")));
  EXPECT_TRUE(Mentions(c.r, "1.2.3"));
}

TEST(BadMil, BadNumberDanglingExponent) {
  std::string t = replace(kGood, "fp32(0.5)", "fp32(1e+)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "1e+")));
}

TEST(BadMil, BadNumberDoubleMinus) {
  std::string t = replace(kGood, "fp32(0.5)", "fp32(--1)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "--1")));
}

TEST(BadMil, BadNumberTrailingLetters) {
  std::string t = replace(kGood, "fp32(0.5)", "fp32(12abc)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "abc")));
}

TEST(BadMil, FractionalDimension) {
  std::string t = replace(kGood, "tensor<fp32, [2, 3]> y", "tensor<fp32, [2.5, 3]> y");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "2.5")));
}

TEST(BadMil, IntegerLiteralOutOfRange) {
  std::string t = replace(kGood, "fp32 half = const()[name = string(\"half\"), val = fp32(0.5)]",
                          "int8 half = const()[name = string(\"half\"), val = int8(300)]");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "int8(300)")));
  EXPECT_TRUE(Mentions(c.r, "300"));
}

TEST(BadMil, LiteralValueCountDisagreesWithShape) {
  std::string t = replace(kGood, "val = fp32(0.5)", "val = tensor<fp32, [3]>([1.0, 2.0])");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "tensor<fp32, [3]>(")));
}

TEST(BadMil, UnterminatedString) {
  std::string t = replace(kGood, R"(string("y")])", R"(string("y)])");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "\"y)];")));
}

TEST(BadMil, StrayCharacter) {
  std::string t = replace(kGood, "relu(x = x)", "relu(x = $x)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "$x")));
}

TEST(BadMil, NulByte) {
  std::string t = replace(kGood, "relu(x = x)", std::string("relu(x = \0x)", 12));
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, std::string("\0x)", 3))));
}

TEST(BadMil, UnknownOpset) {
  std::string t = replace(kGood, "main<ios18>", "main<ios99>");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "ios99")));
}

TEST(BadMil, EmptyFile) {
  Checked c = check_text("");
  EXPECT_TRUE(ErrorAt(c, Pos{1, 1}));
}

TEST(BadMil, BinaryGarbage) {
  std::string t = "\x7f" "ELF\x02\x01\x01\x00\x00\xff\xfe";
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, Pos{1, 1}));
}

TEST(BadMil, DeepNestingIsRefusedNotACrash) {
  std::string t = replace(kGood, "val = fp32(0.5)",
                          "val = tensor<fp32, []>(" + std::string(100000, '[') + "0.5" + std::string(100000, ']') + ")");
  Checked c = check_text(t);
  EXPECT_TRUE(IsOneLineError(c.r));
  std::string nested_type;
  for (int i = 0; i < 100000; ++i) nested_type += "tuple<";
  Checked d = check_text("program(1.3)\n{\n    func main<ios18>(" + nested_type + "fp32> x) {\n    } -> ();\n}\n");
  EXPECT_TRUE(IsOneLineError(d.r));
  EXPECT_EQ(d.r.err.rfind(d.path + ":3:", 0), 0u) << d.r.err;
}

// A string token where a name belongs: the message quotes the token, and an
// escaped newline in it must not split the error over two lines.
TEST(BadMil, EscapedNewlineInAStringTokenKeepsTheErrorOneLine) {
  std::string t = replace(kGood, "program(1.3)", "program(\"1.3\\nsecond line\")");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "\"1.3")));
}

// Cutting the program short anywhere before its closing brace is an error
// with a position inside the truncated text; at a few chosen points it is
// exactly the end of the file.
TEST(BadMil, TruncatedAtChosenPoints) {
  const std::string good = kGood;
  for (const char* cut_after : {"program(", "func main<ios18>(", "relu(x = x)", "[name = string(\"z\")]",
                                "} -> (z);\n"}) {
    SCOPED_TRACE(cut_after);
    std::string t = good.substr(0, good.find(cut_after) + std::strlen(cut_after));
    Checked c = check_text(t, "truncated");
    EXPECT_TRUE(ErrorAt(c, end_of(t)));
    EXPECT_TRUE(Mentions(c.r, "end of file"));
  }
}

TEST(BadMil, TruncatedAtEveryByte) {
  const std::string good = kGood;
  const std::string dir = temp_dir("truncated_all");
  const std::regex pos_re(R"(^(.*):(\d+):(\d+): error: )");
  for (size_t n = 0; n <= good.rfind('}'); ++n) {
    std::string t = good.substr(0, n);
    SCOPED_TRACE("first " + std::to_string(n) + " bytes: ..." + t.substr(t.size() > 40 ? t.size() - 40 : 0));
    std::string path = dir + "/cut" + std::to_string(n) + ".mil";
    write_bytes(path, t);
    CliResult r = run_cli({"check", path});
    ASSERT_TRUE(IsOneLineError(r));
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, pos_re)) << r.err;
    EXPECT_EQ(m[1], path);
    Pos end = end_of(t);
    int line = std::stoi(m[2]), col = std::stoi(m[3]);
    EXPECT_GE(line, 1);
    EXPECT_LE(line, end.line);
    EXPECT_GE(col, 1);
    if (line == end.line) {
      EXPECT_LE(col, end.col);
    }
  }
}

// ---------------------------------------------------------------------------
// Well-formed text that is not a valid program (verifier errors at the op)

TEST(BadProgram, UnknownOp) {
  std::string t = replace(kGood, "relu(x = x)", "frobnicate(x = x)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "frobnicate")));
  EXPECT_TRUE(Mentions(c.r, "frobnicate"));
}

TEST(BadProgram, UnknownOpInputName) {
  std::string t = replace(kGood, "relu(x = x)", "relu(x = x, bogus_input = x)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "relu(")));
  EXPECT_TRUE(Mentions(c.r, "bogus_input"));
}

TEST(BadProgram, MissingRequiredOpInput) {
  std::string t = replace(kGood, "mul(x = y, y = half)", "mul(x = y)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "mul(")));
  EXPECT_TRUE(Mentions(c.r, "mul"));
}

TEST(BadProgram, AddOfFp16AndFp32) {
  std::string t = R"(program(1.3)
{
    func main<ios18>(tensor<fp16, [2]> a, tensor<fp32, [2]> b) {
        tensor<fp32, [2]> c = add(x = a, y = b)[name = string("c")];
    } -> (c);
}
)";
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "add(")));
  EXPECT_TRUE(Mentions(c.r, "add"));
}

TEST(BadProgram, DeclaredOutputShapeWrong) {
  std::string t = replace(kGood, "tensor<fp32, [2, 3]> y", "tensor<fp32, [3, 2]> y");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "relu(")));
  EXPECT_TRUE(Mentions(c.r, "relu"));
}

TEST(BadProgram, DeclaredOutputDtypeWrong) {
  std::string t = replace(kGood, "tensor<fp32, [2, 3]> y", "tensor<int32, [2, 3]> y");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "relu(")));
}

TEST(BadProgram, UndefinedVariable) {
  std::string t = replace(kGood, "relu(x = x)", "relu(x = nowhere_defined)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "relu(")));
  EXPECT_TRUE(Mentions(c.r, "nowhere_defined"));
}

TEST(BadProgram, UseBeforeDefinition) {
  std::string t = replace(kGood, "relu(x = x)", "relu(x = z)");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "relu(")));
}

TEST(BadProgram, ReturnsUndefinedValue) {
  std::string t = replace(kGood, "-> (z);", "-> (never_made);");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "func")));
  EXPECT_TRUE(Mentions(c.r, "never_made"));
}

TEST(BadProgram, RedefinedValue) {
  std::string t = replace(kGood, "tensor<fp32, [2, 3]> z =", "tensor<fp32, [2, 3]> y =");
  t = replace(t, "-> (z);", "-> (y);");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "mul(")));
}

TEST(BadProgram, AbsurdDeclaredShapeIsAShapeErrorNotAnAllocation) {
  std::string t = replace(kGood, "tensor<fp32, [2, 3]> y", "tensor<fp32, [1000000000000, 3]> y");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "relu(")));
  EXPECT_TRUE(SmallPeakMemory(c.r));
}

TEST(BadProgram, AbsurdInlineLiteralShape) {
  std::string t = replace(kGood, "val = fp32(0.5)", "val = tensor<fp32, [1000000000000]>([0.5])");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "tensor<fp32, [1000000000000]>(")));
  EXPECT_TRUE(SmallPeakMemory(c.r));
}

TEST(BadProgram, HugeDimensionOverflowingInt64) {
  std::string t = replace(kGood, "tensor<fp32, [2, 3]> y", "tensor<fp32, [99999999999999999999999, 3]> y");
  Checked c = check_text(t);
  EXPECT_TRUE(ErrorAt(c, pos_of(t, "99999999999999999999999")));
}

TEST(BadProgram, MissingModelPath) {
  std::string path = temp_dir("no_model") + "/absent.mil";
  CliResult r = run_cli({"check", path});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_TRUE(Mentions(r, path));
}

TEST(BadProgram, BundleWithoutModelMil) {
  std::string dir = temp_dir("empty_bundle") + "/Empty.mlmodelc";
  fs::create_directories(dir);
  CliResult r = run_cli({"check", dir});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_TRUE(Mentions(r, dir));
}

TEST(BadProgram, ModelMilIsADirectory) {
  std::string dir = temp_dir("dir_bundle") + "/Odd.mlmodelc";
  fs::create_directories(dir + "/model.mil");
  CliResult r = run_cli({"check", dir});
  EXPECT_TRUE(IsOneLineError(r));
}

TEST(BadProgram, RunAndPrintReportTheSameErrors) {
  std::string t = replace(kGood, "relu(x = x)", "frobnicate(x = x)");
  Checked c = check_text(t);
  CliResult run = run_cli({"run", c.path});
  EXPECT_TRUE(IsErrorAt(run, c.path, pos_of(t, "frobnicate").line, pos_of(t, "frobnicate").col));
  std::string t2 = replace(kGood, "fp32(0.5)", "fp32(1.2.3)");
  Checked c2 = check_text(t2);
  CliResult print = run_cli({"print", c2.path});
  EXPECT_TRUE(IsErrorAt(print, c2.path, pos_of(t2, "1.2.3").line, pos_of(t2, "1.2.3").col));
}

// ---------------------------------------------------------------------------
// Weight blobs. A bundle dir with model.mil and weights/weight.bin; `w` is read
// from the blob and added to the input.

std::string blob_program(const std::string& w_type, const std::string& path, const std::string& offset) {
  return R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [4]> x) {
        )" + w_type + R"( w = const()[name = string("w"), val = )" + w_type + R"((BLOBFILE(path = string(")" + path +
         R"("), offset = uint64()" + offset + R"()))];
        tensor<fp32, [4]> y = add(x = x, y = w)[name = string("y")];
    } -> (y);
}
)";
}
constexpr const char* kWeightPath = "@model_path/weights/weight.bin";

// A blob storage v2 file holding fp32 [1, 2, 3, 4]: header at 0, record at 64,
// data at 128..144, padded to 192.
std::string good_weights() {
  BlobWriter w;
  EXPECT_EQ(w.add(make(DType::FP32, {4}, {1, 2, 3, 4})), 64u);
  return std::string(w.bytes().begin(), w.bytes().end());
}

struct Bundle {
  std::string dir, mil;
  std::string text;
};

Bundle write_bundle(const std::string& text, const std::string& weights, const std::string& tag = "blob") {
  Bundle b;
  b.dir = temp_dir(tag) + "/M.mlmodelc";
  b.mil = b.dir + "/model.mil";
  b.text = text;
  fs::create_directories(b.dir + "/weights");
  write_bytes(b.mil, text);
  write_bytes(b.dir + "/weights/weight.bin", weights);
  return b;
}

// The blob errors are reported at the const op that holds the BLOBFILE.
::testing::AssertionResult BlobErrorAt(const CliResult& r, const Bundle& b) {
  Pos p = pos_of(b.text, "const()");
  return IsErrorAt(r, b.mil, p.line, p.col);
}

TEST(BadBlob, TheGoodBundleRuns) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "64"), good_weights());
  ASSERT_TRUE(Succeeded(run_cli({"check", b.dir})));
  std::string x = b.dir + "/../x.npy";
  write_npy(x, make(DType::FP32, {4}, {10, 20, 30, 40}));
  CliResult r = run_cli({"run", b.dir, "--input", "x=" + x, "--output-dir", b.dir + "/../out"});
  ASSERT_TRUE(Succeeded(r));
  EXPECT_EQ(values(read_npy(b.dir + "/../out/y.npy")), (std::vector<double>{11, 22, 33, 44}));
}

TEST(BadBlob, MissingBlobFile) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", "@model_path/weights/absent.bin", "64"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
  EXPECT_TRUE(Mentions(r, "absent.bin"));
}

TEST(BadBlob, BlobPathIsADirectory) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", "@model_path/weights", "64"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

// The path is quoted in the message; an escaped newline in it must not split the error.
TEST(BadBlob, MissingBlobFileWithNewlineInItsName) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", "@model_path/weights/no\\nsuch.bin", "64"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, TruncatedInsideTheData) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "64"), good_weights().substr(0, 140));
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, TruncatedInsideTheRecord) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "64"), good_weights().substr(0, 100));
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, TruncatedInsideTheHeader) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "64"), good_weights().substr(0, 30));
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, EmptyBlobFile) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "0"), "");
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

// blob.cpp: in a file with a v2 header, an offset that does not point at a
// 0xDEADBEEF record is an error (not a raw read).
TEST(BadBlob, OffsetAtTheDataInsteadOfTheRecord) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "128"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
  EXPECT_TRUE(Mentions(r, "128"));
}

TEST(BadBlob, CorruptSentinel) {
  std::string w = good_weights();
  w[64] = '\xEE';  // 0xDEADBEEE
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "64"), w);
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, UnknownDtypeCodeInRecord) {
  std::string w = good_weights();
  w[68] = 99;
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "64"), w);
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, RecordDataOffsetPastTheEnd) {
  std::string w = good_weights();
  w[64 + 16 + 2] = 0x10;  // data_offset = 128 + 0x100000
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "64"), w);
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, RecordSizeOverflowsUint64) {
  std::string w = good_weights();
  for (int i = 0; i < 8; ++i) w[64 + 8 + i] = '\xff';  // size_in_bytes = 2^64 - 1
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "64"), w);
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, OffsetOutOfRange) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "1000000"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
  EXPECT_TRUE(Mentions(r, "1000000"));
}

TEST(BadBlob, OffsetNearUint64Max) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "18446744073709551600"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, DeclaredElementCountLargerThanTheBlob) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [8]>", kWeightPath, "64"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, DeclaredElementCountSmallerThanTheBlob) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [2]>", kWeightPath, "64"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, DeclaredDtypeDisagreesWithTheRecord) {
  Bundle b = write_bundle(blob_program("tensor<fp16, [4]>", kWeightPath, "64"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, RawFileShorterThanTheDeclaredShape) {
  std::string raw(12, '\0');  // three fp32 values, no header
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "0"), raw);
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

TEST(BadBlob, RawOffsetPastTheEnd) {
  std::string raw(16, '\0');
  Bundle b = write_bundle(blob_program("tensor<fp32, [4]>", kWeightPath, "4"), raw);
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

// Absurd shapes must be refused from the file's size before any allocation.

TEST(BadBlob, AbsurdShapeBeyondTheElementLimit) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [1000000000000]>", kWeightPath, "64"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
  EXPECT_TRUE(SmallPeakMemory(r));
}

TEST(BadBlob, AbsurdShapeWithinTheElementLimit) {
  // 4e9 fp32 elements (16 GB): allowed by the element limit, refused by the record size.
  Bundle b = write_bundle(blob_program("tensor<fp32, [4000000000]>", kWeightPath, "64"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
  EXPECT_TRUE(SmallPeakMemory(r));
}

TEST(BadBlob, AbsurdShapeInARawFile) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [65536, 65536]>", kWeightPath, "0"), std::string(64, '\0'));
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
  EXPECT_TRUE(SmallPeakMemory(r));
}

TEST(BadBlob, ProductOfDimsOverflowsInt64) {
  Bundle b = write_bundle(
      blob_program("tensor<fp32, [4294967296, 4294967296, 4294967296]>", kWeightPath, "64"), good_weights());
  CliResult r = run_cli({"check", b.dir});
  EXPECT_TRUE(BlobErrorAt(r, b));
  EXPECT_TRUE(SmallPeakMemory(r));
}

TEST(BadBlob, RunReportsBlobErrorsToo) {
  Bundle b = write_bundle(blob_program("tensor<fp32, [8]>", kWeightPath, "64"), good_weights());
  std::string x = b.dir + "/../x.npy";
  write_npy(x, make(DType::FP32, {4}, {1, 2, 3, 4}));
  CliResult r = run_cli({"run", b.dir, "--input", "x=" + x});
  EXPECT_TRUE(BlobErrorAt(r, b));
}

// ---------------------------------------------------------------------------
// Malformed .npy inputs, given to `milrt run` of a program taking fp32 [2, 3].

constexpr const char* kNpyProgram = R"(program(1.3)
{
    func main<ios18>(tensor<fp32, [2, 3]> x) {
        tensor<fp32, [2, 3]> y = relu(x = x)[name = string("y")];
    } -> (y);
}
)";

// A .npy file from its parts: magic, version 1.0, header length, header
// (padded with spaces and '\n' to a 64-byte boundary), data.
std::string npy_bytes(const std::string& dict, const std::string& data, const std::string& magic = "\x93NUMPY") {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string out = magic + std::string("\x01\x00", 2);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  return out + header + data;
}

const std::string kDict23 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
const std::string kData23(24, '\0');

struct NpyRun {
  std::string npy;
  CliResult r;
};

// Runs the program with `bytes` as the .npy of input x.
NpyRun run_with_npy(const std::string& bytes) {
  std::string dir = temp_dir("bad_npy");
  NpyRun n;
  n.npy = dir + "/x_input.npy";
  write_bytes(dir + "/model.mil", kNpyProgram);
  write_bytes(n.npy, bytes);
  n.r = run_cli({"run", dir + "/model.mil", "--input", "x=" + n.npy});
  return n;
}

TEST(BadNpy, TheWellFormedFileRuns) {
  NpyRun n = run_with_npy(npy_bytes(kDict23, kData23));
  EXPECT_TRUE(Succeeded(n.r));
}

TEST(BadNpy, BadMagic) {
  NpyRun n = run_with_npy(npy_bytes(kDict23, kData23, "\x93NUMPZ"));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, EmptyFile) {
  NpyRun n = run_with_npy("");
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, TruncatedBeforeTheHeaderLength) {
  NpyRun n = run_with_npy(npy_bytes(kDict23, kData23).substr(0, 9));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, TruncatedHeader) {
  NpyRun n = run_with_npy(npy_bytes(kDict23, kData23).substr(0, 40));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, UnterminatedHeaderDict) {
  NpyRun n = run_with_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", kData23));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, TruncatedData) {
  NpyRun n = run_with_npy(npy_bytes(kDict23, kData23.substr(0, 20)));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, TrailingData) {
  NpyRun n = run_with_npy(npy_bytes(kDict23, kData23 + "xxxx"));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, FortranOrder) {
  NpyRun n = run_with_npy(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", kData23));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, UnsupportedComplexDtype) {
  NpyRun n = run_with_npy(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }",
                                    std::string(48, '\0')));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, UnsupportedStructuredDtype) {
  NpyRun n = run_with_npy(
      npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }", kData23));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, BigEndianData) {
  NpyRun n = run_with_npy(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", kData23));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, UnsupportedFormatVersion) {
  std::string b = npy_bytes(kDict23, kData23);
  b[6] = 9;
  NpyRun n = run_with_npy(b);
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, HeaderLengthPastTheEnd) {
  std::string b = npy_bytes(kDict23, kData23);
  b[8] = '\xff';
  b[9] = '\xff';
  NpyRun n = run_with_npy(b);
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
}

TEST(BadNpy, AbsurdShapeIsRefusedBeforeAllocating) {
  NpyRun n = run_with_npy(
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }", kData23));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, n.npy));
  EXPECT_TRUE(SmallPeakMemory(n.r));
}

TEST(BadNpy, ShapeDisagreesWithTheInput) {
  NpyRun n = run_with_npy(
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", kData23));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, "'x'"));
}

TEST(BadNpy, RankDisagreesWithTheInput) {
  NpyRun n = run_with_npy(
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", kData23));
  EXPECT_TRUE(IsOneLineError(n.r));
  EXPECT_TRUE(Mentions(n.r, "'x'"));
}

TEST(BadNpy, UnknownInputName) {
  std::string dir = temp_dir("npy_unknown");
  write_bytes(dir + "/model.mil", kNpyProgram);
  write_bytes(dir + "/x.npy", npy_bytes(kDict23, kData23));
  CliResult r = run_cli(
      {"run", dir + "/model.mil", "--input", "x=" + dir + "/x.npy", "--input", "nonesuch_input=" + dir + "/x.npy"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_TRUE(Mentions(r, "nonesuch_input"));
}

TEST(BadNpy, MissingFile) {
  std::string dir = temp_dir("npy_missing");
  write_bytes(dir + "/model.mil", kNpyProgram);
  CliResult r = run_cli({"run", dir + "/model.mil", "--input", "x=" + dir + "/absent.npy"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_TRUE(Mentions(r, "absent.npy"));
}

TEST(BadNpy, StringInputsAreRefused) {
  NpyRun n = run_with_npy(npy_bytes("{'descr': '<U3', 'fortran_order': False, 'shape': (2, 3), }",
                                    std::string(72, '\0')));
  EXPECT_TRUE(IsOneLineError(n.r));
}

}  // namespace
}  // namespace milrt::test
