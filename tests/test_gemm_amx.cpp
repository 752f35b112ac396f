// The AMX bf16 GEMM path (Isa::amx, GemmMath::bf16: kernels/x86/gemm_amx.cpp)
// against a plain fp64 GEMM of the bf16-rounded operands.
//
// The kernel takes whole 16-row groups and 16-pair k steps on the tiles and
// leaves edge rows, the k tail and the epilogue to the AVX-512 kernel, so the
// sizes sit on both sides of 16 and 32 (rows of a tile group, the 32×32 tile)
// and of KC = 2048. Products of bf16 values are exact in fp32 and summed in
// fp32, so an element may be off by (K + 2)·2^-24·Σ|a||b| (the recursive
// summation bound) times |alpha|, plus the epilogue's and the output's own
// rounding. Matrix padding holds NaN (support/gemm_matrices.h): a tile that
// reads past a row's K fails every check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/threads.h"
#include "milrt/dtype.h"
#include "support/activation_fp64.h"
#include "support/gemm_matrices.h"

namespace {

namespace k = milrt::kernels;
using namespace milrt::test;
using k::Activation;
using k::ElemType;
using k::GemmMath;
using k::Isa;

#define SKIP_WITHOUT_AMX()                                                                  \
  if (!k::isa_usable(Isa::amx)) GTEST_SKIP() << "no usable AMX here (cpu: " << k::cpu_features_string() << ")"

// Σ a·b and Σ |a·b| in fp64 over the bf16 values of the operands.
struct Fp64Product {
  Fp64Product(const Logical& a, const Logical& b) : M(a.rows), N(b.cols), K(a.cols) {
    const Logical a16 = rounded(a, ElemType::bf16), b16 = rounded(b, ElemType::bf16);
    sum.assign(size_t(M * N), 0);
    mag.assign(size_t(M * N), 0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t kk = 0; kk < K; ++kk)
        for (int64_t j = 0; j < N; ++j) {
          const double p = a16.at(i, kk) * b16.at(kk, j);
          sum[size_t(i * N + j)] += p;
          mag[size_t(i * N + j)] += std::abs(p);
        }
  }
  // The fp32 accumulation bound of element idx, scaled by |alpha|.
  double bound(size_t idx, double alpha) const { return std::abs(alpha) * double(K + 2) * kU32 * mag[idx]; }
  int64_t M, N, K;
  std::vector<double> sum, mag;
};

// Fails (and names the first few) elements outside want ± tol, and C's padding.
void expect_within(const Buffer& c, const std::vector<double>& want, const std::vector<double>& tol) {
  int bad = 0;
  for (int64_t i = 0; i < c.rows(); ++i)
    for (int64_t j = 0; j < c.cols(); ++j) {
      const size_t idx = size_t(i * c.cols() + j);
      const double g = c.get(i, j);
      if (std::abs(g - want[idx]) <= tol[idx]) continue;
      if (++bad <= 3) ADD_FAILURE() << "C(" << i << ", " << j << ") = " << g << ", want " << want[idx] << " ± " << tol[idx];
    }
  EXPECT_EQ(bad, 0) << "of " << c.rows() * c.cols();
  EXPECT_TRUE(c.padding_intact()) << "wrote outside C";
}

std::string shape_name(int64_t M, int64_t N, int64_t K) {
  return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
}

struct Dims {
  int64_t M, N, K;
};

// Every size in {1, 15, 16, 17, 31, 32, 33, 65, 100, 257, 768} as M, as N and
// as K, against partners that leave edges too.
std::vector<Dims> awkward_shapes() {
  const int64_t sizes[] = {1, 15, 16, 17, 31, 32, 33, 65, 100, 257, 768};
  std::vector<Dims> shapes;
  for (int64_t s : sizes) {
    shapes.push_back({s, 33, 100});
    shapes.push_back({65, s, 33});
    shapes.push_back({33, 17, s});
  }
  shapes.push_back({100, 65, 1031});  // one K block with a k tail of 7
  shapes.push_back({49, 40, 4103});   // K blocks of 2048, 2048 and a tail of 7
  shapes.push_back({257, 100, 768});
  return shapes;
}

// C = alpha·op(A)·op(B) for every storage type and transpose of A and B,
// per call and pre-packed; alpha 1 (tiles stored straight to C) and -1.25
// (through the AVX-512 epilogue).
TEST(GemmAmx, ProductsMatchFp64OnBf16Values) {
  SKIP_WITHOUT_AMX();
  uint32_t seed = 1;
  for (const Dims& d : awkward_shapes()) {
    const Logical a = random_logical(d.M, d.K, seed++), b = random_logical(d.K, d.N, seed++);
    const Fp64Product r(a, b);
    for (ElemType ta : {ElemType::bf16, ElemType::f32})
      for (ElemType tb : {ElemType::bf16, ElemType::f32})
        for (bool trans_a : {false, true})
          for (bool trans_b : {false, true})
            for (bool packed : {false, true})
              for (double alpha : {1.0, -1.25}) {
                SCOPED_TRACE(shape_name(d.M, d.N, d.K) + " A:" + type_name(ta) + (trans_a ? "ᵀ" : "") + " B:" +
                             type_name(tb) + (trans_b ? "ᵀ" : "") + (packed ? " packed" : "") +
                             " alpha=" + std::to_string(alpha));
                const Stored sa(a, ta, trans_a, 3), sb(b, tb, trans_b, 5);
                Buffer c(d.M, d.N, ElemType::f32, 3);
                const k::Epilogue ep{.alpha = float(alpha)};
                if (packed) k::gemm(d.M, sa.ref(), k::PackedB(sb.ref(), d.K, d.N, GemmMath::bf16, Isa::amx), c.out(), ep);
                else k::gemm(d.M, d.N, d.K, sa.ref(), sb.ref(), c.out(), ep, GemmMath::bf16, Isa::amx);
                std::vector<double> want(r.sum.size()), tol(r.sum.size());
                for (size_t i = 0; i < want.size(); ++i) {
                  want[i] = alpha * r.sum[i];
                  tol[i] = r.bound(i, alpha) + kU32 * std::abs(want[i]);
                }
                expect_within(c, want, tol);
              }
  }
}

// Bound on |f'|, so that an input error of e moves f(x) by at most slope·e.
double act_slope(Activation a) {
  return a == Activation::sigmoid ? 0.25 : a == Activation::none || a == Activation::relu ? 1 : 1.2;
}

// Every epilogue (alpha, bias, each activation, a residual of each type) into
// C of each type: on a shape with 16-row groups, edge rows and a k tail, and
// on one with several K blocks.
TEST(GemmAmx, EveryEpilogueMatchesFp64) {
  SKIP_WITHOUT_AMX();
  const Dims shapes[] = {{49, 40, 100}, {33, 64, 1031}};
  const Activation acts[] = {Activation::none, Activation::relu, Activation::gelu_tanh, Activation::silu,
                             Activation::sigmoid};
  const std::optional<ElemType> residual_types[] = {std::nullopt, ElemType::f32, ElemType::f16, ElemType::bf16};
  uint32_t seed = 100;
  for (const Dims& d : shapes) {
    const Logical a = random_logical(d.M, d.K, seed++, ElemType::bf16), b = random_logical(d.K, d.N, seed++, ElemType::bf16);
    const Logical rv = random_logical(d.M, d.N, seed++, ElemType::bf16);  // exact in every residual type
    const Fp64Product r(a, b);
    const Stored sa(a, ElemType::bf16, false, 1), sb(b, ElemType::bf16, true, 2);
    std::vector<float> bias(size_t(d.N));
    std::mt19937 rng(seed++);
    for (float& x : bias) x = std::uniform_real_distribution<float>(-2, 2)(rng);
    const double alpha = 0.5;
    for (Activation act : acts)
      for (bool with_bias : {false, true})
        for (const auto& rtype : residual_types)
          for (ElemType ct : {ElemType::f32, ElemType::f16, ElemType::bf16}) {
            SCOPED_TRACE(shape_name(d.M, d.N, d.K) + " act=" + std::to_string(int(act)) + (with_bias ? " bias" : "") +
                         " residual=" + (rtype ? type_name(*rtype) : "none") + " C:" + type_name(ct));
            std::optional<Buffer> res;
            if (rtype) {
              res.emplace(d.M, d.N, *rtype, 3);
              for (int64_t i = 0; i < d.M; ++i)
                for (int64_t j = 0; j < d.N; ++j) res->set(i, j, rv.at(i, j));
            }
            std::vector<double> want(r.sum.size()), tol(r.sum.size());
            for (int64_t i = 0; i < d.M; ++i)
              for (int64_t j = 0; j < d.N; ++j) {
                const size_t idx = size_t(i * d.N + j);
                const double bj = with_bias ? bias[size_t(j)] : 0, x = alpha * r.sum[idx] + bj;
                const double f = act64(act, x), rj = rtype ? rv.at(i, j) : 0;
                want[idx] = f + rj;
                // The product's bound and fp32 rounding of alpha·s + b, through f's slope; f's own
                // fp32 evaluation (a few ulps of its exponent's argument); then the final sum and
                // C's rounding.
                const double x_err = r.bound(idx, alpha) + 2 * kU32 * (std::abs(x) + std::abs(bj));
                tol[idx] = act_slope(act) * x_err + 1e-6 * (2 + 2 * std::abs(x)) * std::abs(f) +
                           (kU32 + unit_roundoff(ct)) * (std::abs(f) + std::abs(rj)) + 1e-7;
              }
            Buffer c(d.M, d.N, ct, 3);
            const k::Epilogue ep{.alpha = float(alpha),
                                 .bias = with_bias ? bias.data() : nullptr,
                                 .act = act,
                                 .residual = res ? res->data() : nullptr,
                                 .residual_type = rtype.value_or(ElemType::f32),
                                 .residual_ld = res ? res->ld() : 0};
            k::gemm(d.M, d.N, d.K, sa.ref(), sb.ref(), c.out(), ep, GemmMath::bf16, Isa::amx);
            expect_within(c, want, tol);
          }
  }
}

// C += A·B with C as the residual, in each output type: the tiles must not
// overwrite C before the epilogue has read it.
TEST(GemmAmx, ResidualMayBeTheOutput) {
  SKIP_WITHOUT_AMX();
  const Dims d{65, 70, 300};
  const Logical a = random_logical(d.M, d.K, 7, ElemType::bf16), b = random_logical(d.K, d.N, 8, ElemType::bf16);
  const Logical c0 = random_logical(d.M, d.N, 9, ElemType::bf16);
  const Fp64Product r(a, b);
  const Stored sa(a, ElemType::bf16, false, 0), sb(b, ElemType::bf16, false, 0);
  for (ElemType ct : {ElemType::f32, ElemType::f16, ElemType::bf16}) {
    SCOPED_TRACE(std::string("C:") + type_name(ct));
    Buffer c(d.M, d.N, ct, 3);
    std::vector<double> want(r.sum.size()), tol(r.sum.size());
    for (int64_t i = 0; i < d.M; ++i)
      for (int64_t j = 0; j < d.N; ++j) {
        c.set(i, j, c0.at(i, j));
        const size_t idx = size_t(i * d.N + j);
        want[idx] = r.sum[idx] + c0.at(i, j);
        tol[idx] = r.bound(idx, 1) + (2 * kU32 + unit_roundoff(ct)) * (std::abs(want[idx]) + std::abs(c0.at(i, j)));
      }
    k::gemm(d.M, d.N, d.K, sa.ref(), sb.ref(), c.out(),
            k::Epilogue{.residual = c.data(), .residual_type = ct, .residual_ld = c.ld()}, GemmMath::bf16, Isa::amx);
    expect_within(c, want, tol);
  }
}

// C = R + A·B with an fp32 residual R and K in one block of whole 32-k tile
// steps: the tiles start from R (not zero) and go straight to C, in place
// (R is C) or not, with 16-row groups, edge rows and an edge column tile.
TEST(GemmAmx, Fp32ResidualStartsTheTileSums) {
  SKIP_WITHOUT_AMX();
  for (const Dims& d : {Dims{49, 70, 256}, Dims{64, 64, 512}, Dims{33, 96, 32}}) {
    const Logical a = random_logical(d.M, d.K, 31, ElemType::bf16), b = random_logical(d.K, d.N, 32, ElemType::bf16);
    const Logical r0 = random_logical(d.M, d.N, 33, ElemType::bf16);
    const Fp64Product r(a, b);
    for (bool trans_a : {false, true})
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(shape_name(d.M, d.N, d.K) + (trans_a ? " Aᵀ fp32" : " A bf16") + (in_place ? " C += A·B" : " C = R + A·B"));
        const Stored sa(a, trans_a ? ElemType::f32 : ElemType::bf16, trans_a, 0), sb(b, ElemType::f32, false, 0);
        Buffer c(d.M, d.N, ElemType::f32, 3), res(d.M, d.N, ElemType::f32, 5);
        Buffer& rbuf = in_place ? c : res;
        std::vector<double> want(r.sum.size()), tol(r.sum.size());
        for (int64_t i = 0; i < d.M; ++i)
          for (int64_t j = 0; j < d.N; ++j) {
            rbuf.set(i, j, r0.at(i, j));
            const size_t idx = size_t(i * d.N + j);
            want[idx] = r.sum[idx] + r0.at(i, j);
            tol[idx] = r.bound(idx, 1) + double(d.K + 2) * kU32 * std::abs(r0.at(i, j)) + kU32 * std::abs(want[idx]);
          }
        k::gemm(d.M, d.N, d.K, sa.ref(), sb.ref(), c.out(),
                k::Epilogue{.residual = rbuf.data(), .residual_type = ElemType::f32, .residual_ld = rbuf.ld()},
                GemmMath::bf16, Isa::amx);
        expect_within(c, want, tol);
        if (!in_place) {
          EXPECT_TRUE(res.padding_intact());
        }
      }
  }
}

