// milrt.Plan: a compiled plan run from Python.
//
// run(dict) converts each array as Core ML does (convert.h) and binds it, or
// binds the array itself when it already is in the plan's storage dtype,
// C-contiguous and needs no rounding (an fp32 array for an fp32 input): the
// per-call cost is then a few dictionary lookups and one new array per
// output. run(dict) leaves the user's bind()ings as they were.
//
// The GIL is released while the plan runs; a mutex keeps one call at a time
// on a plan (Plan is not thread-safe), taken with the GIL released so that
// a thread waiting for it never blocks the one that holds it.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <mutex>
#include <string>
#include <vector>

#include "milrt/plan.h"

namespace milrt::py {

namespace pb = pybind11;

class PlanHandle {
 public:
  PlanHandle(Plan plan, int threads);

  // inputs: a dict of arrays (or anything NumPy takes), or None after bind().
  pb::dict run(pb::object inputs);
  void bind(const std::string& name, pb::object array);
  void unbind(const std::string& name);
  void cancel() { plan_.cancel(); }

  pb::array state(const std::string& name);
  void set_state(const std::string& name, pb::object value);
  void reset_state();

  // (name, dtype name, shape) per port.
  pb::list describe(const std::vector<Plan::Port>& ports) const;
  const Plan& plan() const { return plan_; }

 private:
  struct Port {
    Plan::Port port;
    DType storage;
    bool exact;         // storage holds every value of the declared dtype
    pb::str key;
    std::vector<pb::ssize_t> dims;
    pb::object bound;   // the user's bind(), kept alive while bound
    void* bound_ptr = nullptr;
    Tensor staged;      // storage-dtype copy for arrays that need converting
  };
  struct OutPort : Port {
    pb::dtype numpy;    // what run() returns
    DType numpy_dtype;
  };
  Port* find(const std::string& name, bool* is_output);
  void bind_input(Port& p, pb::handle value, std::vector<pb::object>& keep);
  void check_extra_keys(const pb::dict& inputs) const;
  void restore_bindings();
  void run_unlocked();

  Plan plan_;
  int threads_;
  std::vector<Port> in_;
  std::vector<OutPort> out_;
  std::mutex mu_;
};

}  // namespace milrt::py
