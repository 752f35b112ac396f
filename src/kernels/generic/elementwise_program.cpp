#include "kernels/generic/vec_math.h"
#include "kernels/generic/multiversion.h"
#include "kernels/generic/elementwise_program.h"
#include "kernels/generic/round_f16.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/threads.h"
#include "milrt/error.h"

namespace milrt::kernels {
namespace {

// Bounds for run()'s per-call tables, which live on the stack (no allocation
// while running). Fusion passes keep programs far below them.
constexpr size_t kMaxInstrs = 512;
constexpr size_t kMaxInputs = 64;

[[noreturn]] void fail(const std::string& msg) { throw Error("elementwise program: " + msg); }

// The arithmetic loops are cloned per ISA (MILRT_CLONES: the current path's clone) so the
// same source runs 16 lanes wide on AVX-512 machines and still runs anywhere.
// Operands may alias `o` exactly (registers are reused in place).

MILRT_CLONES(void, binary_block, (Binary op, const float* a, const float* b, float* o, int n), (op, a, b, o, n)) {
  switch (op) {
    case Binary::Add: for (int i = 0; i < n; ++i) o[i] = a[i] + b[i]; return;
    case Binary::Sub: for (int i = 0; i < n; ++i) o[i] = a[i] - b[i]; return;
    case Binary::Mul: for (int i = 0; i < n; ++i) o[i] = a[i] * b[i]; return;
    case Binary::Div: for (int i = 0; i < n; ++i) o[i] = a[i] / b[i]; return;
    // NaN in either operand gives NaN, as NumPy's maximum/minimum.
    case Binary::Max:
      for (int i = 0; i < n; ++i) { float x = a[i], y = b[i]; o[i] = (x > y || x != x) ? x : y; }
      return;
    case Binary::Min:
      for (int i = 0; i < n; ++i) { float x = a[i], y = b[i]; o[i] = (x < y || x != x) ? x : y; }
      return;
    case Binary::Pow: for (int i = 0; i < n; ++i) o[i] = std::pow(a[i], b[i]); return;
    case Binary::FloorDiv: for (int i = 0; i < n; ++i) o[i] = std::floor(a[i] / b[i]); return;
    case Binary::Mod:
      for (int i = 0; i < n; ++i) {
        float m = std::fmod(a[i], b[i]);
        o[i] = (m != 0 && ((m < 0) != (b[i] < 0))) ? m + b[i] : m;
      }
      return;
    default: return;  // comparisons and logic are rejected by make_program
  }
}

MILRT_CLONES(void, splat, (float* o, float v, int n), (o, v, n)) {
  for (int i = 0; i < n; ++i) o[i] = v;
}

bool float_binary(Binary op) {
  switch (op) {
    case Binary::Add: case Binary::Sub: case Binary::Mul: case Binary::Div: case Binary::Max:
    case Binary::Min: case Binary::Pow: case Binary::FloorDiv: case Binary::Mod: return true;
    default: return false;
  }
}

}  // namespace

EwProgram make_program(const std::vector<EwInstr>& instrs, const std::vector<std::vector<int64_t>>& input_shapes,
                       const std::vector<int64_t>& out_shape) {
  EwProgram p;
  p.num_inputs = int(input_shapes.size());
  if (instrs.empty()) fail("no instructions");
  if (instrs.size() > kMaxInstrs) fail("more than " + std::to_string(kMaxInstrs) + " instructions");
  if (input_shapes.size() > kMaxInputs) fail("more than " + std::to_string(kMaxInputs) + " inputs");
  const size_t n = instrs.size();
  for (size_t i = 0; i < n; ++i) {
    const EwInstr& in = instrs[i];
    auto operand = [&](int v) {
      if (v < 0 || size_t(v) >= i) fail("instruction " + std::to_string(i) + " reads a value not defined before it");
    };
    switch (in.code) {
      case EwInstr::Code::Input:
        if (in.input < 0 || in.input >= p.num_inputs) fail("input " + std::to_string(in.input) + " out of range");
        break;
      case EwInstr::Code::Const: break;
      case EwInstr::Code::Binary:
        if (!float_binary(in.binary)) fail("instruction " + std::to_string(i) + " is not float arithmetic");
        operand(in.a), operand(in.b);
        break;
      case EwInstr::Code::Unary: operand(in.a); break;
    }
  }

  // Strides of each input broadcast against the output (right-aligned).
  const int rank = int(out_shape.size());
  if (rank > kMaxRank) fail("rank above " + std::to_string(kMaxRank));
  std::vector<std::vector<int64_t>> full(input_shapes.size(), std::vector<int64_t>(size_t(rank), 0));
  for (size_t k = 0; k < input_shapes.size(); ++k) {
    const auto& s = input_shapes[k];
    if (s.size() > size_t(rank)) fail("input " + std::to_string(k) + " has a higher rank than the output");
    size_t off = size_t(rank) - s.size();
    int64_t st = 1;
    for (int d = int(s.size()) - 1; d >= 0; --d) {
      int64_t od = out_shape[size_t(d) + off];
      if (s[size_t(d)] != od && s[size_t(d)] != 1) fail("input " + std::to_string(k) + " does not broadcast");
      full[k][size_t(d) + off] = s[size_t(d)] == 1 ? 0 : st;
      st *= s[size_t(d)];
    }
  }
  p.numel = 1;
  for (int64_t d : out_shape) p.numel *= d;

  // Merge dims, innermost first: an outer dim joins the current run when
  // every input steps through both as through one (or is broadcast along
  // both). Size-1 dims vanish.
  std::vector<int64_t> dims;                       // innermost first
  std::vector<std::vector<int64_t>> st(input_shapes.size());
  for (int d = rank - 1; d >= 0; --d) {
    int64_t size = out_shape[size_t(d)];
    if (size == 1) continue;
    bool merge = !dims.empty();
    for (size_t k = 0; merge && k < full.size(); ++k) merge = full[k][size_t(d)] == st[k].back() * dims.back();
    if (merge) {
      dims.back() *= size;
      continue;
    }
    dims.push_back(size);
    for (size_t k = 0; k < full.size(); ++k) st[k].push_back(full[k][size_t(d)]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (auto& s : st) s.push_back(0);
  }
  p.rank = int(dims.size());
  p.strides.assign(input_shapes.size(), std::vector<int64_t>(dims.size()));
  for (int d = 0; d < p.rank; ++d) {
    p.dims[d] = dims[dims.size() - 1 - size_t(d)];
    for (size_t k = 0; k < st.size(); ++k) p.strides[k][size_t(d)] = st[k][dims.size() - 1 - size_t(d)];
  }
  for (size_t k = 0; k < st.size(); ++k)
    if (p.strides[k][size_t(p.rank - 1)] > 1) fail("internal: inner stride of input " + std::to_string(k));

  // Register allocation: a value's buffer is free after its last use and may
  // be taken by the instruction that reads it last (the loops allow o == a).
  // Constants keep theirs for the whole run (filled once); contiguous inputs
  // are read in place; the last instruction writes the output directly when
  // it computes something.
  std::vector<size_t> last(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const EwInstr& in = instrs[i];
    if (in.a >= 0) last[size_t(in.a)] = i;
    if (in.b >= 0) last[size_t(in.b)] = i;
  }
  std::vector<int> free_regs;
  std::vector<bool> released(n, false);
  p.code.resize(n);
  auto release = [&](int v) {
    if (v < 0 || released[size_t(v)] || last[size_t(v)] == 0) return;
    released[size_t(v)] = true;
    int r = p.code[size_t(v)].reg;
    if (r >= 0 && instrs[size_t(v)].code != EwInstr::Code::Const) free_regs.push_back(r);
  };
  for (size_t i = 0; i < n; ++i) {
    const EwInstr& in = instrs[i];
    p.code[i].instr = in;
    if (in.a >= 0 && last[size_t(in.a)] == i) release(in.a);
    if (in.b >= 0 && last[size_t(in.b)] == i) release(in.b);
    bool computes = in.code == EwInstr::Code::Binary || in.code == EwInstr::Code::Unary;
    bool needs = in.code == EwInstr::Code::Const || (computes && i + 1 < n) ||
                 (in.code == EwInstr::Code::Input && p.strides[size_t(in.input)][size_t(p.rank - 1)] == 0);
    if (!needs) continue;
    if (!free_regs.empty() && in.code != EwInstr::Code::Const) {
      p.code[i].reg = free_regs.back();
      free_regs.pop_back();
    } else {
      p.code[i].reg = p.num_regs++;
    }
  }
  return p;
}

namespace {

// Rows [row0, row1) of the iteration space (a row: the innermost contiguous
// run of the output), with `scratch` holding the registers.
void run_rows(const EwProgram& p, const float* const* inputs, float* out, float* scratch, int64_t row0,
              int64_t row1) {
  const size_t n = p.code.size();
  const float* val[kMaxInstrs];
  auto reg = [&](int r) { return scratch + int64_t(r) * kEwBlock; };
  for (const auto& s : p.code)
    if (s.instr.code == EwInstr::Code::Const) splat(reg(s.reg), s.instr.value, kEwBlock);

  const int r = p.rank;
  const int64_t inner = p.dims[r - 1];
  // The outer index and every input's offset at row0.
  int64_t idx[kMaxRank] = {};
  int64_t off[kMaxInputs] = {};
  for (int64_t rest = row0, d = r - 2; d >= 0; --d) {
    idx[d] = rest % p.dims[d];
    rest /= p.dims[d];
    for (int k = 0; k < p.num_inputs; ++k) off[k] += idx[d] * p.strides[size_t(k)][size_t(d)];
  }
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t o = row * inner;
    for (int64_t j0 = 0; j0 < inner; j0 += kEwBlock) {
      const int m = int(std::min<int64_t>(kEwBlock, inner - j0));
      float* dst_out = out + o + j0;
      for (size_t i = 0; i < n; ++i) {
        const EwProgram::Slot& s = p.code[i];
        const EwInstr& in = s.instr;
        switch (in.code) {
          case EwInstr::Code::Input: {
            const float* src = inputs[in.input] + off[in.input];
            if (s.reg < 0) {
              val[i] = src + j0;
            } else {
              splat(reg(s.reg), *src, m);
              val[i] = reg(s.reg);
            }
            break;
          }
          case EwInstr::Code::Const: val[i] = reg(s.reg); break;
          case EwInstr::Code::Binary: {
            float* d = s.reg < 0 ? dst_out : reg(s.reg);
            binary_block(in.binary, val[in.a], val[in.b], d, m);
            if (p.round_f16) round_to_f16(d, m);
            val[i] = d;
            break;
          }
          case EwInstr::Code::Unary: {
            float* d = s.reg < 0 ? dst_out : reg(s.reg);
            if (unary_vectorized(in.unary)) unary_vectorized_f32(in.unary, val[in.a], d, m, in.alpha, in.beta);
            else unary_f32(in.unary, val[in.a], d, m, in.alpha, in.beta, in.epsilon);
            if (p.round_f16) round_to_f16(d, m);
            val[i] = d;
            break;
          }
        }
      }
      if (val[n - 1] != dst_out) std::memcpy(dst_out, val[n - 1], size_t(m) * sizeof(float));
    }
    // Next row: advance the outer index and every input's offset.
    for (int d = r - 2; d >= 0; --d) {
      for (int k = 0; k < p.num_inputs; ++k) off[k] += p.strides[size_t(k)][size_t(d)];
      if (++idx[d] < p.dims[d]) break;
      for (int k = 0; k < p.num_inputs; ++k) off[k] -= p.strides[size_t(k)][size_t(d)] * p.dims[d];
      idx[d] = 0;
    }
  }
}

}  // namespace

void run_program(const EwProgram& p, const float* const* inputs, float* out, float* scratch) {
  if (p.numel == 0) return;
  const int64_t rows = p.numel / p.dims[p.rank - 1];
  // Memory-bound: a second thread nearly doubles the bandwidth one core
  // gets. Rows are split evenly; each thread has its own registers (the
  // caller's scratch on the first, a per-thread buffer that only grows on
  // the others). Elementwise, so the bits do not depend on the split.
  const int threads = pass_threads(p.numel, rows);
  if (threads <= 1) return run_rows(p, inputs, out, scratch, 0, rows);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    thread_local std::vector<float> own;
    float* regs = scratch;
    if (t > 0) {
      if (own.size() < size_t(p.scratch_floats())) own.resize(size_t(p.scratch_floats()));
      regs = own.data();
    }
    run_rows(p, inputs, out, regs, rows * t / nt, rows * (t + 1) / nt);
  }
}

}  // namespace milrt::kernels
