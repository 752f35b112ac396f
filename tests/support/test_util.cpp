#include "support/test_util.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

namespace milrt::test {

TensorMap run_program(const std::string& text, const TensorMap& inputs, const std::string& base_dir) {
  Program p = parse_mil(text, "<test>", base_dir);
  // Tests name blob files they wrote in temp directories by absolute path.
  LoadOptions o;
  o.allow_external_weights = {std::filesystem::temp_directory_path().string()};
  load_blobs(p, o);
  verify(p);
  return run_reference(p, "main", inputs);
}

std::string program_text(const std::string& params, const std::string& body, const std::string& outs,
                         const std::string& opset) {
  return "program(1.3)\n{\n  func main<" + opset + ">(" + params + ") {\n" + body + "\n  } -> (" + outs +
         ");\n}\n";
}

TensorMap run_body(const std::string& params, const std::string& body, const std::string& outs,
                   const TensorMap& inputs) {
  return run_program(program_text(params, body, outs), inputs);
}

std::string stmt(const std::string& type, const std::string& name, const std::string& expr) {
  return "    " + type + " " + name + " = " + expr + "[name = string(\"" + name + "\")];\n";
}

Tensor run_op(const std::string& params, const std::string& type, const std::string& expr, const TensorMap& inputs) {
  return run_body(params, stmt(type, "z", expr), "z", inputs).at("z");
}

void expect_error(const std::string& params, const std::string& type, const std::string& expr,
                  const TensorMap& inputs, const std::string& op, const std::string& fragment) {
  try {
    run_op(params, type, expr, inputs);
    ADD_FAILURE() << "no error for " << expr;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(op), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
  }
}

Tensor make(DType dtype, Shape shape, const std::vector<double>& v) {
  Tensor t(dtype, std::move(shape));
  if (int64_t(v.size()) != t.numel()) throw Error("make(): value count does not match shape");
  for (size_t i = 0; i < v.size(); ++i) t.set(i, v[i]);
  return t;
}

std::vector<float> uniform_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> r(size_t(t.numel()));
  for (size_t i = 0; i < r.size(); ++i) r[i] = t.at(i);
  return r;
}

std::string shared_dir() {
  const char* env = std::getenv("MILRT_SHARED_DIR");
  std::filesystem::path p = env ? std::filesystem::path(env)
                                 : std::filesystem::path(MILRT_SOURCE_DIR) / ".." / "shared";
  if (std::filesystem::exists(p / "testdata")) return std::filesystem::canonical(p).string();
  return "";
}

std::string temp_dir(const std::string& tag) {
  static std::vector<std::string> made;
  static struct Cleanup {
    ~Cleanup() { for (auto& d : made) std::filesystem::remove_all(d); }
  } cleanup;
  auto base = std::filesystem::temp_directory_path() /
              ("milrt_" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(made.size()));
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  made.push_back(base.string());
  return base.string();
}

double bf16_round(double v) {
  const float f = float(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

}  // namespace milrt::test
