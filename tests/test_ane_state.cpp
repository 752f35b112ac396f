// Stateful functions on the Neural Engine backend (issue 19): a KV-cache
// decode step partitioned into engine programs around the cache's one
// persistent buffer, run for several calls against the reference executor;
// the buffer written in place and read zero-copy; a whole-value write and a
// read of contents that are overwritten later; the partition printout; the
// error for a state the engine cannot hold.
//
// Tolerance: the programs are fp16 and the reference executor rounds every
// op's result to fp16, as the simulated device does, so the partitioned run
// computes the same ops on the same fp16 values (values cross program
// boundaries in fp16, unchanged). What may differ is summation order inside
// no op and nothing else, so the outputs are expected bit for bit; the bound
// allows one fp16 rounding (2^-11 relative) on each of the attention chain's
// ~8 ops on values up to ~4: |diff| <= 8 * 2^-11 * (1 + |ref|) ~ 4e-3 * (1 + |ref|).
#include <cmath>
#include <random>

#include "ane/executor.h"
#include "ane/partition.h"
#include "ane/sim_device.h"
#include "test_cli_util.h"

namespace milrt::test {
namespace {

using namespace milrt::ane;

constexpr double kTol = 8.0 / 2048;
constexpr int kCalls = 6;
constexpr int64_t kSeq = 16, kHeads = 2, kHd = 16, kDim = kHeads * kHd;

std::string weights(const std::string& name, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-0.3, 0.3);
  std::string s = "    tensor<fp16, [32, 32]> " + name + " = const()[name = string(\"" + name +
                  "\"), val = tensor<fp16, [32, 32]>([";
  for (int r = 0; r < kDim; ++r) {
    s += r ? ", [" : "[";
    for (int c = 0; c < kDim; ++c) s += (c ? ", " : "") + std::to_string(u(rng));
    s += "]";
  }
  return s + "])];\n";
}

// One decode step of single-token attention over a KV cache held as two
// states [1, heads, seq, head_dim]: the new key and value rows are written at
// row `pos` with slice_update (begin/end built from pos on the host, as
// milrt's llama decoder does), then the query attends to the whole cache
// through `mask` (0 up to pos, -30000 after).
std::string kv_program() {
  std::mt19937 rng(11);
  std::string cache = "tensor<fp16, [1, 2, 16, 16]>";
  std::string t =
      "program(1.3)\n{\n  func main<ios18>(tensor<fp16, [1, 1, 32]> x, tensor<int32, [1]> pos, "
      "tensor<fp16, [1, 1, 1, 16]> mask, state<" + cache + "> kc, state<" + cache + "> vc) {\n"
      "    tensor<int32, [1]> one = const()[name = string(\"one\"), val = tensor<int32, [1]>([1])];\n"
      "    tensor<int32, [1]> pos1 = add(x = pos, y = one)[name = string(\"pos1\")];\n"
      "    tensor<int32, [2]> bh = const()[name = string(\"bh\"), val = tensor<int32, [2]>([0, 0])];\n"
      "    tensor<int32, [1]> bt = const()[name = string(\"bt\"), val = tensor<int32, [1]>([0])];\n"
      "    tensor<int32, [2]> eh = const()[name = string(\"eh\"), val = tensor<int32, [2]>([1, 2])];\n"
      "    tensor<int32, [1]> et = const()[name = string(\"et\"), val = tensor<int32, [1]>([16])];\n"
      "    tensor<int32, [4]> b = concat(values = (bh, pos, bt), axis = int32(0), interleave = bool(false))"
      "[name = string(\"b\")];\n"
      "    tensor<int32, [4]> e = concat(values = (eh, pos1, et), axis = int32(0), interleave = bool(false))"
      "[name = string(\"e\")];\n" +
      weights("wq", rng) + weights("wk", rng) + weights("wv", rng);
  for (const char* n : {"q", "k", "v"}) {
    const std::string s(n);
    t += "    tensor<fp16, [1, 1, 32]> " + s + " = matmul(x = x, y = w" + s +
         ", transpose_x = bool(false), transpose_y = bool(false))[name = string(\"" + s + "\")];\n"
         "    tensor<fp16, [1, 1, 2, 16]> " + s + "h = reshape(x = " + s +
         ", shape = tensor<int32, [4]>([1, 1, 2, 16]))[name = string(\"" + s + "h\")];\n"
         "    tensor<fp16, [1, 2, 1, 16]> " + s + "t = transpose(x = " + s +
         "h, perm = tensor<int32, [4]>([0, 2, 1, 3]))[name = string(\"" + s + "t\")];\n";
  }
  for (const char* n : {"k", "v"}) {
    const std::string s(n);
    t += "    " + cache + " " + s + "_old = read_state(input = " + s + "c)[name = string(\"" + s + "_old\")];\n"
         "    " + cache + " " + s + "_new = slice_update(x = " + s + "_old, update = " + s +
         "t, begin = b, end = e)[name = string(\"" + s + "_new\")];\n"
         "    " + cache + " " + s + "_now = coreml_update_state(state = " + s + "c, value = " + s +
         "_new)[name = string(\"" + s + "_now\")];\n";
  }
  t += "    tensor<fp16, [1, 2, 1, 16]> sc = matmul(x = qt, y = k_now, transpose_x = bool(false), "
       "transpose_y = bool(true))[name = string(\"sc\")];\n"
       "    tensor<fp16, [1, 2, 1, 16]> ss = mul(x = sc, y = fp16(0.25))[name = string(\"ss\")];\n"
       "    tensor<fp16, [1, 2, 1, 16]> sm = add(x = ss, y = mask)[name = string(\"sm\")];\n"
       "    tensor<fp16, [1, 2, 1, 16]> a = softmax(x = sm, axis = int32(-1))[name = string(\"a\")];\n"
       "    tensor<fp16, [1, 2, 1, 16]> o = matmul(x = a, y = v_now, transpose_x = bool(false), "
       "transpose_y = bool(false))[name = string(\"o\")];\n"
       "    tensor<fp16, [1, 1, 2, 16]> ot = transpose(x = o, perm = tensor<int32, [4]>([0, 2, 1, 3]))[name = string(\"ot\")];\n"
       "    tensor<fp16, [1, 1, 32]> y = reshape(x = ot, shape = tensor<int32, [3]>([1, 1, 32]))[name = string(\"y\")];\n"
       "  } -> (y);\n}\n";
  return t;
}

Program parse(const std::string& text) {
  Program p = parse_mil(text, "state.mil", ".");
  verify(p);
  return p;
}

TensorMap decode_inputs(int pos, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> x(kDim), mask(kSeq);
  for (auto& v : x) v = u(rng);
  for (int j = 0; j < kSeq; ++j) mask[size_t(j)] = j <= pos ? 0 : -30000;
  return {{"x", make(DType::FP16, {1, 1, kDim}, x)},
          {"pos", make(DType::Int32, {1}, {double(pos)})},
          {"mask", make(DType::FP16, {1, 1, 1, kSeq}, mask)}};
}

// Largest |got - want| / (1 + |want|) over all elements.
double worst(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  double w = 0;
  for (int64_t i = 0; i < want.numel() && got.numel() == want.numel(); ++i)
    w = std::max(w, std::fabs(got.at(size_t(i)) - want.at(size_t(i))) / (1 + std::fabs(want.at(size_t(i)))));
  return w;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.at(size_t(i))));
  return m;
}

