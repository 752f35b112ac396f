// The profiler: Plan::profile() (one record per step, calls = runs, times
// consistent, FLOPs as steps() gives them), results bit-identical with it on
// or off, nothing allocated per run once on, the table and the Chrome trace
// (checked structurally), the kernel families, and `milrt run --profile
// --trace` / `milrt bench --profile`.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "milrt/mil.h"
#include "milrt/npy.h"
#include "milrt/plan.h"
#include "runtime/profile_report.h"
#include "support/test_util.h"
#include "support/tiny_training.h"
#include "test_cli_util.h"

#include "support/count_allocations.h"  // this executable's global operator new, counted

namespace milrt {
namespace {

using test::make;

// A matmul with a bias and an activation (one fused gemm), a softmax, a
// reduction and an elementwise tail: several steps of different families.
const char* kBody =
    "tensor<fp32, [4, 8]> h = matmul(x = x, y = w)[name = string(\"h\")];\n"
    "tensor<fp32, [4, 8]> b = add(x = h, y = c)[name = string(\"b\")];\n"
    "tensor<fp32, [4, 8]> s = softmax(x = b, axis = int32(-1))[name = string(\"s\")];\n"
    "tensor<fp32, [4, 8]> t = mul(x = s, y = b)[name = string(\"t\")];\n"
    "tensor<fp32, [4, 1]> r = reduce_sum(x = t, axes = tensor<int32, [1]>([1]), keep_dims = bool(true))"
    "[name = string(\"r\")];\n"
    "tensor<fp32, [8, 4]> tt = transpose(x = t, perm = tensor<int32, [2]>([1, 0]))[name = string(\"tt\")];";
const char* kParams = "tensor<fp32, [4, 16]> x, tensor<fp32, [16, 8]> w, tensor<fp32, [4, 8]> c";
const char* kOuts = "r, tt";

Program small_program() {
  Program p = parse_mil(test::program_text(kParams, kBody, kOuts), "profile.mil", ".");
  verify(p);
  return p;
}

TensorMap small_inputs() {
  TensorMap in;
  auto fill = [](Shape s, double k) {
    Tensor t(DType::FP32, s);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), std::sin(double(i) * k) * 0.5);
    return t;
  };
  in["x"] = fill({4, 16}, 0.37);
  in["w"] = fill({16, 8}, 0.11);
  in["c"] = fill({4, 8}, 0.73);
  return in;
}

TEST(Profile, OneRecordPerStepWithCallsTimesAndFlops) {
  CompileOptions o;
  o.profile = true;
  Plan plan = compile(small_program(), o);
  EXPECT_TRUE(plan.profiling());
  const TensorMap in = small_inputs();
  const int runs = 7;
  for (int i = 0; i < runs; ++i) plan.run(in);
  const auto steps = plan.steps();
  ASSERT_GE(steps.size(), 3u);
  const Plan::Profile p = plan.profile();
  EXPECT_EQ(p.runs, runs);
  ASSERT_EQ(p.steps.size(), steps.size());
  EXPECT_TRUE(p.events.empty());  // tracing off
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(steps[i].kernel);
    EXPECT_EQ(p.steps[i].kernel, steps[i].kernel);
    EXPECT_EQ(p.steps[i].ops, steps[i].ops);
    EXPECT_EQ(p.steps[i].calls, runs);
    EXPECT_GE(p.steps[i].total_ms, 0);
    EXPECT_GE(p.steps[i].median_ms, 0);
    EXPECT_LE(p.steps[i].median_ms, p.steps[i].total_ms);  // one call's time within the sum of all
    EXPECT_EQ(p.steps[i].flops, steps[i].flops);
    EXPECT_EQ(p.steps[i].bytes, steps[i].bytes);
  }
  plan.reset_profile();
  Plan::Profile z = plan.profile();
  EXPECT_EQ(z.runs, 0);
  for (auto& s : z.steps) {
    EXPECT_EQ(s.calls, 0);
    EXPECT_EQ(s.total_ms, 0);
  }
  plan.set_profiling(false);
  plan.run(in);
  EXPECT_EQ(plan.profile().runs, 0);  // off: nothing recorded
}

