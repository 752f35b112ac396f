#include "kernels/onednn/onednn_gemm.h"

#include <string>

#include "milrt/error.h"

#if MILRT_HAVE_ONEDNN
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <optional>
#include <unordered_map>

#include "kernels/bf16_bits.h"
#include "kernels/convert_rows.h"
#include "kernels/grow_buffer.h"
#include "kernels/threads.h"
#include "milrt/dtype.h"
#endif

namespace milrt::kernels {

#if !MILRT_HAVE_ONEDNN

struct OnednnGemm::Impl {
  OnednnGemmDesc d;
};

bool onednn_available() { return false; }
OnednnGemm::OnednnGemm(const OnednnGemmDesc&) { throw Error("oneDNN GEMM: this build has no oneDNN"); }
const OnednnGemmDesc& OnednnGemm::desc() const { return impl_->d; }
const char* OnednnGemm::impl_name() const { return "none"; }
size_t OnednnGemm::bytes() const { return 0; }
void OnednnGemm::run(const void*, const void*, const OutputRef&, const float*, const void*) const {
  throw Error("oneDNN GEMM: this build has no oneDNN");
}

#else

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

const char* type_name(ElemType t) {
  switch (t) {
    case ElemType::f32: return "f32";
    case ElemType::f16: return "f16";
    case ElemType::bf16: return "bf16";
  }
  return "?";
}

dt to_dt(ElemType t) {
  switch (t) {
    case ElemType::f32: return dt::f32;
    case ElemType::f16: return dt::f16;
    case ElemType::bf16: return dt::bf16;
  }
  return dt::undef;
}


dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One stream per calling thread: a stream is cheap but not free, and the
// plan's steps all run on the thread that called Plan::run.
dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

// Per thread (oneDNN's scratchpad wants cache-line alignment, which GrowBuffer gives).
struct ThreadBuffers {
  GrowBuffer a, b, residual, scratch;
};

ThreadBuffers& thread_buffers() {
  thread_local ThreadBuffers t;
  return t;
}

// Copies a stored rows×len matrix (row stride `ld`) into a dense one of the
// other operand type: bf16 -> f32 exactly, f32 -> bf16 nearest-even (the rounding
// GemmMath::bf16 defines, done here so it does not depend on oneDNN's). On
// num_threads() threads: for a training step's activations and weights
// (about a million elements per GEMM) a single-threaded scalar loop cost
// more than oneDNN's AMX product itself.
void convert_dense(const void* src, ElemType from, int64_t rows, int64_t len, int64_t ld, void* dst) {
  const int threads = pass_threads(rows * len);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) {
    if (from == ElemType::bf16)
      bf16_to_f32_row(static_cast<const uint16_t*>(src) + r * ld, static_cast<float*>(dst) + r * len, len);
    else
      f32_to_bf16_row(static_cast<const float*>(src) + r * ld, static_cast<uint16_t*>(dst) + r * len, len);
  }
}

// The same for a matrix stored transposed ([cols, rows] with row stride
// `ld`, f32 or bf16 -> the other type): written as a dense row-major
// [rows, cols] copy, so oneDNN gets a plain operand instead of transposing
// it again itself (its AMX kernels copy a transposed A per call). 32×32
// tiles through a local buffer, so reads and writes both stay in cache.
void convert_dense_transposed(const void* src, ElemType from, int64_t rows, int64_t cols, int64_t ld, void* dst) {
  constexpr int64_t T = 32;
  const int threads = pass_threads(rows * cols);
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t r0 = 0; r0 < rows; r0 += T) {
    const int64_t rb = std::min(T, rows - r0);
    float tile[T][T];  // [c - c0][r - r0], widened
    for (int64_t c0 = 0; c0 < cols; c0 += T) {
      const int64_t cb = std::min(T, cols - c0);
      for (int64_t cc = 0; cc < cb; ++cc) {
        if (from == ElemType::bf16) {
          const uint16_t* s = static_cast<const uint16_t*>(src) + (c0 + cc) * ld + r0;
          for (int64_t rr = 0; rr < rb; ++rr) tile[cc][rr] = bf16_bits_to_f32(s[rr]);
        } else {
          const float* s = static_cast<const float*>(src) + (c0 + cc) * ld + r0;
          for (int64_t rr = 0; rr < rb; ++rr) tile[cc][rr] = s[rr];
        }
      }
      for (int64_t rr = 0; rr < rb; ++rr) {
        if (from == ElemType::bf16) {
          float* d = static_cast<float*>(dst) + (r0 + rr) * cols + c0;
          for (int64_t cc = 0; cc < cb; ++cc) d[cc] = tile[cc][rr];
        } else {
          uint16_t* d = static_cast<uint16_t*>(dst) + (r0 + rr) * cols + c0;
          for (int64_t cc = 0; cc < cb; ++cc) d[cc] = f32_to_bf16_bits(tile[cc][rr]);
        }
      }
    }
  }
}