// bf16 A rows used in place (64-byte aligned start and stride) and copied
// (any other start or stride) give the right sums; NaN after each row's K
// catches a tile that reads on into the padding.
TEST(GemmAmx, AlignedAndUnalignedARowsBothWork) {
  SKIP_WITHOUT_AMX();
  const Dims d{50, 48, 200};
  const Logical a = random_logical(d.M, d.K, 21, ElemType::bf16), b = random_logical(d.K, d.N, 22, ElemType::bf16);
  const Fp64Product r(a, b);
  const Stored sb(b, ElemType::bf16, false, 0);
  for (int64_t ld : {int64_t(224), int64_t(203)})   // 448 bytes: a multiple of 64; 406: not
    for (int64_t offset : {0, 1}) {                   // elements past a 64-byte boundary
      SCOPED_TRACE("lda=" + std::to_string(ld) + " offset=" + std::to_string(offset));
      std::vector<uint16_t> storage(size_t(d.M * ld + offset + 32), 0x7fc0);
      uint16_t* base = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) / 2 % 32 + offset;
      for (int64_t i = 0; i < d.M; ++i)
        for (int64_t kk = 0; kk < d.K; ++kk) base[i * ld + kk] = milrt::f32_to_bf16(float(a.at(i, kk)));
      Buffer c(d.M, d.N, ElemType::f32, 3);
      k::gemm(d.M, d.N, d.K, k::MatrixRef{base, ElemType::bf16, ld}, sb.ref(), c.out(), {}, GemmMath::bf16, Isa::amx);
      std::vector<double> tol(r.sum.size());
      for (size_t i = 0; i < tol.size(); ++i) tol[i] = r.bound(i, 1) + kU32 * std::abs(r.sum[i]);
      expect_within(c, r.sum, tol);
    }
}

