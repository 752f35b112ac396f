// The data-movement kernels (kernels/generic/copy.h, pad.h) against plain
// index loops written here: strided_copy over random strided views (size-1
// dims, dims the kernel merges, negative steps, every element size),
// concat along each axis with short and empty parts, and constant, reflect
// and replicate padding with short and long rows.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/generic/copy.h"
#include "kernels/generic/pad.h"
#include "kernels/threads.h"

namespace milrt::kernels {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = uint8_t(rng());
  return v;
}

// Row-major strides of dims, in elements.
std::vector<int64_t> row_major(const std::vector<int64_t>& dims) {
  std::vector<int64_t> st(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) st[i - 1] = st[i] * dims[i];
  return st;
}

// Calls f(index) for every index of dims, last dim fastest.
template <class F>
void for_each_index(const std::vector<int64_t>& dims, F f) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t t = 0; t < total; ++t) {
    f(idx);
    for (size_t k = dims.size(); k-- > 0;) {
      if (++idx[k] < dims[k]) break;
      idx[k] = 0;
    }
  }
}

TEST(CopyKernels, StridedCopyMatchesAnIndexLoop) {
  std::mt19937 rng(5);
  int cases = 0;
  for (int bytes : {1, 2, 3, 4, 8})
    for (int trial = 0; trial < 60; ++trial) {
      // A view of a random source: per dim a size, a step (1, -1 or 2) and a
      // start; the destination is dense or has rows wider than the copy.
      const int rank = 1 + int(rng() % 5);
      const auto r = static_cast<size_t>(rank);
      std::vector<int64_t> dims(r), src_dims(r), step(r), start(r);
      for (int i = 0; i < rank; ++i) {
        dims[size_t(i)] = int64_t(rng() % 4 == 0 ? 1 : 1 + rng() % 7);
        const int64_t steps[3] = {1, -1, 2};
        step[size_t(i)] = steps[rng() % 3];
        src_dims[size_t(i)] = dims[size_t(i)] * std::abs(step[size_t(i)]) + int64_t(rng() % 2);
        start[size_t(i)] = step[size_t(i)] < 0 ? src_dims[size_t(i)] - 1 : 0;
      }
      const std::vector<int64_t> sst = row_major(src_dims);
      std::vector<int64_t> ss(r), dst_dims = dims;
      int64_t base = 0;
      for (int i = 0; i < rank; ++i) ss[size_t(i)] = step[size_t(i)] * sst[size_t(i)], base += start[size_t(i)] * sst[size_t(i)];
      if (trial % 2) dst_dims.back() += 3;  // rows of the destination wider than the copy
      const std::vector<int64_t> ds = row_major(dst_dims);
      int64_t src_n = 1, dst_n = 1;
      for (int64_t d : src_dims) src_n *= d;
      for (int64_t d : dst_dims) dst_n *= d;
      const std::vector<uint8_t> src = random_bytes(size_t(src_n * bytes), uint32_t(trial));
      std::vector<uint8_t> got(size_t(dst_n * bytes), 0xAB), want = got;
      strided_copy(src.data() + base * bytes, got.data(), rank, dims.data(), ss.data(), ds.data(), bytes);
      for_each_index(dims, [&](const std::vector<int64_t>& idx) {
        int64_t so = base, dof = 0;
        for (int i = 0; i < rank; ++i) so += idx[size_t(i)] * ss[size_t(i)], dof += idx[size_t(i)] * ds[size_t(i)];
        std::memcpy(want.data() + dof * bytes, src.data() + so * bytes, size_t(bytes));
      });
      ASSERT_EQ(got, want) << "bytes " << bytes << " trial " << trial << " rank " << rank;
      ++cases;
    }
  EXPECT_EQ(cases, 300);
}

// Copies above pass_threads' 2^16 elements are split over threads along the
// outermost dim: attention's head transpose [T, H, D] -> [H, T, D] (and a
// reversed outer dim, whose parts step backwards), against the index loop,
// with 1 and 2 threads and an outer dim that does not divide evenly.
TEST(CopyKernels, LargeCopiesSplitOverThreadsMatchAnIndexLoop) {
  const int saved = num_threads();
  for (int threads : {1, 2})
    for (int64_t heads : {12, 7})
      for (bool reversed : {false, true}) {
        set_num_threads(threads);
        const int64_t T = 515, D = 64;
        std::vector<float> x(size_t(T * heads * D));
        for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
        // dst [heads, T, D] from src [T, heads, D]; reversed walks heads backwards.
        const int64_t dims[3] = {heads, T, D};
        int64_t ss[3] = {D, heads * D, 1};
        const int64_t ds[3] = {T * D, D, 1};
        const float* src = x.data();
        if (reversed) src += (heads - 1) * D, ss[0] = -D;
        std::vector<float> got(x.size(), -1.0f);
        strided_copy(src, got.data(), 3, dims, ss, ds, 4);
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t e = 0; e < D; ++e) {
              const int64_t sh = reversed ? heads - 1 - h : h;
              ASSERT_EQ(got[size_t((h * T + t) * D + e)], x[size_t((t * heads + sh) * D + e)])
                  << threads << " threads, " << heads << " heads, reversed " << reversed;
            }
      }
  set_num_threads(saved);
}