// op(X) [rows, cols] stored as described by `trans` with row stride `ld`.
dnnl::memory::desc matrix_md(int64_t rows, int64_t cols, dt type, int64_t ld, bool trans) {
  return dnnl::memory::desc(dims{rows, cols}, type, trans ? dims{1, ld} : dims{ld, 1});
}

// Restores the calling thread's OpenMP thread count when a run ends (also by exception).
class OmpThreads {
 public:
  OmpThreads() : prev_(omp_get_max_threads()), set_(!omp_in_parallel()) {
    if (set_) omp_set_num_threads(num_threads());
  }
  ~OmpThreads() {
    if (set_) omp_set_num_threads(prev_);
  }

 private:
  int prev_;
  bool set_;
};

[[noreturn]] void fail(const std::string& what) { throw Error("oneDNN GEMM: " + what); }

std::string shape_str(const OnednnGemmDesc& d) {
  return std::to_string(d.m) + "x" + std::to_string(d.n) + "x" + std::to_string(d.k);
}

void validate(const OnednnGemmDesc& d) {
  if (d.m < 1 || d.n < 1 || d.k < 1) fail("M, N and K must be >= 1, got " + shape_str(d));
  const auto check = [](const MatrixRef& x, const char* name, int64_t rows, int64_t cols) {
    if (x.type == ElemType::f16) fail(std::string(name) + " must be f32 or bf16, got f16");
    const int64_t len = x.trans ? rows : cols;
    if (x.ld < len)
      fail(std::string(name) + " ld " + std::to_string(x.ld) + " < its stored row length " + std::to_string(len));
  };
  check(d.a, "A", d.m, d.k);
  check(d.b, "B", d.k, d.n);
  if (d.b_const && !d.b.data) fail("a constant B needs its data in the description");
  if (d.c_ld != 0 && d.c_ld < d.n) fail("C ld " + std::to_string(d.c_ld) + " < N " + std::to_string(d.n));
  if (d.has_residual && d.residual_ld < d.n)
    fail("residual ld " + std::to_string(d.residual_ld) + " < N " + std::to_string(d.n));
  if (!gemm_supports(d.act)) fail(std::string("the epilogue cannot apply ") + activation_name(d.act));
}

}  // namespace

struct OnednnGemm::Impl {
  OnednnGemmDesc d;
  ElemType compute = ElemType::f32;  // the type oneDNN multiplies: f32, or bf16 for GemmMath::bf16
  bool convert_a = false, convert_b = false, convert_residual = false;
  dnnl::memory::desc a_md, b_md, c_md, bias_md, residual_md;
  int bias_post_op = -1, residual_post_op = -1;  // post-op indices of binary adds; -1: none
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  // For a residual that is C itself: the same product with a sum post-op
  // (C += product in place) instead of copying C aside for a binary add.
  // Built where the residual is the only post-op (a sum runs fast only
  // first) and C and the residual are f32 with one ld; else empty.
  std::optional<dnnl::matmul> prim_sum;
  dnnl::memory b_packed;
  std::string impl;
  size_t b_bytes = 0, scratch_bytes = 0;
};

