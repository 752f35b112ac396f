// Zero-copy bindings: Plan::bind + Plan::run() read and write caller memory,
// give the results run(inputs) gives, and allocate nothing (global operator
// new is counted here); plus the fp16 <-> fp32 conversions at a plan's edges.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>

#include <sys/mman.h>

#include "milrt/mil.h"
#include "milrt/plan.h"
#include "support/test_util.h"

#include "support/count_allocations.h"  // this executable's global operator new, counted

namespace milrt {
namespace {

using test::make;
using test::values;

Program parse(const std::string& text) {
  Program p = parse_mil(text, "bind.mil", ".");
  verify(p);
  return p;
}

// Elementwise ops, a matmul and a reduction, fp16 as declared (stored fp32 in the plan).
Program mlp(const std::string& dt) {
  return parse(test::program_text(
      "tensor<" + dt + ", [4, 16]> x, tensor<" + dt + ", [16, 8]> w, tensor<int32, [4, 8]> k",
      "tensor<" + dt + ", [4, 8]> h = matmul(x = x, y = w)[name = string(\"h\")];\n"
      "tensor<" + dt + ", [4, 8]> s = sigmoid(x = h)[name = string(\"s\")];\n"
      "tensor<" + dt + ", [4, 8]> t = mul(x = s, y = h)[name = string(\"t\")];\n"
      "tensor<" + dt + ", [4, 8]> e = exp(x = t)[name = string(\"e\")];\n"
      "tensor<int32, [4, 8]> k2 = add(x = k, y = k)[name = string(\"k2\")];\n"
      "tensor<bool, [4, 8]> pos = greater(x = t, y = " + dt + "(0.1))[name = string(\"pos\")];\n"
      "tensor<" + dt + ", [4, 1]> r = reduce_sum(x = e, axes = tensor<int32, [1]>([1]), keep_dims = bool(true))"
      "[name = string(\"r\")];",
      "r, k2, pos, t"));
}

Tensor random_tensor(std::mt19937& rng, DType dt, const Shape& s) {
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor t(dt, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), dt == DType::Int32 ? std::round(u(rng) * 50) : u(rng));
  return t;
}

TEST(PlanBindings, BoundRunMatchesRunWithInputsAndAllocatesNothing) {
  for (const char* dt : {"fp32", "fp16"}) {
    SCOPED_TRACE(dt);
    const DType declared = std::string(dt) == "fp16" ? DType::FP16 : DType::FP32;
    Program p = mlp(dt);
    Plan plan = compile(p);
    std::mt19937 rng(3);
    TensorMap in{{"x", random_tensor(rng, declared, {4, 16})},
                 {"w", random_tensor(rng, declared, {16, 8})},
                 {"k", random_tensor(rng, DType::Int32, {4, 8})}};
    TensorMap want = plan.run(in);

    // Caller memory in the storage dtypes: fp32, int32, bool.
    TensorMap mem, outs;
    for (auto& [name, t] : in) mem[name] = t.cast(Plan::storage_dtype(t.dtype()));
    for (auto& port : plan.outputs()) outs[port.name] = Tensor(Plan::storage_dtype(port.dtype), port.shape);
    for (auto& [name, t] : mem) plan.bind(name, t);
    plan.bind("r", outs["r"].mutable_ptr<float>());
    plan.bind("k2", outs["k2"].mutable_ptr<int32_t>());
    plan.bind("pos", reinterpret_cast<bool*>(outs["pos"].mutable_ptr<uint8_t>()));
    plan.bind("t", outs["t"]);

    // The gemm's per-thread scratch grows on a plan's first run with a shape
    // (the run above); every later run, bound, allocates nothing.
    EXPECT_EQ(allocations_during([&] { plan.run(); }), 0);
    EXPECT_GT(allocations_during([&] { plan.run(in); }), 0);  // the counter counts: run(inputs) makes tensors
    EXPECT_EQ(allocations_during([&] { for (int i = 0; i < 3; ++i) plan.run(); }), 0);
    for (auto& [name, w] : want) {
      SCOPED_TRACE(name);
      // Bound outputs hold the storage values; run(inputs) rounds to the declared dtype.
      EXPECT_TRUE(outs[name].cast(w.dtype()).same_bytes(w));
    }
    // New input values in the same memory are picked up without rebinding.
    Tensor x2 = random_tensor(rng, declared, {4, 16});
    std::memcpy(mem["x"].mutable_data(), x2.cast(DType::FP32).data(), mem["x"].nbytes());
    in["x"] = x2;
    plan.run();
    TensorMap want2 = plan.run(in);  // plan memory, bindings untouched
    EXPECT_TRUE(outs["r"].cast(declared).same_bytes(want2.at("r")));
    // Bindings survive run(inputs).
    std::memset(outs["r"].mutable_data(), 0, outs["r"].nbytes());
    plan.run();
    EXPECT_TRUE(outs["r"].cast(declared).same_bytes(want2.at("r")));
  }
}

TEST(PlanBindings, AnElementwiseProgramAllocatesNothingFromItsFirstRun) {
  Program p = parse(test::program_text("tensor<fp16, [64]> x, tensor<fp16, [64]> y",
                                       "tensor<fp16, [64]> a = add(x = x, y = y)[name = string(\"a\")];\n"
                                       "tensor<fp16, [64]> b = tanh(x = a)[name = string(\"b\")];\n"
                                       "tensor<fp16, [64]> z = mul(x = b, y = x)[name = string(\"z\")];",
                                       "z"));
  Plan plan = compile(p);
  std::vector<float> x(64), y(64), z(64, -1);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = 0.1f * float(i - 30), y[size_t(i)] = 0.05f * float(i % 7);
  plan.bind("x", x.data());
  plan.bind("y", y.data());
  plan.bind("z", z.data());
  EXPECT_EQ(allocations_during([&] { plan.run(); }), 0);
  for (int i = 0; i < 64; ++i) {
    double want = std::tanh(double(x[size_t(i)]) + double(y[size_t(i)])) * double(x[size_t(i)]);
    EXPECT_NEAR(z[size_t(i)], want, 1e-6) << i;  // fp32 math, no fp16 rounding inside a plan
  }
}

TEST(PlanBindings, MismatchesAreClearErrors) {
  Program p = mlp("fp16");
  Plan plan = compile(p);
  std::vector<float> f(64);
  std::vector<int32_t> i(64);
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  // fp16 values are stored as fp32: fp16 memory cannot be bound.
  EXPECT_NE(message([&] { plan.bind("x", i.data(), DType::FP16); }).find("stores it as fp32 (declared fp16)"),
            std::string::npos);
  EXPECT_NE(message([&] { plan.bind("k", f.data()); }).find("stores it as int32"), std::string::npos);
  EXPECT_NE(message([&] { plan.bind("nope", f.data()); }).find("no input or output"), std::string::npos);
  Tensor wrong(DType::FP32, {16, 4});
  EXPECT_NE(message([&] { plan.bind("x", wrong); }).find("shape"), std::string::npos);
  EXPECT_NE(message([&] { plan.bind("x", reinterpret_cast<float*>(reinterpret_cast<char*>(f.data()) + 1)); })
                .find("aligned"),
            std::string::npos);
  // run() needs every input bound.
  plan.bind("x", f.data());
  EXPECT_NE(message([&] { plan.run(); }).find("'w' is not"), std::string::npos);
  plan.unbind("x");
  EXPECT_NE(message([&] { plan.run(); }).find("is not"), std::string::npos);
}

// Memory the process cannot write: a page made read-only after filling it.
class ReadOnlyPage final : public Buffer {
 public:
  explicit ReadOnlyPage(const std::vector<float>& v) {
    p_ = static_cast<uint8_t*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    std::memcpy(p_, v.data(), v.size() * sizeof(float));
    mprotect(p_, kBytes, PROT_READ);
  }
  ~ReadOnlyPage() override { munmap(p_, kBytes); }
  const uint8_t* data() const override { return p_; }
  uint8_t* mutable_data() override { return nullptr; }
  size_t size() const override { return kBytes; }
 private:
  static constexpr size_t kBytes = 4096;
  uint8_t* p_;
};

// An input dying at an elementwise op could lend its slot to the op's output
// if it lived in the arena: bound inputs never do, so read-only memory works
// (a write would fault).
TEST(PlanBindings, ReadOnlyInputsAreNeverWritten) {
  Program p = parse(test::program_text("tensor<fp32, [4, 8]> x",
                                       "tensor<fp32, [4, 8]> e = exp(x = x)[name = string(\"e\")];\n"
                                       "tensor<fp32, [4, 8]> y = mul(x = e, y = fp32(2))[name = string(\"y\")];",
                                       "y"));
  Plan plan = compile(p);
  std::vector<float> v(32);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * float(i) - 1.0f;
  Tensor x(DType::FP32, {4, 8}, std::make_shared<ReadOnlyPage>(v), 0);
  EXPECT_THROW(x.mutable_data(), Error);
  std::vector<float> y(32);
  plan.bind_input("x", x);
  plan.bind("y", y.data());
  plan.run();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_FLOAT_EQ(y[i], 2.0f * std::exp(v[i])) << i;
  std::string msg;
  try {
    plan.bind_input("y", x);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("no input"), std::string::npos) << msg;
}

TEST(PlanBindings, OutputsThatAreNotComputedByTheirOwnOpAreCopied) {
  // x is a plan input that the function also returns; a is computed into the bound memory.
  Program p = parse(test::program_text("tensor<fp32, [8]> x",
                                       "tensor<fp32, [8]> a = relu(x = x)[name = string(\"a\")];", "a, x"));
  Plan plan = compile(p);
  std::vector<float> x(8), a(8, 7);
  for (int i = 0; i < 8; ++i) x[size_t(i)] = float(i) - 3.5f;
  plan.bind("x", x.data());
  plan.bind("a", a.data());
  plan.run();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a[size_t(i)], std::max(0.0f, x[size_t(i)]));
  TensorMap out = plan.run({{"x", make(DType::FP32, {8}, std::vector<double>(x.begin(), x.end()))}});
  EXPECT_EQ(values(out.at("x")), std::vector<double>(x.begin(), x.end()));
}

