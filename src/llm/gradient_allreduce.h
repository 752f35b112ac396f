// The data-parallel average of a training step's gradients over ranks,
// started bucket by bucket while the backward pass is still running.
//
// The gradients are taken in one order, the same on every rank: at first the
// task's weight order, then (set_order) the order in which the step plan
// finalises them, as rank 0 saw it. Tensors of at least half a bucket are
// summed in place; smaller ones are packed together into buckets of about
// 4 MB, so that no sum is tiny. A bucket's sum starts (non-blocking) once
// all its gradients are final and every earlier bucket has started, so that
// every rank starts the same sums in the same order whatever its timing.
//
// Per element the arithmetic is that of scaling every gradient, then a
// blocking all-reduce, then dividing by the number of ranks: each gradient
// is multiplied by `scale` (1 / (accumulation x loss scale)) when it is
// final, the bucket summed over ranks, the sum multiplied by 1 / ranks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace milrt::llm {

class GradientAllreduce {
 public:
  struct Gradient {
    float* data;
    size_t n;
  };
  explicit GradientAllreduce(std::vector<Gradient> grads, size_t bucket_floats = size_t(1) << 20);

  // The order to pack and start in: a permutation of the gradient indices.
  void set_order(const std::vector<size_t>& order);
  const std::vector<size_t>& order() const { return order_; }
  size_t buckets() const { return buckets_.size(); }
  // Buckets whose sum has started this step (before finish(): the overlap).
  size_t started() const { return next_bucket_; }

  // A new step whose gradients will be multiplied by `scale` before the sum.
  void begin(float scale);
  // Gradient k is final for this step (nothing writes it any more): scale
  // it, and start every bucket that is now complete and next in order.
  void ready(size_t k);
  // Advances the started sums (call between kernel steps).
  void progress();
  // Marks every gradient final, waits for the sums, unpacks the buckets and
  // divides by the number of ranks. Returns the number of sums started this
  // step (buckets and in-place tensors).
  int64_t finish();

 private:
  struct Bucket {
    std::vector<size_t> members;  // gradient indices, in order
    size_t floats = 0;
    bool packed = false;          // small gradients copied into `staging`
    size_t offset = 0;            // into staging
    size_t pending = 0;           // members not yet final this step
  };
  void start_ready_buckets();

  std::vector<Gradient> grads_;
  size_t bucket_floats_;
  std::vector<size_t> order_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // per gradient
  std::vector<float> staging_;     // packed buckets, back to back
  std::vector<bool> final_;
  size_t next_bucket_ = 0;         // the first bucket not yet started
  float scale_ = 1;
};

// Collective: every rank adopts the order rank 0 passes as `seen` (the order
// its step plan finalised the gradients) when that names each gradient once;
// otherwise every rank keeps its current order.
void agree_on_order(GradientAllreduce& r, const std::vector<size_t>& seen);

}  // namespace milrt::llm