bool onednn_available() { return true; }

OnednnGemm::OnednnGemm(const OnednnGemmDesc& desc) : impl_(std::make_unique<Impl>()) {
  Impl& p = *impl_;
  p.d = desc;
  OnednnGemmDesc& d = p.d;
  validate(d);
  if (d.c_ld == 0) d.c_ld = d.n;
  p.compute = d.math == GemmMath::bf16 ? ElemType::bf16 : ElemType::f32;
  const dt ct = to_dt(p.compute);
  // An operand not already in the compute type is converted into a dense
  // copy (per call for A and a variable B, once for a constant B).
  p.convert_a = d.a.type != p.compute;
  p.convert_b = d.b.type != p.compute;
  // A converted is written row-major even when stored transposed (see convert_dense_transposed).
  p.a_md = p.convert_a ? matrix_md(d.m, d.k, ct, d.k, false)
                       : matrix_md(d.m, d.k, ct, d.a.ld, d.a.trans);
  const dnnl::memory::desc b_user = p.convert_b ? matrix_md(d.k, d.n, ct, d.b.trans ? d.k : d.n, d.b.trans)
                                                : matrix_md(d.k, d.n, ct, d.b.ld, d.b.trans);
  p.b_md = d.b_const ? dnnl::memory::desc(dims{d.k, d.n}, ct, dnnl::memory::format_tag::any) : b_user;
  p.c_md = dnnl::memory::desc(dims{d.m, d.n}, to_dt(d.c_type), dims{d.c_ld, 1});
  p.bias_md = dnnl::memory::desc(dims{1, d.n}, dt::f32, dims{d.n, 1});

  size_t sum_scratch = 0;
  try {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::post_ops po;
    int n_post = 0;
    // oneDNN 2.6 scales after its bias: dst = scale·(A·B + bias). With alpha
    // the bias is therefore a post-op add after the scaling, which keeps
    // C = alpha·A·B + bias with no extra rounding.
    const bool bias_native = d.has_bias && d.alpha == 1;
    if (d.alpha != 1) attr.set_output_scales(0, {d.alpha});
    if (d.has_bias && !bias_native) {
      po.append_binary(dnnl::algorithm::binary_add, p.bias_md);
      p.bias_post_op = n_post++;
    }
    switch (d.act) {
      case Activation::none: break;
      case Activation::relu: po.append_eltwise(1, dnnl::algorithm::eltwise_relu, 0, 0); ++n_post; break;
      case Activation::gelu_tanh: po.append_eltwise(1, dnnl::algorithm::eltwise_gelu_tanh, 0, 0); ++n_post; break;
      case Activation::silu: po.append_eltwise(1, dnnl::algorithm::eltwise_swish, 1, 0); ++n_post; break;
      case Activation::sigmoid: po.append_eltwise(1, dnnl::algorithm::eltwise_logistic, 0, 0); ++n_post; break;
      default: break;  // refused by the description's check (gemm_supports)
    }
    // The residual is a binary add of its own memory, not a sum post-op:
    // oneDNN 2.6 accepts sum only first among the post-ops (elsewhere it
    // falls back to its reference kernel). A residual that is C itself is
    // copied aside in run(): the add reads dst after the product overwrote it.
    // An f16/bf16 residual is widened to f32 in run(): oneDNN 2.6 on AVX2
    // accepts an f16 operand for the add and then reads it wrongly.
    if (d.has_residual) {
      p.convert_residual = d.residual_type != ElemType::f32;
      p.residual_md = dnnl::memory::desc(dims{d.m, d.n}, dt::f32, dims{p.convert_residual ? d.n : d.residual_ld, 1});
      po.append_binary(dnnl::algorithm::binary_add, p.residual_md);
      p.residual_post_op = n_post++;
    }
    attr.set_post_ops(po);
    const dnnl::matmul::desc md = bias_native ? dnnl::matmul::desc(p.a_md, p.b_md, p.bias_md, p.c_md)
                                              : dnnl::matmul::desc(p.a_md, p.b_md, p.c_md);
    p.pd = dnnl::matmul::primitive_desc(md, attr, cpu_engine());
    if (d.has_residual && n_post == 1 && !p.convert_residual && d.c_type == ElemType::f32 &&
        d.residual_ld == d.c_ld) {
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attr.set_post_ops(sum);
      dnnl::matmul::primitive_desc pd_sum(md, attr, cpu_engine());
      if (std::string(pd_sum.impl_info_str()).rfind("ref", 0) != 0) {
        p.prim_sum.emplace(pd_sum);
        sum_scratch = pd_sum.scratchpad_desc().get_size();
      }
    }
  } catch (const dnnl::error& e) {
    fail(std::string("oneDNN has no matmul for ") + shape_str(d) + " with " + type_name(p.compute) + " operands and " +
         type_name(d.c_type) + " output (" + e.what() + ")");
  }
  p.impl = p.pd.impl_info_str();
  // Its reference kernels are plain loops, orders of magnitude slower than
  // gemm(): the caller is better off with milrt's own kernels.
  if (p.impl.rfind("ref", 0) == 0)
    fail("oneDNN has only its reference implementation (" + p.impl + ") for " + shape_str(d) + " with " +
         type_name(p.compute) + " operands, " + type_name(d.c_type) + " output and this epilogue");
  p.scratch_bytes = std::max(p.pd.scratchpad_desc().get_size(), sum_scratch);
  try {
    p.prim = dnnl::matmul(p.pd);
    if (d.b_const) {
      // B in the compute type (converted by us if needed), then reordered
      // into the layout the primitive chose.
      std::unique_ptr<uint8_t[]> tmp;
      const void* src = d.b.data;
      if (p.convert_b) {
        const int64_t rows = d.b.trans ? d.n : d.k, len = d.b.trans ? d.k : d.n;
        tmp.reset(new uint8_t[size_t(rows * len) * elem_bytes(p.compute)]);
        convert_dense(d.b.data, d.b.type, rows, len, d.b.ld, tmp.get());
        src = tmp.get();
      }
      dnnl::memory user(b_user, cpu_engine(), const_cast<void*>(src));
      p.b_packed = dnnl::memory(p.pd.weights_desc(), cpu_engine());
      OmpThreads threads;
      dnnl::reorder(user, p.b_packed).execute(thread_stream(), user, p.b_packed);
      thread_stream().wait();
      p.b_bytes = p.pd.weights_desc().get_size();
      d.b.data = nullptr;  // not read again
    }
  } catch (const dnnl::error& e) {
    fail(std::string("creating the primitive for ") + shape_str(d) + " failed: " + e.what());
  }
}

