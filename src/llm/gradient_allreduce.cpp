#include "llm/gradient_allreduce.h"

#include <algorithm>
#include <numeric>

#include "kernels/generic/adamw.h"
#include "llm/distributed.h"
#include "milrt/error.h"

namespace milrt::llm {

GradientAllreduce::GradientAllreduce(std::vector<Gradient> grads, size_t bucket_floats)
    : grads_(std::move(grads)), bucket_floats_(std::max<size_t>(1, bucket_floats)) {
  std::vector<size_t> order(grads_.size());
  std::iota(order.begin(), order.end(), size_t(0));
  set_order(order);
}

void GradientAllreduce::set_order(const std::vector<size_t>& order) {
  std::vector<bool> present(grads_.size(), false);
  for (size_t k : order) {
    if (k >= grads_.size() || present[k]) throw Error("gradient all-reduce: the order is not a permutation of the gradients");
    present[k] = true;
  }
  if (order.size() != grads_.size()) throw Error("gradient all-reduce: the order is not a permutation of the gradients");
  order_ = order;
  buckets_.clear();
  bucket_of_.assign(grads_.size(), 0);
  size_t staged = 0;
  for (size_t k : order_) {
    const size_t n = grads_[k].n;
    if (n >= bucket_floats_ / 2) {  // large: summed in place, alone
      buckets_.push_back({{k}, n, false, 0, 0});
    } else {
      if (buckets_.empty() || !buckets_.back().packed || buckets_.back().floats + n > bucket_floats_)
        buckets_.push_back({{}, 0, true, staged, 0});
      buckets_.back().members.push_back(k);
      buckets_.back().floats += n;
      staged += n;
    }
    bucket_of_[k] = buckets_.size() - 1;
  }
  staging_.assign(staged, 0.0f);
}

void GradientAllreduce::begin(float scale) {
  scale_ = scale;
  final_.assign(grads_.size(), false);
  for (Bucket& b : buckets_) b.pending = b.members.size();
  next_bucket_ = 0;
}

void GradientAllreduce::ready(size_t k) {
  if (k >= grads_.size() || final_[k]) return;
  final_[k] = true;
  if (scale_ != 1.0f) kernels::scale_f32(grads_[k].data, scale_, int64_t(grads_[k].n));
  --buckets_[bucket_of_[k]].pending;
  start_ready_buckets();
}

void GradientAllreduce::start_ready_buckets() {
  for (; next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0; ++next_bucket_) {
    Bucket& b = buckets_[next_bucket_];
    if (!b.packed) {
      dist::start_allreduce_sum(grads_[b.members[0]].data, b.floats);
      continue;
    }
    float* dst = staging_.data() + b.offset;
    for (size_t k : b.members) dst = std::copy(grads_[k].data, grads_[k].data + grads_[k].n, dst);
    dist::start_allreduce_sum(staging_.data() + b.offset, b.floats);
  }
}

void GradientAllreduce::progress() {
  if (next_bucket_ > 0) dist::progress();
}

int64_t GradientAllreduce::finish() {
  for (size_t k : order_) ready(k);
  dist::wait_all();
  const float inv = 1.0f / float(dist::world_size());
  for (const Bucket& b : buckets_) {
    if (!b.packed) {
      float* p = grads_[b.members[0]].data;
      for (size_t i = 0; i < b.floats; ++i) p[i] *= inv;
      continue;
    }
    const float* src = staging_.data() + b.offset;
    for (size_t k : b.members) {
      for (size_t i = 0; i < grads_[k].n; ++i) grads_[k].data[i] = src[i] * inv;
      src += grads_[k].n;
    }
  }
  return int64_t(buckets_.size());
}

}  // namespace milrt::llm

namespace milrt::llm {

void agree_on_order(GradientAllreduce& r, const std::vector<size_t>& seen) {
  const size_t n = r.order().size();
  std::vector<int64_t> order(n, -1);
  if (dist::rank() == 0 && seen.size() == n) std::copy(seen.begin(), seen.end(), order.begin());
  dist::broadcast(order.data(), n * sizeof(int64_t));
  std::vector<bool> present(n, false);
  for (int64_t k : order) {
    if (k < 0 || size_t(k) >= n || present[size_t(k)]) return;  // the same verdict on every rank
    present[size_t(k)] = true;
  }
  r.set_order(std::vector<size_t>(order.begin(), order.end()));
}

}  // namespace milrt::llm