// Threads take whole blocks of C: 1 and 2 threads give the same bits, per
// call and pre-packed, and the result is right.
TEST(GemmAmx, OneAndTwoThreadsGiveIdenticalBits) {
  SKIP_WITHOUT_AMX();
  const Dims shapes[] = {{257, 300, 768}, {100, 700, 1031}};
  uint32_t seed = 300;
  for (const Dims& d : shapes) {
    const Logical a = random_logical(d.M, d.K, seed++), b = random_logical(d.K, d.N, seed++);
    const Fp64Product r(a, b);
    const Stored sa(a, ElemType::f32, false, 1), sb(b, ElemType::bf16, true, 2);
    std::vector<float> bias(size_t(d.N));
    for (int64_t j = 0; j < d.N; ++j) bias[size_t(j)] = float(0.01 * double(j % 13) - 0.06);
    const k::Epilogue ep{.alpha = 0.75f, .bias = bias.data(), .act = Activation::silu};
    for (bool packed : {false, true}) {
      SCOPED_TRACE(shape_name(d.M, d.N, d.K) + (packed ? " packed" : ""));
      std::vector<Buffer> outs;
      for (int threads : {1, 2}) {
        ThreadCount tc(threads);
        Buffer c(d.M, d.N, ElemType::f32, 3);
        if (packed) k::gemm(d.M, sa.ref(), k::PackedB(sb.ref(), d.K, d.N, GemmMath::bf16, Isa::amx), c.out(), ep);
        else k::gemm(d.M, d.N, d.K, sa.ref(), sb.ref(), c.out(), ep, GemmMath::bf16, Isa::amx);
        outs.push_back(std::move(c));
      }
      EXPECT_EQ(outs[0].raw(), outs[1].raw()) << "2 threads differ from 1";
      std::vector<double> want(r.sum.size()), tol(r.sum.size());
      for (int64_t i = 0; i < d.M; ++i)
        for (int64_t j = 0; j < d.N; ++j) {
          const size_t idx = size_t(i * d.N + j);
          const double x = 0.75 * r.sum[idx] + bias[size_t(j)];
          want[idx] = act64(Activation::silu, x);
          tol[idx] = 1.2 * (r.bound(idx, 0.75) + 2 * kU32 * std::abs(x)) + 1e-6 * (2 + std::abs(x)) * std::abs(want[idx]) + 1e-7;
        }
      expect_within(outs[0], want, tol);
    }
  }
}

}  // namespace