const OnednnGemmDesc& OnednnGemm::desc() const { return impl_->d; }
const char* OnednnGemm::impl_name() const { return impl_->impl.c_str(); }
bool OnednnGemm::sums_residual_in_place() const { return impl_->prim_sum.has_value(); }
size_t OnednnGemm::bytes() const { return impl_->b_bytes + impl_->scratch_bytes; }

void OnednnGemm::run(const void* a, const void* b, const OutputRef& c, const float* bias, const void* residual) const {
  const Impl& p = *impl_;
  const OnednnGemmDesc& d = p.d;
  if (!a || !c.data) fail("A and C must not be null");
  if (!d.b_const && !b) fail("B must not be null (it is not a constant of the primitive)");
  if (c.type != d.c_type || c.ld != d.c_ld)
    fail(std::string("C must be ") + type_name(d.c_type) + " with ld " + std::to_string(d.c_ld) +
         " as described, got " + type_name(c.type) + " with ld " + std::to_string(c.ld));
  if (d.has_bias != (bias != nullptr)) fail(d.has_bias ? "the described bias is missing" : "a bias was not described");
  if (d.has_residual != (residual != nullptr))
    fail(d.has_residual ? "the described residual is missing" : "a residual was not described");

  ThreadBuffers& buf = thread_buffers();
  if (p.convert_a) {
    void* t = buf.a.get(size_t(d.m * d.k) * elem_bytes(p.compute));
    if (d.a.trans) convert_dense_transposed(a, d.a.type, d.m, d.k, d.a.ld, t);
    else convert_dense(a, d.a.type, d.m, d.k, d.a.ld, t);
    a = t;
  }
  if (!d.b_const && p.convert_b) {
    const int64_t rows = d.b.trans ? d.n : d.k, len = d.b.trans ? d.k : d.n;
    void* t = buf.b.get(size_t(rows * len) * elem_bytes(p.compute));
    convert_dense(b, d.b.type, rows, len, d.b.ld, t);
    b = t;
  }
  if (residual && p.convert_residual) {
    float* t = static_cast<float*>(buf.residual.get(size_t(d.m * d.n) * sizeof(float)));
    for (int64_t i = 0; i < d.m; ++i) {
      const uint16_t* r = static_cast<const uint16_t*>(residual) + i * d.residual_ld;
      for (int64_t j = 0; j < d.n; ++j)
        t[i * d.n + j] = d.residual_type == ElemType::f16 ? f16_to_f32(r[j]) : bf16_to_f32(r[j]);
    }
    residual = t;
  } else if (residual == c.data && p.prim_sum) {
    residual = nullptr;  // the sum post-op reads C before writing it
  } else if (residual) {
    // A residual overlapping C would be read after the product overwrote C.
    const size_t rsize = size_t((d.m - 1) * d.residual_ld + d.n) * elem_bytes(d.residual_type);
    const size_t csize = size_t((d.m - 1) * d.c_ld + d.n) * elem_bytes(d.c_type);
    const auto* r0 = static_cast<const uint8_t*>(residual);
    const auto* c0 = static_cast<const uint8_t*>(c.data);
    if (r0 < c0 + csize && c0 < r0 + rsize) {
      void* t = buf.residual.get(rsize);
      std::memcpy(t, residual, rsize);
      residual = t;
    }
  }

  const dnnl::engine& eng = cpu_engine();
  try {
    std::unordered_map<int, dnnl::memory> args;
    args.emplace(DNNL_ARG_SRC, dnnl::memory(p.a_md, eng, const_cast<void*>(a)));
    args.emplace(DNNL_ARG_WEIGHTS, d.b_const ? p.b_packed : dnnl::memory(p.b_md, eng, const_cast<void*>(b)));
    args.emplace(DNNL_ARG_DST, dnnl::memory(p.c_md, eng, c.data));
    if (bias) {
      const int arg =
          p.bias_post_op >= 0 ? DNNL_ARG_ATTR_MULTIPLE_POST_OP(p.bias_post_op) | DNNL_ARG_SRC_1 : DNNL_ARG_BIAS;
      args.emplace(arg, dnnl::memory(p.bias_md, eng, const_cast<float*>(bias)));
    }
    const bool in_place_sum = d.has_residual && !residual;
    if (residual)
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(p.residual_post_op) | DNNL_ARG_SRC_1,
                   dnnl::memory(p.residual_md, eng, const_cast<void*>(residual)));
    if (p.scratch_bytes)
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.pd.scratchpad_desc(), eng, buf.scratch.get(p.scratch_bytes)));
    OmpThreads threads;
    dnnl::stream& s = thread_stream();
    (in_place_sum ? *p.prim_sum : p.prim).execute(s, args);
    s.wait();
  } catch (const dnnl::error& e) {
    fail(std::string("executing ") + shape_str(d) + " failed: " + e.what());
  }
}

#endif

OnednnGemm::OnednnGemm(OnednnGemm&&) noexcept = default;
OnednnGemm& OnednnGemm::operator=(OnednnGemm&&) noexcept = default;
OnednnGemm::~OnednnGemm() = default;

}  // namespace milrt::kernels