TEST(AneState, KvCacheDecodeMatchesTheReferenceOverCalls) {
  Program p = parse(kv_program());
  Partition part = partition(p);
  // [pos1, b, e] on the host (int32), [q, k, v] on the engine, both cache
  // writes in one host step, the attention on the engine.
  ASSERT_EQ(part.steps.size(), 4u);
  EXPECT_EQ(part.steps[0].kind, Step::Kind::Host);
  EXPECT_EQ(part.steps[1].kind, Step::Kind::Engine);
  EXPECT_EQ(part.steps[2].kind, Step::Kind::StateWrite);
  EXPECT_EQ(part.steps[3].kind, Step::Kind::Engine);
  EXPECT_EQ(part.engine_programs(), 2u);
  EXPECT_EQ(part.host_steps(), 2u);
  ASSERT_EQ(part.steps[2].writes.size(), 2u);
  EXPECT_TRUE(part.steps[2].writes[0].in_place && part.steps[2].writes[1].in_place);
  EXPECT_EQ(part.state("kc").step, 3u);
  EXPECT_EQ(part.state("vc").step, 3u);

  SimDevice sim;
  Executor ex(part, sim.table());
  TensorMap ref_states;
  std::mt19937 rng(5);
  double w = 0;
  for (int pos = 0; pos < kCalls; ++pos) {
    TensorMap in = decode_inputs(pos, rng);
    TensorMap got = ex.run(in);
    TensorMap want = run_reference(p, "main", in, ref_states);
    ASSERT_GT(max_abs(want.at("y")), 0.05) << "a degenerate output would hide errors";
    w = std::max(w, worst(got.at("y"), want.at("y")));
    EXPECT_LE(worst(got.at("y"), want.at("y")), kTol) << "call " << pos;
  }
  for (const char* s : {"kc", "vc"}) {
    Tensor got = ex.state(s), want = ref_states.at(s);
    EXPECT_LE(worst(got, want), kTol) << s;
    // Rows [0, kCalls) of every head were written, the rest is still zero.
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t r = 0; r < kSeq; ++r) {
        double row = 0;
        for (int64_t d = 0; d < kHd; ++d) row += std::fabs(got.at(size_t((h * kSeq + r) * kHd + d)));
        EXPECT_EQ(row > 0, r < kCalls) << s << " head " << h << " row " << r;
      }
  }
  std::printf("worst |diff| / (1 + |ref|) over %d calls: %.3g (bound %.3g)\n", kCalls, w, kTol);
  EXPECT_EQ(ex.stats().compiles, 2u);  // each program once, for all calls
}