TEST(Profile, NeverProfiledPlanHasNoRecords) {
  Plan plan = compile(small_program());
  EXPECT_FALSE(plan.profiling());
  plan.run(small_inputs());
  EXPECT_TRUE(plan.profile().steps.empty());
  EXPECT_EQ(plan.profile().runs, 0);
}

TEST(Profile, ResultsBitIdenticalWithProfilingOnOrOff) {
  const TensorMap in = small_inputs();
  Plan off = compile(small_program());
  CompileOptions o;
  o.profile = o.trace = true;
  Plan on = compile(small_program(), o);
  const TensorMap a = off.run(in), b = on.run(in);
  for (auto& [name, t] : a) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(t.same_bytes(b.at(name)));
  }
}

TEST(Profile, NoAllocationPerRunOnceOn) {
  Plan plan = compile(small_program());
  TensorMap in = small_inputs();
  Tensor r(DType::FP32, {4, 1}), tt(DType::FP32, {8, 4});
  for (auto& [name, t] : in) plan.bind(name, t);
  plan.bind("r", r);
  plan.bind("tt", tt);
  plan.run();  // kernels' scratch grows on a first run
  plan.set_profiling(true, /*trace=*/true);
  EXPECT_EQ(allocations_during([&] { for (int i = 0; i < 20; ++i) plan.run(); }), 0);
  EXPECT_EQ(plan.profile().runs, 20);
}

TEST(Profile, TraceJsonHasOneCompleteEventPerStepPerRun) {
  CompileOptions o;
  o.trace = true;
  Plan plan = compile(small_program(), o);
  const TensorMap in = small_inputs();
  const int runs = 3;
  for (int i = 0; i < runs; ++i) plan.run(in);
  const Plan::Profile p = plan.profile();
  ASSERT_EQ(p.events.size(), p.steps.size() * runs);
  std::vector<TraceSpan> spans;
  append_trace_spans(spans, p, "plan");
  const std::string dir = test::temp_dir("profile_trace");
  const std::string path = dir + "/t.json";
  write_chrome_trace(path, spans);
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f);  // throws if not JSON
  ASSERT_TRUE(j.contains("traceEvents"));
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::map<std::string, int> per_name;
  std::set<int> tids;
  size_t x = 0;
  for (auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph"));
    ASSERT_TRUE(e.contains("pid"));
    ASSERT_TRUE(e.contains("tid"));
    if (e["ph"] != "X") {
      EXPECT_EQ(e["ph"], "M");
      continue;
    }
    ++x;
    EXPECT_TRUE(e["ts"].is_number());
    EXPECT_TRUE(e["dur"].is_number());
    EXPECT_GE(e["ts"].get<double>(), 0);
    EXPECT_GE(e["dur"].get<double>(), 0);
    per_name[e["name"].get<std::string>()]++;
    tids.insert(e["tid"].get<int>());
    EXPECT_TRUE(e["args"]["step"].is_number_integer());
  }
  EXPECT_EQ(x, p.steps.size() * runs);
  std::map<std::string, int> want;
  for (auto& s : plan.steps()) want[s.kernel] += runs;
  EXPECT_EQ(per_name, want);
  EXPECT_EQ(tids.size(), 1u);  // steps run on the calling thread
  EXPECT_EQ(*tids.begin(), int(Plan::trace_thread_id()));
  // Events of a run come in step order, each after the previous one ends.
  for (size_t i = 1; i < p.steps.size(); ++i)
    EXPECT_GE(p.events[i].start_ns, p.events[i - 1].start_ns + p.events[i - 1].dur_ns);
}

TEST(Profile, TableListsEveryStepSortedByTime) {
  CompileOptions o;
  o.profile = true;
  Plan plan = compile(small_program(), o);
  for (int i = 0; i < 3; ++i) plan.run(small_inputs());
  ProfileTableOptions to;
  to.peak_gflops = 100;
  const std::string t = profile_table(plan.profile(), to);
  for (auto& s : plan.steps()) EXPECT_NE(t.find(s.kernel), std::string::npos) << t;
  EXPECT_NE(t.find("GFLOP/s"), std::string::npos);
  EXPECT_NE(t.find("FLOPs"), std::string::npos);
  EXPECT_NE(t.find("bytes"), std::string::npos);
  EXPECT_NE(t.find("peak"), std::string::npos);
  EXPECT_NE(t.find("3 runs"), std::string::npos) << t;
}