// RoPE's pair swap: slices [..., 0:1] and [..., 1:2] of [..., P, 2], then
// concat of (odd, even) on the last axis, checked element by element.
TEST(CopyKernels, PairSlicesAndConcatSwapPairs) {
  const int64_t rows = 37, pairs = 32;
  std::vector<float> x(size_t(rows * pairs * 2));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  const Shape src{rows, pairs, 2}, half{rows, pairs, 1};
  std::vector<float> even(size_t(rows * pairs)), odd(even.size()), swapped(x.size());
  slice_copy(x.data(), src, {0, 0, 0}, {1, 1, 1}, half, 4, even.data());
  slice_copy(x.data(), src, {0, 0, 1}, {1, 1, 1}, half, 4, odd.data());
  concat({odd.data(), even.data()}, {half, half}, 2, false, 4, swapped.data());
  for (int64_t i = 0; i < rows * pairs; ++i) {
    ASSERT_EQ(even[size_t(i)], float(2 * i));
    ASSERT_EQ(odd[size_t(i)], float(2 * i + 1));
    ASSERT_EQ(swapped[size_t(2 * i)], float(2 * i + 1));
    ASSERT_EQ(swapped[size_t(2 * i + 1)], float(2 * i));
  }
}

TEST(CopyKernels, ConcatAlongEveryAxisMatchesAnIndexLoop) {
  const std::vector<int64_t> base{3, 4, 5};
  for (int64_t axis = 0; axis < 3; ++axis)
    for (const std::vector<int64_t>& parts : std::vector<std::vector<int64_t>>{{1, 1}, {2, 0, 3}, {1, 4, 1}}) {
      std::vector<Shape> shapes;
      std::vector<std::vector<uint16_t>> data;
      std::vector<const void*> ptrs;
      int64_t total = 0;
      for (size_t k = 0; k < parts.size(); ++k) {
        Shape s(base.begin(), base.end());
        s[size_t(axis)] = parts[k];
        total += parts[k];
        int64_t n = shape_numel(s);
        std::vector<uint16_t> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = uint16_t(1000 * k + size_t(i));
        shapes.push_back(s);
        data.push_back(std::move(v));
      }
      for (auto& v : data) ptrs.push_back(v.data());
      std::vector<int64_t> out_dims = base;
      out_dims[size_t(axis)] = total;
      std::vector<uint16_t> got(size_t(out_dims[0] * out_dims[1] * out_dims[2]), 0xFFFF), want = got;
      concat(ptrs, shapes, axis, false, 2, got.data());
      const std::vector<int64_t> ost = row_major(out_dims);
      for_each_index(out_dims, [&](const std::vector<int64_t>& idx) {
        int64_t p = idx[size_t(axis)];
        size_t k = 0;
        while (p >= parts[k]) p -= parts[k++];
        std::vector<int64_t> sd = base;
        sd[size_t(axis)] = parts[k];
        std::vector<int64_t> si = idx;
        si[size_t(axis)] = p;
        const std::vector<int64_t> sst = row_major(sd);
        int64_t so = 0, o = 0;
        for (size_t i = 0; i < 3; ++i) so += si[i] * sst[i], o += idx[i] * ost[i];
        want[size_t(o)] = data[k][size_t(so)];
      });
      ASSERT_EQ(got, want) << "axis " << axis << " parts " << parts.size();
    }
}

TEST(CopyKernels, PadMatchesAnIndexLoop) {
  for (PadMode mode : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate})
    for (const std::vector<int64_t>& in_dims : std::vector<std::vector<int64_t>>{{4, 6, 1}, {3, 5, 2}, {2, 3, 40}}) {
      const int rank = 3;
      std::vector<std::vector<int64_t>> pads = {{0, 0, 0, 0, 0, 1}, {1, 0, 0, 2, 1, 0}, {0, 1, 1, 1, 0, 0}};
      for (const auto& p : pads) {
        std::vector<int64_t> before(3), after(3), out_dims(3);
        bool fits = true;
        for (int i = 0; i < rank; ++i) {
          before[size_t(i)] = p[size_t(2 * i)], after[size_t(i)] = p[size_t(2 * i + 1)];
          const int64_t n = in_dims[size_t(i)];
          const int64_t limit = mode == PadMode::Reflect ? n - 1 : mode == PadMode::Replicate ? n : 1 << 20;
          fits &= before[size_t(i)] <= limit && after[size_t(i)] <= limit;
          out_dims[size_t(i)] = n + before[size_t(i)] + after[size_t(i)];
        }
        if (!fits) continue;
        const std::vector<int64_t> ist = row_major(in_dims), ost = row_major(out_dims);
        std::vector<float> x(size_t(in_dims[0] * in_dims[1] * in_dims[2]));
        for (size_t i = 0; i < x.size(); ++i) x[i] = float(i + 1);
        std::vector<float> got(size_t(out_dims[0] * out_dims[1] * out_dims[2]), -7), want = got;
        const float fill = 0.5f;
        pad(x.data(), got.data(), rank, in_dims.data(), before.data(), after.data(), mode, &fill, 4);
        for_each_index(out_dims, [&](const std::vector<int64_t>& idx) {
          int64_t so = 0, o = 0;
          bool inside = true;
          for (size_t i = 0; i < 3; ++i) {
            int64_t j = idx[i] - before[i];
            const int64_t n = in_dims[i];
            if (j < 0 || j >= n) {
              if (mode == PadMode::Constant) inside = false;
              else if (mode == PadMode::Replicate) j = j < 0 ? 0 : n - 1;
              else j = j < 0 ? -j : 2 * (n - 1) - j;
            }
            so += j * ist[i];
            o += idx[i] * ost[i];
          }
          want[size_t(o)] = inside ? x[size_t(so)] : fill;
        });
        ASSERT_EQ(got, want) << "mode " << int(mode) << " in " << in_dims[0] << "x" << in_dims[1] << "x" << in_dims[2];
      }
    }
}

}  // namespace
}  // namespace milrt::kernels
