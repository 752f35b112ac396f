// Surfaces for states, and the in-place slice write. See state_buffers.h.
#include "ane/state_buffers.h"

#include <algorithm>

#include "ane/lower.h"
#include "milrt/error.h"

namespace milrt::ane {
namespace {

constexpr size_t kErr = 512;

// Python slice bounds of one dim, stride 1.
int64_t clamp_index(int64_t v, int64_t n) { return std::clamp(v < 0 ? v + n : v, int64_t(0), n); }

}  // namespace

StateBuffers::StateBuffers(const Partition& partition, milrt_ane_device* device) : part_(partition), dev_(device) {
  auto make = [&](const Packing& k) {
    Surface s;
    if (dev_->create_surface) {
      void* data = nullptr;
      char err[kErr] = {0};
      if (dev_->create_surface(dev_->context, k.bytes(), &s.handle, &data, err, kErr) != 0)
        throw Error("ane: " + std::string(dev_->name) + " could not create a state surface: " + err);
      s.data = static_cast<uint16_t*>(data);
    } else {
      s.host.assign(k.bytes() / 2, 0);
      s.data = s.host.data();
    }
    surfaces_.push_back(std::move(s));
    return surfaces_.size() - 1;
  };
  try {
    for (const StateHome& h : part_.states) {
      if (h.step == StateHome::npos) {
        of_state_[h.name] = make(h.packing);
      } else {
        if (!of_step_.count(h.step)) of_step_[h.step] = make(h.packing);
        of_state_[h.name] = of_step_[h.step];
      }
    }
  } catch (...) {
    for (auto& s : surfaces_)
      if (s.handle) dev_->free_surface(dev_->context, s.handle);
    throw;
  }
}

StateBuffers::~StateBuffers() {
  for (auto& s : surfaces_)
    if (s.handle) dev_->free_surface(dev_->context, s.handle);
}

uint16_t* StateBuffers::surface_of_step(size_t step) const {
  auto it = of_step_.find(step);
  return it == of_step_.end() ? nullptr : surfaces_[it->second].data;
}

milrt_ane_surface* StateBuffers::handle_of_step(size_t step) const {
  auto it = of_step_.find(step);
  return it == of_step_.end() ? nullptr : surfaces_[it->second].handle;
}

Tensor StateBuffers::read(const std::string& state) const {
  const StateHome& h = part_.state(state);
  return read_slot(h.packing, h.slot, surfaces_[of_state_.at(state)].data);
}

void StateBuffers::write(const std::string& state, const Tensor& value) {
  const StateHome& h = part_.state(state);
  write_slot(h.packing, h.slot, value, surfaces_[of_state_.at(state)].data);
}

size_t StateBuffers::write_slice(const std::string& state, const Tensor& update, const Tensor& begin,
                                 const Tensor& end) {
  const StateHome& h = part_.state(state);
  const Shape& xs = h.type.shape;
  const size_t rank = xs.size();
  if (size_t(begin.numel()) != rank || size_t(end.numel()) != rank)
    throw Error("ane: slice_update of state '" + state + "': begin and end need one entry per dim of " + shape_str(xs));
  Shape lo(rank), span(rank);
  for (size_t d = 0; d < rank; ++d) {
    lo[d] = clamp_index(int64_t(begin.at(d)), xs[d]);
    span[d] = std::max<int64_t>(0, clamp_index(int64_t(end.at(d)), xs[d]) - lo[d]);
  }
  if (update.shape() != span)
    throw Error("ane: slice_update of state '" + state + "': update has shape " + shape_str(update.shape()) +
                ", the slice " + shape_str(span));
  const Packing::Slot& s = h.packing.slots[h.slot];
  uint16_t* surface = surfaces_[of_state_.at(state)].data;
  for (int64_t i = 0; i < update.numel(); ++i) {
    int64_t rest = i, j = 0, stride = 1;  // j: the element of the state that update element i replaces
    for (size_t d = rank; d-- > 0;) {
      j += (lo[d] + rest % span[d]) * stride;
      rest /= span[d];
      stride *= xs[d];
    }
    surface[slot_element(h.packing, s, j)] = fp16_bits(update, i);
  }
  return size_t(update.numel()) * 2;
}

const void* StateBuffers::data(const std::string& state) const {
  const StateHome& h = part_.state(state);
  return surfaces_[of_state_.at(state)].data + h.packing.slots[h.slot].channel * h.packing.S;
}

size_t StateBuffers::bytes(const std::string& state) const {
  const StateHome& h = part_.state(state);
  return size_t(h.packing.slots[h.slot].channels * h.packing.S) * 2;
}

}  // namespace milrt::ane
