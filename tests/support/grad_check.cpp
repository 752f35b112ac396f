#include "support/grad_check.h"
#include "support/test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "milrt/autodiff.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/plan.h"

namespace milrt::test {
namespace {

// Uniform in [0, 1) from the raw bits, the same on every platform
// (std::uniform_real_distribution is not).
double unit(std::mt19937_64& rng) { return double(rng() >> 11) * (1.0 / 9007199254740992.0); }

double sum_of(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.at(size_t(i));
  return s;
}

// The summed loss of the forward function at `in` with element i of `key` set to v.
struct Forward {
  const Program& p;
  const std::string& fn;
  const std::string& loss;
  double at(TensorMap in, const std::string& key, const Tensor& value) const {
    in[key] = value;
    return sum_of(run_reference(p, fn, in).at(loss));
  }
};

// Central difference of the loss along `dir` (same shape as input `key`):
// (L(x + h dir) - L(x - h dir)) / (2h), with the step actually taken after
// rounding x +- h dir to the input's dtype (per element) folded into the
// directional derivative's reference: returns {fd, analytic} for `grad`.
std::pair<double, double> directional(const Forward& f, const TensorMap& in, const std::string& key,
                                      const std::vector<std::pair<size_t, double>>& dir, const Tensor& grad,
                                      double h) {
  const Tensor& x = in.at(key);
  Tensor plus = x.clone(), minus = x.clone();
  for (auto [i, d] : dir) {
    plus.set(i, x.at(i) + h * d);
    minus.set(i, x.at(i) - h * d);
  }
  double lp = f.at(in, key, plus), lm = f.at(in, key, minus);
  // The rounded step per element may differ from h*d; the analytic side uses
  // the same rounded steps, so both sides measure the same difference.
  double analytic = 0;
  for (auto [i, d] : dir) analytic += grad.at(i) * (plus.at(i) - minus.at(i)) / (2 * h);
  return {(lp - lm) / (2 * h), analytic};
}

void check_print_parse(const Program& g, const std::string& fn) {
  std::string text = print_mil(g);
  try {
    Program back = parse_mil(text, "<derived>", ".");
    std::string d = ir_diff(g, back);
    EXPECT_EQ(d, "") << "the derived program does not parse back to itself\n" << text;
    verify(back);
  } catch (const Error& e) {
    ADD_FAILURE() << "the derived program does not parse back or verify: " << e.what() << "\n" << text;
  }
  const Function* f = g.function(fn);
  ASSERT_NE(f, nullptr);
}

}  // namespace

Tensor random_tensor(DType dt, const Shape& shape, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  Tensor t(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), lo + (hi - lo) * unit(rng));
  return t;
}

