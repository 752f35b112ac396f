// Helpers for the canonicalize and decompose tests: small programs from
// text, random inputs, output comparison within a bound, and the real
// programs every pass is run over (the Core ML bundles in ../shared/testdata
// and the first seed's programs with weights generated here).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "milrt/dtype.h"
#include "milrt/passes.h"
#include "support/test_util.h"

namespace milrt::test::rewrite {

// A verified one-function program: `func main<OPSET>(PARAMS) { BODY } -> (OUTS)`.
inline Program parse_program(const std::string& params, const std::string& body, const std::string& outs,
                             const std::string& opset = "ios18") {
  Program p = parse_mil(program_text(params, body, outs, opset), "t.mil", ".");
  verify(p);
  return p;
}

// The op types of function `main`, in order; `const` ops left out unless asked.
inline std::vector<std::string> op_types(const Program& p, bool with_consts = false) {
  std::vector<std::string> r;
  for (auto& op : p.function("main")->ops)
    if (with_consts || op.type != "const") r.push_back(op.type);
  return r;
}

inline size_t count_ops(const Program& p, bool with_consts = false) {
  size_t n = 0;
  for (auto& f : p.functions)
    for (auto& op : f.ops) n += with_consts || op.type != "const";
  return n;
}

// The op of `main` producing value `v` (fails the test if there is none).
inline const Op& producer(const Program& p, const std::string& v) {
  for (auto& op : p.function("main")->ops)
    for (auto& o : op.outputs)
      if (o.name == v) return op;
  ADD_FAILURE() << "no op produces '" << v << "'";
  static const Op none;
  return none;
}

// The variable an op input reads ("" if it is not a variable).
inline std::string var_of(const Op& op, const std::string& key) {
  const Arg* a = op.arg(key);
  return a && a->kind == Arg::Kind::Var ? a->var : "";
}

// The constant value an op input has: an inline literal or the value of a
// `const` op of main (nullptr if neither).
inline const Tensor* const_input(const Program& p, const Op& op, const std::string& key) {
  const Arg* a = op.arg(key);
  if (!a) return nullptr;
  if (a->kind == Arg::Kind::Const) return &a->lit->value;
  if (a->kind != Arg::Kind::Var) return nullptr;
  for (auto& c : p.function("main")->ops)
    if (c.type == "const" && c.outputs[0].name == a->var) return &c.arg("val")->lit->value;
  return nullptr;
}

// A tensor of `dtype` and `shape` (-1 dims taken as 3) holding uniform random
// values in [lo, hi] (rounded to the dtype; integers in [lo, hi], bools 0/1).
inline Tensor random_tensor(DType dtype, Shape shape, std::mt19937_64& rng, double lo, double hi) {
  for (auto& d : shape)
    if (d < 0) d = 3;
  Tensor t(dtype, shape);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = u(rng);
    if (dtype == DType::Bool) v = v > (lo + hi) / 2;
    else if (!dtype_is_float(dtype)) v = std::round(v);
    t.set(size_t(i), v);
  }
  return t;
}

// The same from a seed of its own: tests name each tensor's values by seed.
inline Tensor random(DType dtype, Shape shape, uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  return random_tensor(dtype, std::move(shape), rng, lo, hi);
}

// `t` as a MIL tensor literal, values as C hex floats (exact).
inline std::string literal(const Tensor& t) {
  std::string text = "tensor<" + std::string(dtype_name(t.dtype())) + ", " + shape_str(t.shape()) + ">(";
  size_t next = 0;
  std::function<void(size_t)> nest = [&](size_t dim) {
    if (dim == t.shape().size()) {
      char buf[64];
      std::snprintf(buf, sizeof buf, dtype_is_float(t.dtype()) ? "%a" : "%.0f", t.at(next++));
      text += buf;
      return;
    }
    text += "[";
    for (int64_t k = 0; k < t.shape()[dim]; ++k) {
      if (k) text += ", ";
      nest(dim + 1);
    }
    text += "]";
  };
  nest(0);
  return text + ")";
}

// A statement `TYPE NAME = const()[name = "NAME", val = LITERAL];`.
inline std::string const_stmt(const std::string& name, const Tensor& t) {
  return "    tensor<" + std::string(dtype_name(t.dtype())) + ", " + shape_str(t.shape()) + "> " + name +
         " = const()[name = string(\"" + name + "\"), val = " + literal(t) + "];\n";
}

// Random values for every parameter of function `fn`.
inline TensorMap random_inputs(const Program& p, uint64_t seed, double lo = -1, double hi = 1,
                               const std::string& fn = "main") {
  std::mt19937_64 rng(seed);
  TensorMap in;
  for (auto& prm : p.function(fn)->params) in[prm.name] = random_tensor(prm.type.dtype, prm.type.shape, rng, lo, hi);
  return in;
}

// The largest difference found by a comparison: absolute, and relative to
// the expected value.
struct Deviation {
  double abs = 0, rel = 0;
  void merge(const Deviation& o) { abs = std::max(abs, o.abs), rel = std::max(rel, o.rel); }
};

