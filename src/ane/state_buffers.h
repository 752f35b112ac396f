// The persistent buffers of a partition's states on one device: one surface
// per state home (partition.h), in the engine's fp16 [1, C, 1, S] layout,
// zeroed at creation and kept for the executor's lifetime, so the state
// survives across runs and across evictions of the programs that read it.
//
// On a device that shares memory (create_surface), a home program's surface
// is bound as its input and the state's block is read where it lies;
// otherwise the surface is host memory the executor copies in whole with
// write_input on every evaluation (counted as state copies).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ane/device.h"
#include "ane/partition.h"
#include "milrt/tensor.h"

namespace milrt::ane {

class StateBuffers {
 public:
  // `partition` and `device` must outlive the buffers.
  StateBuffers(const Partition& partition, milrt_ane_device* device);
  ~StateBuffers();
  StateBuffers(const StateBuffers&) = delete;
  StateBuffers& operator=(const StateBuffers&) = delete;

  // The surface homing the states of engine step `step`, or null when no
  // state lives there; `handle` is null when the device cannot share memory.
  uint16_t* surface_of_step(size_t step) const;
  milrt_ane_surface* handle_of_step(size_t step) const;

  // A state's whole value, read out or written in (copies: rounding to fp16).
  Tensor read(const std::string& state) const;
  void write(const std::string& state, const Tensor& value);
  // slice_update in place: `update` written at [begin, end) of each dim
  // (Python slicing, stride 1), the rest of the buffer untouched. Returns
  // the bytes written. Throws Error when update's shape is not the slice's.
  size_t write_slice(const std::string& state, const Tensor& update, const Tensor& begin, const Tensor& end);
  // Where the state's block starts: the same across runs.
  const void* data(const std::string& state) const;
  size_t bytes(const std::string& state) const;  // of its block, fp16

 private:
  struct Surface {
    milrt_ane_surface* handle = nullptr;
    uint16_t* data = nullptr;
    std::vector<uint16_t> host;  // when the device cannot share memory
  };
  const Partition& part_;
  milrt_ane_device* dev_;
  std::vector<Surface> surfaces_;
  std::map<size_t, size_t> of_step_;          // home engine step -> surface
  std::map<std::string, size_t> of_state_;    // state -> surface
};

}  // namespace milrt::ane
