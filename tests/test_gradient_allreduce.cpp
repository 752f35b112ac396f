// GradientAllreduce in one process (the sums are the identity there; the
// two-rank sums are checked in test_mpi_train): how gradients are grouped
// into buckets, that a bucket starts only when complete and after every
// earlier one, and the scaling and unpacking, against values computed here.
#include <gtest/gtest.h>

#include <vector>

#include "llm/gradient_allreduce.h"
#include "milrt/error.h"

namespace milrt::llm {
namespace {

struct Grads {
  std::vector<std::vector<float>> g{std::vector<float>(3), std::vector<float>(5), std::vector<float>(40), std::vector<float>(2)};
  Grads() {
    for (size_t k = 0; k < g.size(); ++k)
      for (size_t i = 0; i < g[k].size(); ++i) g[k][i] = float(k * 100 + i) + 0.25f;
  }
  std::vector<GradientAllreduce::Gradient> views() {
    std::vector<GradientAllreduce::Gradient> v;
    for (auto& x : g) v.push_back({x.data(), x.size()});
    return v;
  }
};

// Bucket of 16 floats: 3, 5 and 2 are packed (under half), 40 is alone.
TEST(GradientAllreduce, BucketsStartWhenCompleteAndInOrder) {
  Grads d;
  GradientAllreduce r(d.views(), 16);
  EXPECT_EQ(r.buckets(), 3u);  // {0, 1} packed, {2} alone, {3} packed
  r.begin(0.5f);
  r.ready(1);
  EXPECT_EQ(r.started(), 0u) << "bucket {0, 1} is not complete";
  r.ready(3);
  EXPECT_EQ(r.started(), 0u) << "bucket {3} is complete but an earlier one has not started";
  r.ready(0);
  EXPECT_EQ(r.started(), 1u);
  r.ready(0);  // twice: no second scaling
  r.ready(2);
  EXPECT_EQ(r.started(), 3u);
  EXPECT_EQ(r.finish(), 3);
  for (size_t k = 0; k < d.g.size(); ++k)
    for (size_t i = 0; i < d.g[k].size(); ++i) EXPECT_EQ(d.g[k][i], (float(k * 100 + i) + 0.25f) * 0.5f) << k << "," << i;
}

TEST(GradientAllreduce, FinishTakesGradientsNeverMarkedReady) {
  Grads d;
  GradientAllreduce r(d.views(), 16);
  r.begin(2.0f);
  r.ready(2);
  EXPECT_EQ(r.started(), 0u);
  EXPECT_EQ(r.finish(), 3);
  for (size_t k = 0; k < d.g.size(); ++k)
    for (size_t i = 0; i < d.g[k].size(); ++i) EXPECT_EQ(d.g[k][i], (float(k * 100 + i) + 0.25f) * 2.0f) << k << "," << i;
  // A second step starts from nothing ready; a scale of 1 leaves values alone.
  r.begin(1.0f);
  EXPECT_EQ(r.started(), 0u);
  r.finish();
  EXPECT_EQ(d.g[1][4], (104.25f) * 2.0f);
}

TEST(GradientAllreduce, OrderRegroupsTheBuckets) {
  Grads d;
  GradientAllreduce r(d.views(), 16);
  r.set_order({3, 2, 1, 0});
  EXPECT_EQ(r.buckets(), 3u);  // {3} packed, {2} alone, {1, 0} packed
  r.begin(1.0f);
  r.ready(3);
  EXPECT_EQ(r.started(), 1u);
  r.ready(2);
  r.ready(0);
  EXPECT_EQ(r.started(), 2u);
  r.ready(1);
  EXPECT_EQ(r.started(), 3u);
  r.finish();
  for (size_t k = 0; k < d.g.size(); ++k)
    for (size_t i = 0; i < d.g[k].size(); ++i) EXPECT_EQ(d.g[k][i], float(k * 100 + i) + 0.25f) << k << "," << i;
  EXPECT_THROW(r.set_order({0, 1, 2}), Error);
  EXPECT_THROW(r.set_order({0, 1, 1, 3}), Error);
  EXPECT_THROW(r.set_order({0, 1, 2, 4}), Error);
}

}  // namespace
}  // namespace milrt::llm