TEST(AneState, TheCacheIsWrittenInPlaceAndReadZeroCopy) {
  Program p = parse(kv_program());
  Partition part = partition(p);
  SimDevice sim;
  Executor ex(part, sim.table());
  const void* k_at = ex.state_buffers().data("kc");
  const void* v_at = ex.state_buffers().data("vc");
  std::mt19937 rng(5);
  for (int pos = 0; pos < kCalls; ++pos) {
    ex.run(decode_inputs(pos, rng));
    EXPECT_EQ(ex.state_buffers().data("kc"), k_at);
    EXPECT_EQ(ex.state_buffers().data("vc"), v_at);
  }
  // Only the projection program's input is ever copied to the device; the
  // attention program reads its surface, states included, where it lies.
  EXPECT_EQ(sim.input_bytes_written(), size_t(kCalls) * part.steps[1].engine.input.bytes());
  // No whole-state copy: each call writes one key row and one value row per head.
  EXPECT_EQ(ex.stats().state_copy_bytes, 0u);
  EXPECT_EQ(ex.stats().state_write_bytes, size_t(kCalls) * 2 * kHeads * kHd * 2);
  // The attention program's own operands (q, mask) are all that is packed
  // around the states each call.
  const Packing& in = part.steps[3].engine.input;
  size_t others = 0;
  for (auto& s : in.slots)
    if (!part.views.count(s.name)) others += size_t(s.channels * in.S) * 2;
  EXPECT_EQ(ex.stats().packed_bytes, size_t(kCalls) * (part.steps[1].engine.input.bytes() + others));
  EXPECT_EQ(others, 192u);  // q (2 rows) and the mask (1 row), each padded to S = 32
  EXPECT_EQ(ex.state_buffers().bytes("kc"), 2048u);
}

// A device without shared memory (the macOS table today) copies the whole
// surface in each call, and computes the same.
TEST(AneState, WithoutSharedSurfacesTheStatesAreCopiedInEachCall) {
  Program p = parse(kv_program());
  Partition part = partition(p);
  SimDevice sim, plain_sim;
  milrt_ane_device plain = *plain_sim.table();
  plain.create_surface = nullptr, plain.free_surface = nullptr, plain.bind_input = nullptr;
  Executor shared(part, sim.table()), copied(part, &plain);
  std::mt19937 rng(8);
  for (int pos = 0; pos < 3; ++pos) {
    TensorMap in = decode_inputs(pos, rng);
    EXPECT_EQ(worst(copied.run(in).at("y"), shared.run(in).at("y")), 0.0) << "call " << pos;
  }
  EXPECT_EQ(copied.stats().state_copy_bytes, 3 * part.steps[3].engine.input.bytes());
  EXPECT_EQ(plain_sim.input_bytes_written(), 3 * (part.steps[1].engine.input.bytes() + part.steps[3].engine.input.bytes()));
}