TEST(PlanBindings, EdgeConversionsRoundLikeACast) {
  // fp16 -> fp32 on the way in and fp32 -> fp16 on the way out take the
  // vectorized path; they must round exactly as Tensor::cast (nearest even,
  // subnormals, overflow to infinity, signed zero).
  Program p = parse(test::program_text("tensor<fp16, [1000]> x",
                                       "tensor<fp16, [1000]> y = mul(x = x, y = fp16(3))[name = string(\"y\")];",
                                       "y"));
  Plan plan = compile(p);
  std::mt19937 rng(9);
  Tensor x(DType::FP16, {1000});
  auto* bits = x.mutable_ptr<uint16_t>();
  for (int i = 0; i < 1000; ++i) {
    uint16_t b = uint16_t(rng());
    if ((b & 0x7c00) == 0x7c00) b &= 0xfbff;  // no inf/nan inputs: 3 * x compares by value
    bits[i] = b;
  }
  bits[0] = 0x0001;  // smallest subnormal
  bits[1] = 0x7bff;  // 65504: 3x overflows to inf
  bits[2] = 0x8000;  // -0
  TensorMap out = plan.run({{"x", x}});
  Tensor want(DType::FP32, {1000});
  for (int i = 0; i < 1000; ++i) want.set(size_t(i), 3.0 * double(f16_to_f32(bits[i])));
  EXPECT_TRUE(out.at("y").same_bytes(want.cast(DType::FP16)));
  // The same path from an fp32 tensor given for an fp16 input (converted by value).
  TensorMap out32 = plan.run({{"x", x.cast(DType::FP32)}});
  EXPECT_TRUE(out32.at("y").same_bytes(out.at("y")));
}

}  // namespace
}  // namespace milrt
