// Untrusted models (issue #20): a model may read only its own bundle (no
// absolute paths, no `..` out of it, no symlinks, also not one swapped in
// after the check), unless a directory is allowed explicitly; a plan over the
// memory limit is refused before anything is allocated; a running plan can
// be cancelled from another thread.
//
// Hostile bundles are written here, in temp directories. The file outside
// every bundle is a valid blob storage file holding fp32 [1000, 2000, 3000,
// 4000], so a model that did read it would run and print y = x + those
// values: the tests check that no such number appears. Inside the bundles
// the weights are [1, 2, 3, 4]; every expected value is written by hand.
#include <fcntl.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "milrt/blob.h"
#include "milrt/mil.h"
#include "milrt/npy.h"
#include "milrt/plan.h"
#include "test_cli_util.h"

namespace milrt {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::IsOneLineError;
using test::make;
using test::run_cli;
using test::Succeeded;
using test::values;
using test::write_bytes;

// y = x + w, w read from `path` at offset 64 (the first record of a BlobWriter file).
std::string model_text(const std::string& path) {
  return "program(1.3)\n"
         "{\n"
         "    func main<ios18>(tensor<fp32, [4]> x) {\n"
         "        tensor<fp32, [4]> w = const()[name = string(\"w\"), val = tensor<fp32, [4]>(BLOBFILE(path = string(\"" +
         path +
         "\"), offset = uint64(64)))];\n"
         "        tensor<fp32, [4]> y = add(x = x, y = w)[name = string(\"y\")];\n"
         "    } -> (y);\n"
         "}\n";
}

std::string blob_of(const std::vector<double>& v) {
  BlobWriter w;
  EXPECT_EQ(w.add(make(DType::FP32, {4}, v)), 64u);
  return std::string(w.bytes().begin(), w.bytes().end());
}

// A temp directory T with T/outside/secret.bin (the file no model may read),
// T/x.npy = [10, 20, 30, 40], and T/M.mlmodelc with weights/weight.bin = [1, 2, 3, 4].
struct Scene {
  std::string root, outside, secret, bundle, x, out;
  explicit Scene(const std::string& tag) {
    root = fs::canonical(test::temp_dir("untrusted_" + tag)).string();
    outside = root + "/outside";
    secret = outside + "/secret.bin";
    bundle = root + "/M.mlmodelc";
    x = root + "/x.npy";
    out = root + "/out";
    fs::create_directories(outside);
    fs::create_directories(bundle + "/weights");
    write_bytes(secret, blob_of({1000, 2000, 3000, 4000}));
    write_bytes(outside + "/weight.bin", blob_of({1000, 2000, 3000, 4000}));
    write_bytes(bundle + "/weights/weight.bin", blob_of({1, 2, 3, 4}));
    write_npy(x, make(DType::FP32, {4}, {10, 20, 30, 40}));
  }
  void mil(const std::string& blob_path) const { write_bytes(bundle + "/model.mil", model_text(blob_path)); }
  CliResult check(std::vector<std::string> extra = {}) const {
    std::vector<std::string> a{"check", bundle};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  }
  CliResult run(std::vector<std::string> extra = {}) const {
    std::vector<std::string> a{"run", bundle, "--input", "x=" + x, "--output-dir", out};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  }
};

// The outside file's values, as `milrt run` would print them (y = x + w
// summarized: min 1010, max 4040, mean 2525).
bool leaks(const CliResult& r) {
  for (const char* v : {"1010", "4040", "2525"})
    if (r.out.find(v) != std::string::npos) return true;
  return false;
}

// check and run both refuse with one error line (exit 2) naming `why`, and
// nothing of the outside file comes out.
void expect_refused(const Scene& s, const std::string& why) {
  CliResult c = s.check();
  EXPECT_TRUE(IsOneLineError(c));
  EXPECT_NE(c.err.find(why), std::string::npos) << c.err;
  EXPECT_EQ(c.out.find("ok"), std::string::npos) << c.out;
  CliResult r = s.run();
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  EXPECT_FALSE(leaks(r)) << r.out << r.err;
  EXPECT_FALSE(fs::exists(s.out + "/y.npy"));
}

TEST(Confinement, AnOrdinaryBundleStillLoadsAndRuns) {
  Scene s("ordinary");
  s.mil("@model_path/weights/weight.bin");
  EXPECT_TRUE(Succeeded(s.check()));
  CliResult r = s.run();
  ASSERT_TRUE(Succeeded(r));
  EXPECT_EQ(values(read_npy(s.out + "/y.npy")), (std::vector<double>{11, 22, 33, 44}));
  // `..` that stays inside the bundle is fine: it is folded lexically.
  s.mil("@model_path/weights/../weights/weight.bin");
  EXPECT_TRUE(Succeeded(s.check()));
}

TEST(Confinement, SymlinkedWeightFileIsRefused) {
  Scene s("file_link");
  s.mil("@model_path/weights/weight.bin");
  fs::remove(s.bundle + "/weights/weight.bin");
  fs::create_symlink(s.secret, s.bundle + "/weights/weight.bin");
  expect_refused(s, "symbolic link");
}

TEST(Confinement, SymlinkedWeightsFolderIsRefused) {
  Scene s("dir_link");
  s.mil("@model_path/weights/weight.bin");
  fs::remove_all(s.bundle + "/weights");
  fs::create_directory_symlink(s.outside, s.bundle + "/weights");
  expect_refused(s, "symbolic link");
}

TEST(Confinement, ASymlinkThatStaysInsideIsRefusedToo) {
  // The documented rule: no symlink below the bundle, wherever it points.
  Scene s("inside_link");
  s.mil("@model_path/weights/weight.bin");
  fs::rename(s.bundle + "/weights/weight.bin", s.bundle + "/real.bin");
  fs::create_symlink("../real.bin", s.bundle + "/weights/weight.bin");
  expect_refused(s, "symbolic link");
}

TEST(Confinement, DotDotOutOfTheBundleIsRefused) {
  Scene s("dotdot");
  s.mil("@model_path/../outside/secret.bin");
  expect_refused(s, "outside the model's directory");
  s.mil("../outside/secret.bin");  // relative without @model_path: from the bundle too
  expect_refused(s, "outside the model's directory");
  s.mil("@model_path/../../../../../../../../etc/passwd");
  expect_refused(s, "outside the model's directory");
}

// A NUL byte inside the path string: the checks see "..\0" as an ordinary
// name, but the system calls would stop at the NUL and open "..": the
// fuzzer's input that read outside/secret.bin before NULs were refused.
TEST(Confinement, ANulByteInThePathIsRefused) {
  Scene s("nul");
  s.mil(std::string("@model_path/..\0\0/outside/secret.bin", 35));
  expect_refused(s, "NUL byte");
  s.mil(std::string("weights/weight.bin\0/x", 21));
  expect_refused(s, "NUL byte");
}

TEST(Confinement, AbsolutePathIsRefused) {
  Scene s("absolute");
  s.mil(s.secret);
  expect_refused(s, "outside the model's directory");
  s.mil("/etc/passwd");
  expect_refused(s, "outside the model's directory");
}

TEST(Confinement, SymlinkedModelMilIsRefused) {
  Scene s("mil_link");
  write_bytes(s.outside + "/model.mil", model_text("@model_path/weights/weight.bin"));
  fs::create_symlink(s.outside + "/model.mil", s.bundle + "/model.mil");
  expect_refused(s, "symbolic link");
}

TEST(Confinement, AFifoIsRefusedWithoutHanging) {
  Scene s("fifo");
  s.mil("@model_path/weights/weight.bin");
  fs::remove(s.bundle + "/weights/weight.bin");
  ASSERT_EQ(mkfifo((s.bundle + "/weights/weight.bin").c_str(), 0600), 0) << std::strerror(errno);
  expect_refused(s, "not a regular file");
}

TEST(Confinement, ABareMilFileIsConfinedToItsDirectory) {
  Scene s("bare");
  write_bytes(s.bundle + "/weights/m.mil", model_text("../../outside/secret.bin"));
  CliResult r = run_cli({"check", s.bundle + "/weights/m.mil"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("outside the model's directory"), std::string::npos) << r.err;
  write_bytes(s.bundle + "/weights/m.mil", model_text("weight.bin"));
  EXPECT_TRUE(Succeeded(run_cli({"check", s.bundle + "/weights/m.mil"})));
}

TEST(Confinement, AllowedExternalDirectoryIsAnOptIn) {
  Scene s("allowed");
  for (const std::string& path : {s.secret, std::string("@model_path/../outside/secret.bin")}) {
    SCOPED_TRACE(path);
    s.mil(path);
    EXPECT_TRUE(IsOneLineError(s.check()));
    EXPECT_TRUE(Succeeded(s.check({"--allow-external-weights", s.outside})));
    fs::remove_all(s.out);
    CliResult r = s.run({"--allow-external-weights", s.outside});
    ASSERT_TRUE(Succeeded(r));
    EXPECT_EQ(values(read_npy(s.out + "/y.npy")), (std::vector<double>{1010, 2020, 3030, 4040}));
  }
  // Allowing one directory admits nothing else.
  s.mil("@model_path/../x.npy");
  EXPECT_TRUE(IsOneLineError(s.check({"--allow-external-weights", s.outside})));
  // The same rules hold below the allowed directory: no symlinks there either.
  fs::create_symlink(s.root + "/x.npy", s.outside + "/link.bin");
  s.mil(s.outside + "/link.bin");
  CliResult r = s.check({"--allow-external-weights", s.outside});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << r.err;
}

TEST(Confinement, TheLibraryAppliesTheSameRules) {
  Scene s("library");
  s.mil(s.secret);
  test::expect_error_containing([&] { load_model(s.bundle); }, "outside the model's directory");
  LoadOptions o;
  o.allow_external_weights = {s.outside};
  Program p = load_model(s.bundle, o);
  EXPECT_EQ(values(run_reference(p, "main", {{"x", make(DType::FP32, {4}, {0, 0, 0, 0})}}).at("y")),
            (std::vector<double>{1000, 2000, 3000, 4000}));
  // parse_mil + load_blobs: confined to the program's base_dir.
  Program q = parse_mil(model_text("@model_path/../outside/secret.bin"), "q.mil", s.bundle);
  test::expect_error_containing([&] { load_blobs(q); }, "outside the model's directory");
}

// A swapped-in symlink: the descriptor open_beneath() returned is what gets
// mapped, whatever the path names afterwards; and opening after the swap is refused.
TEST(OpenBeneath, TheOpenedDescriptorIsWhatGetsMapped) {
  Scene s("swap");
  int fd = open_beneath(s.bundle, "weights/weight.bin");
  ASSERT_GE(fd, 0);
  // The attacker replaces the checked file with a link to the outside one.
  fs::create_symlink(s.secret, s.bundle + "/weights/new");
  fs::rename(s.bundle + "/weights/new", s.bundle + "/weights/weight.bin");
  auto buf = map_fd(fd, "weight.bin");
  Tensor t = read_blob(buf, 64, DType::FP32, {4}, "w");
  EXPECT_EQ(values(t), (std::vector<double>{1, 2, 3, 4}));
  test::expect_error_containing([&] { open_beneath(s.bundle, "weights/weight.bin"); }, "symbolic link");
}

TEST(OpenBeneath, AFolderSwappedForASymlinkIsNotFollowed) {
  Scene s("swap_dir");
  fs::rename(s.bundle + "/weights", s.bundle + "/weights.old");
  fs::create_directory_symlink(s.outside, s.bundle + "/weights");
  test::expect_error_containing([&] { open_beneath(s.bundle, "weights/weight.bin"); }, "symbolic link");
}

TEST(OpenBeneath, RefusesPathsThatCouldLeave) {
  Scene s("paths");
  test::expect_error_containing([&] { open_beneath(s.bundle, "../outside/secret.bin"); }, "'..' component");
  test::expect_error_containing([&] { open_beneath(s.bundle, "weights/../../outside/secret.bin"); }, "'..' component");
  test::expect_error_containing([&] { open_beneath(s.bundle, s.secret); }, "absolute path");
  test::expect_error_containing([&] { open_beneath(s.bundle, "weights"); }, "not a regular file");
  test::expect_error_containing([&] { open_beneath(s.bundle, "weights/absent.bin"); }, "cannot open");
  int fd = open_beneath(s.bundle, "weights/weight.bin");
  ASSERT_GE(fd, 0);
  EXPECT_EQ(map_fd(fd, "w")->size(), 192u);  // header 64 + record 64 + 16 data bytes padded to 64
}

// ---------------------------------------------------------------- memory limit

// x [n] -> a = add(x, x) -> y = mul(a, a): compiled without passes, so `a`
// is the one arena value. Needs 3 * n * 4 bytes: x, a and y in fp32.
std::string chain_text(int64_t n) {
  std::string t = "tensor<fp32, [" + std::to_string(n) + "]>";
  return "program(1.3)\n{\n    func main<ios18>(" + t + " x) {\n        " + t +
         " a = add(x = x, y = x)[name = string(\"a\")];\n        " + t +
         " y = mul(x = a, y = a)[name = string(\"y\")];\n    } -> (y);\n}\n";
}

TEST(MemoryLimit, APlanOverTheLimitIsRefusedWithTheFigures) {
  Program p = parse_mil(chain_text(65536), "chain.mil", ".");
  verify(p);
  CompileOptions o;
  o.passes = {};
  o.max_memory = 700000;  // each value is 262144 bytes; together 786432
  std::string e = test::error_of([&] { compile(p, o); });
  EXPECT_NE(e.find("needs 786432 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("memory limit of 700000 bytes"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  o.max_memory = 800000;
  Plan plan = compile(p, o);
  Tensor x = make(DType::FP32, {65536}, std::vector<double>(65536, 3));
  Tensor y = plan.run({{"x", x}}).at("y");
  EXPECT_EQ(y.at(0), 36);  // (3 + 3)^2
}

TEST(MemoryLimit, OneValueOverTheLimitIsRefusedBeforeThePasses) {
  Program p = parse_mil(chain_text(65536), "chain.mil", ".");
  CompileOptions o;
  o.max_memory = 200000;  // below one value's 262144 bytes
  test::expect_error_containing([&] { compile(p, o); }, "needs 256.0 KiB, more than the memory limit of 200000 bytes");
}

TEST(MemoryLimit, RefusedBeforeAllocating) {
  // 3 values of 512 MiB (fp32 [128 Mi]): 1.5 GiB against a 1 GiB limit. The
  // process's peak memory must not grow by anything like a value's size.
  Program p = parse_mil(chain_text(int64_t(1) << 27), "big.mil", ".");
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  CompileOptions o;
  o.passes = {};
  o.max_memory = size_t(1) << 30;
  test::expect_error_containing([&] { compile(p, o); }, "memory limit");
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024) << "kB";
}

TEST(MemoryLimit, FlexibleInputShapesAreChecked) {
  Program p = parse_mil(
      "program(1.3)\n{\n    func main<ios18>(tensor<fp32, [?]> x) {\n"
      "        tensor<fp32, [?]> y = add(x = x, y = x)[name = string(\"y\")];\n    } -> (y);\n}\n",
      "flex.mil", ".");
  CompileOptions o;
  o.max_memory = size_t(64) << 20;
  o.input_shapes["x"] = {int64_t(1) << 30};  // 4 GiB
  test::expect_error_containing([&] { compile(p, o); }, "memory limit");
  o.input_shapes["x"] = {1024};
  EXPECT_NO_THROW(compile(p, o));
}

TEST(MemoryLimit, TheCliTakesMaxMemory) {
  Scene s("maxmem");
  s.mil("@model_path/weights/weight.bin");
  CliResult r = s.run({"--max-memory", "1K"});  // needs 16 + 16 + 16 bytes; 1K is plenty
  EXPECT_TRUE(Succeeded(r));
  r = s.run({"--max-memory", "40"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("needs 48 bytes"), std::string::npos) << r.err;
  for (const char* ok : {"1.5G", "512MiB", "64KB"}) EXPECT_TRUE(Succeeded(s.run({"--max-memory", ok}))) << ok;
  r = s.run({"--max-memory", "12Q"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("--max-memory"), std::string::npos) << r.err;
}

TEST(MemoryLimit, BenchRefusesBeforeMakingRandomInputs) {
  // x is fp32 [65536, 65536], 16 GiB: bench would fill it with random
  // numbers; the plan is refused first.
  const std::string dir = test::temp_dir("untrusted_bench");
  write_bytes(dir + "/huge.mil",
              "program(1.3)\n{\n    func main<ios18>(tensor<fp32, [65536, 65536]> x) {\n"
              "        tensor<fp32, [65536, 65536]> y = add(x = x, y = x)[name = string(\"y\")];\n"
              "    } -> (y);\n}\n");
  CliResult r = run_cli({"bench", dir + "/huge.mil", "--max-memory", "1G", "--runs", "1"});
  EXPECT_TRUE(IsOneLineError(r));
  EXPECT_NE(r.err.find("memory limit of 1073741824 bytes"), std::string::npos) << r.err;
  EXPECT_LT(r.max_rss_kb, 512 * 1024) << "kB";
}

// ---------------------------------------------------------------- loops

// A loop whose condition never fails (the counter only decreases) ends with a
// one-line error naming the op and the cap on both engines, never a hang:
// with --max-loop-iterations, and on the compiled engine with the default
// cap of 2^20 iterations (a second or so for this body).
TEST(Loops, EndlessWhileLoopStopsAtTheIterationCap) {
  const std::string dir = test::temp_dir("untrusted_loop");
  write_bytes(dir + "/loop.mil",
              "program(1.3)\n{\n    func main<ios18>(tensor<int32, [1]> x) {\n"
              "        tensor<int32, [1]> y = while_loop(loop_vars = (x))[name = string(\"y\")]\n"
              "            cond(tensor<int32, [1]> i) {\n"
              "                int32 big = const()[name = string(\"big\"), val = int32(1000)];\n"
              "                tensor<bool, [1]> c = less(x = i, y = big)[name = string(\"c\")];\n"
              "            } -> (c)\n"
              "            body(tensor<int32, [1]> i) {\n"
              "                int32 one = const()[name = string(\"one\"), val = int32(1)];\n"
              "                tensor<int32, [1]> d = sub(x = i, y = one)[name = string(\"d\")];\n"
              "            } -> (d);\n"
              "    } -> (y);\n}\n");
  Tensor x(DType::Int32, {1});
  write_npy(dir + "/x.npy", x);
  for (const char* engine : {"compiled", "reference"}) {
    SCOPED_TRACE(engine);
    CliResult r = run_cli({"run", dir + "/loop.mil", "--engine", engine, "--input", "x=" + dir + "/x.npy",
                           "--max-loop-iterations", "5000"},
                          60);
    EXPECT_TRUE(IsOneLineError(r)) << r.err;
    EXPECT_NE(r.err.find("loop.mil:4:"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("while_loop 'y': stopped after 5000 iterations"), std::string::npos) << r.err;
  }
  CliResult r = run_cli({"run", dir + "/loop.mil", "--input", "x=" + dir + "/x.npy"}, 120);
  EXPECT_TRUE(IsOneLineError(r)) << r.err;
  EXPECT_NE(r.err.find("stopped after 1048576 iterations"), std::string::npos) << r.err;
  // A loop that ends below the cap is unaffected.
  x.set(0, 2000);
  write_npy(dir + "/x.npy", x);
  r = run_cli({"run", dir + "/loop.mil", "--input", "x=" + dir + "/x.npy", "--max-loop-iterations", "5000"}, 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// ---------------------------------------------------------------- cancellation

// `steps` chained adds on x [n], compiled without passes: one step each.
Plan long_plan(int steps, int64_t n) {
  std::string t = "tensor<fp32, [" + std::to_string(n) + "]>";
  std::string body, prev = "x";
  for (int i = 0; i < steps; ++i) {
    std::string v = "v" + std::to_string(i);
    body += "        " + t + " " + v + " = add(x = " + prev + ", y = x)[name = string(\"" + v + "\")];\n";
    prev = v;
  }
  Program p = parse_mil("program(1.3)\n{\n    func main<ios18>(" + t + " x) {\n" + body + "    } -> (" + prev + ");\n}\n",
                        "long.mil", ".");
  CompileOptions o;
  o.passes = {};
  return compile(p, o);
}

TEST(Cancel, BeforeARunCancelsThatRunOnly) {
  Plan plan = long_plan(4, 8);
  Tensor x = make(DType::FP32, {8}, std::vector<double>(8, 1));
  plan.cancel();
  test::expect_error_containing([&] { plan.run({{"x", x}}); }, "cancelled");
  Tensor y = plan.run({{"x", x}}).at("v3");
  EXPECT_EQ(y.at(0), 5);  // 1 + 1 + 1 + 1 + 1
}

TEST(Cancel, FromAnotherThreadEndsTheRun) {
  Plan plan = long_plan(400, 1 << 16);
  Tensor x = make(DType::FP32, {1 << 16}, std::vector<double>(1 << 16, 1));
  std::atomic<bool> started{false};
  std::string error;
  int runs = 0;
  std::thread worker([&] {
    try {
      for (; runs < 100000; ++runs) {
        started = true;
        plan.run({{"x", x}});
      }
    } catch (const Error& e) {
      error = e.what();
    }
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  plan.cancel();
  worker.join();
  EXPECT_EQ(error, "error: cancelled");
  EXPECT_LT(runs, 100000);
  EXPECT_EQ(plan.run({{"x", x}}).at("v399").at(0), 401);  // usable again
}

// Ctrl-C in `milrt run` cancels the running plan: exit code 2, "error:
// cancelled", long before the run would have ended. SIGINT is sent once
// /proc says the CLI catches it (its handler is set just before the run).
TEST(Cancel, CtrlCInMilrtRunCancelsThePlan) {
  const std::string dir = test::temp_dir("untrusted_sigint");
  // 2000 chained [512, 512] matmuls: several seconds of work on any CPU.
  std::string body, prev = "x";
  for (int i = 0; i < 2000; ++i) {
    std::string v = "m" + std::to_string(i);
    body += "        tensor<fp32, [512, 512]> " + v + " = matmul(x = " + prev + ", y = x)[name = string(\"" + v + "\")];\n";
    prev = v;
  }
  write_bytes(dir + "/long.mil", "program(1.3)\n{\n    func main<ios18>(tensor<fp32, [512, 512]> x) {\n" + body +
                                     "    } -> (" + prev + ");\n}\n");
  write_npy(dir + "/x.npy", make(DType::FP32, {512, 512}, std::vector<double>(512 * 512, 1.0 / 512)));
  const char* cli = std::getenv("MILRT_TEST_CLI");
  std::string exe = cli && *cli ? cli : MILRT_CLI, input = "x=" + dir + "/x.npy", mil = dir + "/long.mil",
              err_path = dir + "/stderr.txt";
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    execl(exe.c_str(), exe.c_str(), "run", mil.c_str(), "--input", input.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  // Wait (up to 60 s) until the CLI catches SIGINT: SigCgt bit 1 (signal 2).
  const auto start = std::chrono::steady_clock::now();
  bool catching = false;
  while (!catching && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    std::string status = test::read_bytes("/proc/" + std::to_string(pid) + "/status");
    auto at = status.find("SigCgt:");
    if (at != std::string::npos) catching = (std::stoull(status.substr(at + 7), nullptr, 16) & 2) != 0;
    if (status.empty() || status.find("State:\tZ") != std::string::npos) break;  // exited
    if (!catching) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(catching) << "the CLI never installed its SIGINT handler";
  const auto sent = std::chrono::steady_clock::now();
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_EQ(test::read_bytes(err_path), "error: cancelled\n");
  EXPECT_LT(after, 2.0) << "seconds from Ctrl-C to exit";
}

}  // namespace
}  // namespace milrt