TEST(Profile, KernelFamilies) {
  EXPECT_EQ(kernel_family("gemm"), "matmul");
  EXPECT_EQ(kernel_family("gemm[B packed][bf16]+bias+silu+residual"), "matmul");
  EXPECT_EQ(kernel_family("conv:gemm+relu"), "matmul");
  EXPECT_EQ(kernel_family("lstm:gemm"), "matmul");
  EXPECT_EQ(kernel_family("attention"), "attention");
  EXPECT_EQ(kernel_family("softmax"), "attention");
  EXPECT_EQ(kernel_family("rms_norm"), "norms");
  EXPECT_EQ(kernel_family("layer_norm"), "norms");
  EXPECT_EQ(kernel_family("rms_norm_grad"), "norms");
  EXPECT_EQ(kernel_family("rope"), "elementwise");
  EXPECT_EQ(kernel_family("elementwise:3 ops"), "elementwise");
  EXPECT_EQ(kernel_family("binary:add"), "elementwise");
  EXPECT_EQ(kernel_family("reduce:reduce_sum"), "elementwise");
  EXPECT_EQ(kernel_family("transpose"), "conversions/packing");
  EXPECT_EQ(kernel_family("copy:concat"), "conversions/packing");
  EXPECT_EQ(kernel_family("cast"), "conversions/packing");
  EXPECT_EQ(kernel_family("topk"), "other");
  Plan::Profile p;
  p.steps.push_back({"gemm", {}, 1, 2.0, 2.0, 0, 0});
  p.steps.push_back({"binary:add", {}, 1, 0.5, 0.5, 0, 0});
  p.steps.push_back({"gemm+bias", {}, 1, 1.0, 1.0, 0, 0});
  auto f = family_totals(p);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].first, "matmul");
  EXPECT_DOUBLE_EQ(f[0].second, 3.0);
  EXPECT_EQ(f[1].first, "elementwise");
}

// Training with TrainOptions::profile: the same weights as without, the
// split per kernel family with the trainer's own phases, the plans'
// profiles from the second step on, trace spans of the trainer's phases.
TEST(ProfileTrain, FamiliesAndBitIdenticalWeights) {
  const std::string dir = test::temp_dir("profile_train");
  std::shared_ptr<const llm::Tokenizer> tok = llm::byte_tokenizer();
  llm::LlamaTaskOptions to = test::tiny_task_options(dir);
  llm::TrainOptions opt = test::tiny_train_options(4);
  opt.accum = 2;
  TensorMap w_off = llm::init_llama_weights(test::tiny_llama_config(), 3).tensors, w_on = w_off;
  llm::TrainTask task_off = llm::llama_task(test::tiny_llama_config(), tok, to);
  llm::TrainLog off = llm::train(task_off, opt, w_off);
  EXPECT_TRUE(off.family_ms.empty());
  // The forward part is timed inside the step plan's runs, up to the loss.
  EXPECT_TRUE(off.ms_fwd_in_step);
  EXPECT_GT(off.ms_fwd, 0);
  EXPECT_LT(off.ms_fwd, off.ms_fwd_bwd);
  opt.profile = opt.trace = true;
  llm::TrainTask task_on = llm::llama_task(test::tiny_llama_config(), tok, to);
  llm::TrainLog on = llm::train(task_on, opt, w_on);
  for (auto& [name, t] : w_off) EXPECT_TRUE(t.same_bytes(w_on.at(name))) << name;
  ASSERT_EQ(off.rows.size(), on.rows.size());
  for (size_t i = 0; i < off.rows.size(); ++i) EXPECT_EQ(off.rows[i].loss, on.rows[i].loss);

  EXPECT_EQ(on.profiled_steps, 3);  // the first step warms up
  ASSERT_FALSE(on.step_profile.steps.empty());
  EXPECT_EQ(on.step_profile.runs, 3 * 2);
  for (auto& s : on.step_profile.steps) EXPECT_EQ(s.calls, 3 * 2);
  std::set<std::string> families;
  for (auto& [f, ms] : on.family_ms) {
    families.insert(f);
    EXPECT_GE(ms, 0) << f;
  }
  for (const char* f : {"matmul", "optimizer", "data", "accumulate", "elementwise"}) EXPECT_TRUE(families.count(f)) << f;
  for (size_t i = 1; i < on.family_ms.size(); ++i) EXPECT_GE(on.family_ms[i - 1].second, on.family_ms[i].second);
  EXPECT_EQ(on.step_profile.events.size(), on.step_profile.steps.size() * 6);
  std::map<std::string, int> phases;
  for (auto& s : on.phase_spans) phases[s.name]++;
  EXPECT_EQ(phases["optimizer"], 3);
  EXPECT_EQ(phases["data"], 6);
  EXPECT_EQ(phases["accumulate"], 3);  // every micro-step but a step's first, which writes the step's gradients
  const std::string report = llm::efficiency_report(task_on, opt, on);
  EXPECT_NE(report.find("by kernel family"), std::string::npos) << report;
  EXPECT_NE(report.find("matmul"), std::string::npos) << report;
}