// acc += x, written whole (the new value is an engine result, not a slice
// of the state), with `a` (the contents before the write) read after it.
TEST(AneState, WholeWritesAndReadsOfOverwrittenContentsMatchTheReference) {
  Program p = parse(
      "program(1.3)\n{\n  func main<ios18>(tensor<fp16, [1, 4, 1, 32]> x, state<tensor<fp16, [1, 4, 1, 32]>> acc) {\n"
      "    tensor<fp16, [1, 4, 1, 32]> a = read_state(input = acc)[name = string(\"a\")];\n"
      "    tensor<fp16, [1, 4, 1, 32]> s = add(x = a, y = x)[name = string(\"s\")];\n"
      "    tensor<fp16, [1, 4, 1, 32]> u = coreml_update_state(state = acc, value = s)[name = string(\"u\")];\n"
      "    tensor<fp16, [1, 4, 1, 32]> d = sub(x = u, y = a)[name = string(\"d\")];\n"
      "    tensor<fp16, [1, 4, 1, 32]> y = mul(x = d, y = u)[name = string(\"y\")];\n"
      "  } -> (y, a);\n}\n");
  Partition part = partition(p);
  ASSERT_EQ(part.steps.size(), 3u);  // [s], write acc, [d, y]
  EXPECT_FALSE(part.steps[1].writes.at(0).in_place);
  EXPECT_EQ(part.steps[1].save_before, std::vector<std::string>{"a"});
  EXPECT_EQ(part.state("acc").step, 0u);
  SimDevice sim;
  Executor ex(part, sim.table());
  TensorMap ref_states;
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int call = 0; call < 4; ++call) {
    std::vector<double> x(128);
    for (auto& v : x) v = u(rng);
    TensorMap in = {{"x", make(DType::FP16, {1, 4, 1, 32}, x)}};
    TensorMap got = ex.run(in), want = run_reference(p, "main", in, ref_states);
    for (const char* o : {"y", "a"}) EXPECT_LE(worst(got.at(o), want.at(o)), kTol) << o << " call " << call;
  }
  EXPECT_LE(worst(ex.state("acc"), ref_states.at("acc")), kTol);
  EXPECT_GT(max_abs(ref_states.at("acc")), 1.0);
}

TEST(AneState, InspectNamesTheStateHandling) {
  const std::string file = temp_dir("ane_state") + "/kv.mil";
  std::ofstream(file) << kv_program();
  CliResult r = run_cli({"inspect", file, "--target", "ane"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line :
       {"2 engine programs, 2 host steps",
        "state kc: tensor<fp16, [1, 2, 16, 16]>, one persistent fp16 buffer (2048 bytes) in channels 2-33 of step 3's "
        "input",
        "state vc: tensor<fp16, [1, 2, 16, 16]>, one persistent fp16 buffer (2048 bytes) in channels 35-66 of step 3's "
        "input",
        "step 2: host, writes state buffers, 4 ops",
        "on the host: 'k_now' coreml_update_state of a slice_update: writes only the update into state 'kc''s "
        "buffer, in place",
        "state kc: read in place, as 'k_now'", "packs: qt, k_now, mask, v_now"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

TEST(AneState, AStateTheEngineCannotHoldIsAOneLineError) {
  Program p = parse(
      "program(1.3)\n{\n  func main<ios18>(tensor<fp16, [1, 1, 1, 16]> x, state<tensor<fp16, [1, 1, 20000, 16]>> big) {\n"
      "    tensor<fp16, [1, 1, 20000, 16]> a = read_state(input = big)[name = string(\"a\")];\n"
      "    tensor<fp16, [1, 1, 20000, 16]> s = add(x = a, y = x)[name = string(\"s\")];\n"
      "    tensor<fp16, [1, 1, 20000, 16]> u = coreml_update_state(state = big, value = s)[name = string(\"u\")];\n"
      "  } -> (u);\n}\n");
  for (const char* fragment : {"state 'big'", "has a dim above 16384, which the engine cannot hold"})
    expect_error_containing([&] { partition(p); }, fragment);
}

}  // namespace
}  // namespace milrt::test