// Agreement of two runs, output by output: every element within
// abs + rel * |want| (NaN and infinities must match exactly). Returns the
// largest deviation seen, for the tests to report what they measured.
inline Deviation expect_outputs_close(const TensorMap& want, const TensorMap& got, double rel, double abs,
                                      const std::string& what) {
  Deviation dev;
  EXPECT_EQ(want.size(), got.size()) << what;
  for (auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << what << ": output '" << name << "' is missing";
      continue;
    }
    const Tensor& g = it->second;
    if (g.dtype() != w.dtype() || g.shape() != w.shape()) {
      ADD_FAILURE() << what << ": output '" << name << "' has another dtype or shape";
      continue;
    }
    double worst = 0;
    size_t at = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      double a = w.at(size_t(i)), b = g.at(size_t(i));
      bool finite = std::isfinite(a) && std::isfinite(b);
      double d = finite ? std::fabs(a - b) : (a == b || (std::isnan(a) && std::isnan(b))) ? 0 : INFINITY;
      dev.abs = std::max(dev.abs, d);
      if (a != 0) dev.rel = std::max(dev.rel, d / std::fabs(a));
      double ratio = d == 0 ? 0 : d / (abs + rel * (finite ? std::fabs(a) : 0));
      if (ratio > worst) worst = ratio, at = size_t(i);
    }
    EXPECT_LE(worst, 1.0) << what << ": output '" << name << "' [" << at << "]: got " << g.at(at) << ", want "
                          << w.at(at) << " (bound " << abs << " + " << rel << "·|want|)";
  }
  return dev;
}

// Runs `before` and `after` (function main) on `trials` sets of random
// inputs in [lo, hi] and expects their outputs to agree within
// abs + rel * |before's value|. Returns the largest deviation.
inline Deviation expect_same_function(const Program& before, const Program& after, double rel, double abs,
                                      const std::string& what, int trials = 3, double lo = -1, double hi = 1) {
  Deviation dev;
  for (int k = 0; k < trials; ++k) {
    TensorMap in = random_inputs(before, uint64_t(1000 + k), lo, hi);
    dev.merge(expect_outputs_close(run_reference(before, "main", in), run_reference(after, "main", in), rel, abs,
                                   what + " (trial " + std::to_string(k) + ")"));
  }
  return dev;
}

// Every Core ML bundle (`*.mlmodelc`) under ../shared/testdata/coreml, sorted.
inline std::vector<std::string> coreml_bundles() {
  namespace fs = std::filesystem;
  std::vector<std::string> r;
  std::string root = shared_dir();
  if (root.empty()) return r;
  for (auto& e : fs::recursive_directory_iterator(fs::path(root) / "testdata" / "coreml"))
    if (e.is_directory() && e.path().extension() == ".mlmodelc") r.push_back(e.path().string());
  std::sort(r.begin(), r.end());
  return r;
}

// A bundle loaded the way `milrt run` loads it: legalized and verified.
inline Program load_verified(const std::string& path) {
  Program p = load_model(path);
  legalize_layout_idioms(p);
  verify(p);
  return p;
}

// The first seed's programs (tests/data/seed1/*.mil), sorted.
inline std::vector<std::string> seed1_programs() {
  namespace fs = std::filesystem;
  std::vector<std::string> r;
  for (auto& e : fs::directory_iterator(fs::path(MILRT_SOURCE_DIR) / "tests" / "data" / "seed1"))
    if (e.path().extension() == ".mil") r.push_back(e.path().filename().string());
  std::sort(r.begin(), r.end());
  return r;
}

// Loads a seed program with random weights: the program is copied to a fresh
// directory and each blob it refers to is written there as the raw array the
// seed writes (values in [-0.2, 0.2], int8 in [-99, 99]).
inline Program load_seed1(const std::string& mil, uint64_t seed) {
  namespace fs = std::filesystem;
  fs::path dir = temp_dir("pass_seed1");
  fs::copy_file(fs::path(MILRT_SOURCE_DIR) / "tests" / "data" / "seed1" / mil, dir / mil);
  std::ifstream in(dir / mil);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Program parsed = parse_mil(text, (dir / mil).string(), dir.string());
  std::mt19937_64 rng(seed);
  for (auto& f : parsed.functions)
    for (auto& op : f.ops)
      for (auto& input : op.inputs) {
        const Arg& a = input.arg;
        if (a.kind != Arg::Kind::Const || a.lit->blob_path.empty()) continue;
        bool ints = dtype_is_int(a.lit->type.dtype);
        Tensor t = random_tensor(a.lit->type.dtype, a.lit->type.shape, rng, ints ? -99 : -0.2, ints ? 99 : 0.2);
        std::ofstream out(dir / a.lit->blob_path, std::ios::binary);
        out.write(static_cast<const char*>(t.data()), std::streamsize(t.nbytes()));
      }
  return load_verified((dir / mil).string());
}

}  // namespace milrt::test::rewrite