struct CliFiles {
  std::string dir, mil;
  std::vector<std::string> inputs;  // --input NAME=FILE pairs
};
CliFiles write_cli_files(const std::string& tag) {
  CliFiles c;
  c.dir = test::temp_dir(tag);
  c.mil = c.dir + "/p.mil";
  std::ofstream(c.mil) << test::program_text(kParams, kBody, kOuts);
  for (auto& [name, t] : small_inputs()) {
    write_npy(c.dir + "/" + name + ".npy", t);
    c.inputs.push_back("--input");
    c.inputs.push_back(name + "=" + c.dir + "/" + name + ".npy");
  }
  return c;
}

TEST(ProfileCli, RunProfilePrintsTableAndTraceIsJson) {
  CliFiles c = write_cli_files("profile_cli");
  const std::string trace = c.dir + "/trace.json";
  std::vector<std::string> args{"run", c.mil};
  args.insert(args.end(), c.inputs.begin(), c.inputs.end());
  test::CliResult plain = test::run_cli(args);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  args.insert(args.end(), {"--profile", "--trace", trace});
  test::CliResult r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, plain.out);  // the outputs' lines are the same
  Plan plan = compile(small_program());
  for (auto& s : plan.steps()) EXPECT_NE(r.err.find(s.kernel), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("GFLOP/s"), std::string::npos) << r.err;
  std::ifstream f(trace);
  ASSERT_TRUE(f.good());
  nlohmann::json j = nlohmann::json::parse(f);
  size_t x = 0;
  for (auto& e : j["traceEvents"]) x += e["ph"] == "X";
  EXPECT_EQ(x, plan.steps().size());
}

TEST(ProfileCli, BenchProfileCountsTimedRuns) {
  CliFiles c = write_cli_files("profile_bench");
  std::vector<std::string> args{"bench", c.mil, "--runs", "5", "--profile"};
  test::CliResult r = test::run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("5 runs"), std::string::npos) << r.err;
}

TEST(ProfileCli, BenchTrainProfilePrintsTablesAndFamilies) {
  const std::string trace = test::temp_dir("profile_bench_train") + "/t.json";
  test::CliResult r = test::run_cli({"bench", "train", "--config", "tiny", "--steps", "2", "--accum", "2", "--profile",
                                     "--trace", trace}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("profile of the step plan"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("profile of the eval plan"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("by kernel family"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("matmul"), std::string::npos) << r.out;
  std::ifstream f(trace);
  nlohmann::json j = nlohmann::json::parse(f);
  std::set<std::string> cats;
  for (auto& e : j["traceEvents"])
    if (e["ph"] == "X") cats.insert(e["cat"].get<std::string>());
  EXPECT_EQ(cats, (std::set<std::string>{"step plan", "eval plan", "trainer"}));
}

TEST(ProfileCli, BadTracePathIsOneLineAndExit2) {
  CliFiles c = write_cli_files("profile_bad");
  std::vector<std::string> args{"run", c.mil};
  args.insert(args.end(), c.inputs.begin(), c.inputs.end());
  for (const std::string& bad : {c.dir + "/no/such/dir/t.json", c.dir}) {
    SCOPED_TRACE(bad);
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--trace", bad});
    test::CliResult r = test::run_cli(a);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;  // refused before running
  }
}

}  // namespace
}  // namespace milrt