GradCheckResult expect_gradients_match(const Program& program, const std::string& loss,
                                       const std::vector<std::string>& wrt, const TensorMap& given,
                                       const GradCheckOptions& o) {
  GradCheckResult r;
  const Function* fn = program.function(o.function);
  if (!fn) {
    ADD_FAILURE() << "no function " << o.function;
    return r;
  }
  // Inputs: given ones, random floats for the rest.
  TensorMap in = given;
  uint64_t k = 0;
  for (const Param& prm : fn->params) {
    ++k;
    if (in.count(prm.name)) continue;
    if (prm.type.dtype != DType::FP32 && prm.type.dtype != DType::FP16) {
      ADD_FAILURE() << "input '" << prm.name << "' (" << prm.type.str() << ") must be given";
      return r;
    }
    auto [lo, hi] = o.ranges.count(prm.name) ? o.ranges.at(prm.name) : std::pair{o.lo, o.hi};
    in[prm.name] = random_tensor(prm.type.dtype, prm.type.shape, o.seed * 1000003 + k, lo, hi);
  }
  r.inputs = in;

  GradOptions go;
  go.function = o.function;
  go.loss = loss;
  go.wrt = wrt;
  go.keep_outputs = o.keep_outputs;
  try {
    r.derived = differentiate(program, go);
  } catch (const Error& e) {
    ADD_FAILURE() << "differentiate: " << e.what();
    return r;
  }
  const std::string gfn = o.function + "_grad";
  check_print_parse(r.derived, gfn);
  try {
    verify(r.derived);
    r.grads = run_reference(r.derived, gfn, in);
  } catch (const Error& e) {
    ADD_FAILURE() << "the derived function fails on the reference executor: " << e.what() << "\n"
                  << print_mil(r.derived);
    return r;
  }

  // The derived function's loss is the forward loss.
  Forward f{program, o.function, loss};
  TensorMap fwd = run_reference(program, o.function, in);
  EXPECT_TRUE(fwd.at(loss).same_bytes(r.grads.at(loss))) << "main_grad's loss differs from main's";

  std::mt19937_64 rng(o.seed * 7919 + 17);
  for (const std::string& w : wrt) {
    SCOPED_TRACE("gradient of " + loss + " wrt " + w);
    auto git = r.grads.find(w + "_grad");
    if (git == r.grads.end()) {
      ADD_FAILURE() << "no output " << w << "_grad";
      continue;
    }
    const Tensor& g = git->second;
    const Tensor& x = in.at(w);
    EXPECT_EQ(g.shape(), x.shape());
    EXPECT_EQ(g.dtype(), x.dtype());
    if (g.shape() != x.shape()) continue;
    double gmax = 0;
    for (int64_t i = 0; i < g.numel(); ++i) gmax = std::max(gmax, std::fabs(g.at(size_t(i))));
    r.max_abs_grad[w] = gmax;
    if (!o.allow_zero) {
      EXPECT_GT(gmax, 0.0) << "the analytic gradient is zero everywhere";
    }

    std::vector<size_t> idx;
    int64_t n = x.numel();
    if (n <= o.max_elements) {
      for (int64_t i = 0; i < n; ++i) idx.push_back(size_t(i));
    } else {
      for (int i = 0; i < o.max_elements; ++i) idx.push_back(size_t(rng() % uint64_t(n)));
    }
    double worst = 0;
    auto check = [&](const std::string& what, std::pair<double, double> fa) {
      double err = std::fabs(fa.second - fa.first) / (1 + std::fabs(fa.first));
      worst = std::max(worst, err);
      EXPECT_LE(err, o.tol) << what << ": analytic " << fa.second << " vs finite difference " << fa.first;
    };
    for (size_t i : idx) check("element " + std::to_string(i), directional(f, in, w, {{i, 1.0}}, g, o.step));
    for (int d = 0; d < o.directions; ++d) {
      std::vector<std::pair<size_t, double>> dir;
      for (int64_t i = 0; i < n; ++i) dir.push_back({size_t(i), 2 * unit(rng) - 1});
      check("random direction " + std::to_string(d), directional(f, in, w, dir, g, o.step));
    }
    r.max_err[w] = worst;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", worst);
    ::testing::Test::RecordProperty("fd_err_" + w, buf);   // the measured margin, in the test's XML
  }

  if (o.compile) {
    try {
      CompileOptions co;
      co.function = gfn;
      Plan plan = compile(r.derived, co);
      TensorMap got = plan.run(in);
      for (auto& [name, want] : r.grads) {
        SCOPED_TRACE("compiled output " + name);
        auto it = got.find(name);
        if (it == got.end()) {
          ADD_FAILURE() << "the plan has no output " << name;
          continue;
        }
        if (it->second.shape() != want.shape()) {
          ADD_FAILURE() << "the plan's output has shape " << shape_str(it->second.shape());
          continue;
        }
        double scale = 1, diff = 0;
        for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(want.at(size_t(i))));
        for (int64_t i = 0; i < want.numel(); ++i)
          diff = std::max(diff, std::fabs(it->second.at(size_t(i)) - want.at(size_t(i))));
        r.compile_err = std::max(r.compile_err, diff / scale);
        EXPECT_LE(diff / scale, o.compile_tol) << "plan vs reference, max |diff| " << diff;
      }
    } catch (const Error& e) {
      ADD_FAILURE() << "compiling the derived function: " << e.what();
    }
  }
  return r;
}

GradCheckResult expect_gradients_match(const std::string& mil_text, const std::string& loss,
                                       const std::vector<std::string>& wrt, const TensorMap& inputs,
                                       const GradCheckOptions& options) {
  Program p;
  try {
    p = parse_mil(mil_text, "<test>", ".");
    verify(p);
  } catch (const Error& e) {
    ADD_FAILURE() << "the forward program: " << e.what() << "\n" << mil_text;
    return {};
  }
  return expect_gradients_match(p, loss, wrt, inputs, options);
}

GradCheckResult expect_gradients_match(const std::string& mil_text, const std::string& loss,
                                       const std::vector<std::string>& wrt, uint64_t seed, double tol) {
  GradCheckOptions o;
  o.seed = seed;
  o.tol = tol;
  return expect_gradients_match(mil_text, loss, wrt, {}, o);
}

std::string weighted_sum_loss_program(const std::string& params, const std::string& expr, const Shape& zs,
                                      const std::string& pre) {
  std::string body = pre + stmt(mil_type(zs), "z", expr) + stmt(mil_type(zs), "p", "mul(x = z, y = w)") +
                     stmt("fp32", "loss", "reduce_sum(x = p)");
  return program_text(params + ", " + mil_type(zs) + " w", body, "loss");
}

}  // namespace milrt::test
