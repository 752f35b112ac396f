#include "plan_handle.h"

#include <pybind11/stl.h>

#include <algorithm>

#include "convert.h"
#include "kernels/threads.h"
#include "milrt/error.h"

namespace milrt::py {
namespace {

constexpr int kAligned = 0x0100;  // NPY_ARRAY_ALIGNED (pybind11 names only C/F contiguity)

// A zero-size port is never read or written, but a null pointer would unbind it.
alignas(64) uint8_t nothing[64];

// Takes the mutex without holding the GIL while waiting: the thread that
// holds the mutex may need the GIL to finish.
class Lock {
 public:
  explicit Lock(std::mutex& m) : lock_(m, std::try_to_lock) {
    if (!lock_.owns_lock()) {
      pb::gil_scoped_release release;
      lock_.lock();
    }
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

bool exact_in_storage(DType declared, DType storage) {
  return declared == storage || declared == DType::FP64 || declared == DType::Int64;
}

void* data_or_nothing(void* p, int64_t numel) { return numel ? p : nothing; }

}  // namespace

PlanHandle::PlanHandle(Plan plan, int threads) : plan_(std::move(plan)), threads_(threads) {
  auto make = [](const Plan::Port& port, Port& p) {
    p.port = port;
    p.storage = Plan::storage_dtype(port.dtype);
    p.exact = exact_in_storage(port.dtype, p.storage);
    p.key = pb::str(port.name);
    p.dims.assign(port.shape.begin(), port.shape.end());
  };
  for (auto& port : plan_.inputs()) make(port, in_.emplace_back());
  for (auto& port : plan_.outputs()) {
    OutPort& o = out_.emplace_back();
    make(port, o);
    o.numpy = numpy_dtype(port.dtype);
    o.numpy_dtype = dtype_of(o.numpy, "output '" + port.name + "'");
  }
}

PlanHandle::Port* PlanHandle::find(const std::string& name, bool* is_output) {
  for (auto& p : in_)
    if (p.port.name == name) return *is_output = false, &p;
  for (auto& p : out_)
    if (p.port.name == name) return *is_output = true, &p;
  return nullptr;
}

void PlanHandle::bind_input(Port& p, pb::handle value, std::vector<pb::object>& keep) {
  const std::string& name = p.port.name;
  pb::array a = pb::isinstance<pb::array>(value) ? pb::reinterpret_borrow<pb::array>(value) : pb::array::ensure(value);
  if (!a) {
    PyErr_Clear();
    throw Error("error: input '" + name + "': " + std::string(pb::str(pb::type::handle_of(value).attr("__name__"))) +
                " is not an array");
  }
  if (!same_shape(a, p.port.shape))
    throw Error("error: input '" + name + "' has shape " + shape_of(a) + " but the plan was compiled for " +
                shape_str(p.port.shape));
  const DType given = dtype_of(a.dtype(), "input '" + name + "'");
  const int64_t n = shape_numel(p.port.shape);
  if (given == p.storage && p.exact && (a.flags() & pb::array::c_style) && (a.flags() & kAligned)) {
    // The plan never writes its inputs: read-only arrays bind too.
    plan_.bind(name, data_or_nothing(const_cast<void*>(a.data()), n), p.storage);
    keep.push_back(a);
    return;
  }
  if (p.staged.empty()) p.staged = Tensor(p.storage, p.port.shape);
  pb::array c = pb::array::ensure(a, pb::array::c_style | kAligned);
  convert(c.data(), given, n, p.port.dtype, p.staged.mutable_data(), p.storage);
  plan_.bind(name, data_or_nothing(p.staged.mutable_data(), n), p.storage);
}

void PlanHandle::check_extra_keys(const pb::dict& inputs) const {
  for (auto item : inputs) {
    if (!pb::isinstance<pb::str>(item.first))
      throw Error("error: input names are strings, got " + std::string(pb::repr(item.first)));
    std::string key = item.first.cast<std::string>();
    if (std::none_of(in_.begin(), in_.end(), [&](const Port& p) { return p.port.name == key; })) {
      for (auto& s : plan_.states())
        if (s.name == key) throw Error("error: '" + key + "' is a state of the plan, not an input (pass state=)");
      std::string names;
      for (auto& p : in_) names += (names.empty() ? "" : ", ") + p.port.name;
      throw Error("error: the plan has no input '" + key + "' (its inputs: " + names + ")");
    }
  }
}

void PlanHandle::restore_bindings() {
  for (auto& p : in_) p.bound ? plan_.bind(p.port.name, p.bound_ptr, p.storage) : plan_.unbind(p.port.name);
  for (auto& p : out_) p.bound ? plan_.bind(p.port.name, p.bound_ptr, p.storage) : plan_.unbind(p.port.name);
}

void PlanHandle::run_unlocked() {
  if (threads_ <= 0) return plan_.run();
  const int before = kernels::num_threads();
  kernels::set_num_threads(threads_);
  struct Restore {
    int n;
    ~Restore() { kernels::set_num_threads(n); }
  } restore{before};
  plan_.run();
}

pb::dict PlanHandle::run(pb::object inputs) {
  Lock lock(mu_);
  const bool bound_run = inputs.is_none();
  struct Restore {
    PlanHandle* h;
    ~Restore() { h->restore_bindings(); }
  } restore{this};
  std::vector<pb::object> keep;  // the caller's arrays, in case another thread drops them mid-run
  if (!bound_run) {
    pb::dict d = PyDict_Check(inputs.ptr()) ? pb::reinterpret_borrow<pb::dict>(inputs) : pb::dict(inputs);
    for (auto& p : in_) {
      PyObject* v = PyDict_GetItemWithError(d.ptr(), p.key.ptr());
      if (!v) {
        if (PyErr_Occurred()) throw pb::error_already_set();
        throw Error("error: missing input '" + p.port.name + "' (" + std::string(dtype_name(p.port.dtype)) + ", " +
                    shape_str(p.port.shape) + ")");
      }
      bind_input(p, v, keep);
    }
    if (size_t(PyDict_Size(d.ptr())) != in_.size()) check_extra_keys(d);
  }
  std::vector<pb::array> results;
  results.reserve(out_.size());
  for (auto& o : out_) {
    if (bound_run && o.bound) {
      results.push_back(pb::reinterpret_borrow<pb::array>(o.bound));
      continue;
    }
    pb::array& a = results.emplace_back(o.numpy, o.dims);
    const int64_t n = shape_numel(o.port.shape);
    if (o.numpy_dtype != o.storage && o.staged.empty()) o.staged = Tensor(o.storage, o.port.shape);
    void* dst = o.numpy_dtype == o.storage ? a.mutable_data() : o.staged.mutable_data();
    plan_.bind(o.port.name, data_or_nothing(dst, n), o.storage);
  }
  {
    pb::gil_scoped_release release;
    run_unlocked();
  }
  pb::dict out;
  for (size_t i = 0; i < out_.size(); ++i) {
    OutPort& o = out_[i];
    if (!(bound_run && o.bound) && o.numpy_dtype != o.storage)
      convert(o.staged.data(), o.storage, o.staged.numel(), o.port.dtype, results[i].mutable_data(), o.numpy_dtype);
    out[o.key] = results[i];
  }
  return out;
}

void PlanHandle::bind(const std::string& name, pb::object value) {
  Lock lock(mu_);
  bool is_output = false;
  Port* p = find(name, &is_output);
  if (!p) throw Error("error: cannot bind '" + name + "': the plan has no input or output of that name");
  if (!pb::isinstance<pb::array>(value))
    throw Error("error: cannot bind '" + name + "': bind() takes a NumPy array, got " +
                std::string(pb::str(pb::type::handle_of(value).attr("__name__"))));
  auto a = pb::reinterpret_borrow<pb::array>(value);
  const pb::dtype want = numpy_dtype(p->storage);
  if (!a.dtype().is(want) && !a.dtype().equal(want))
    throw Error("error: cannot bind '" + name + "': array of dtype " + std::string(pb::str(a.dtype())) +
                " for a port stored as " + std::string(pb::str(want)) + " (declared " +
                std::string(dtype_name(p->port.dtype)) + "); bind() does not convert");
  if (!same_shape(a, p->port.shape))
    throw Error("error: cannot bind '" + name + "': array of shape " + shape_of(a) + " for a port of shape " +
                shape_str(p->port.shape));
  if (!(a.flags() & pb::array::c_style) || !(a.flags() & kAligned))
    throw Error("error: cannot bind '" + name + "': the array is not C-contiguous and aligned (np.ascontiguousarray)");
  if (is_output && !a.writeable()) throw Error("error: cannot bind output '" + name + "': the array is read-only");
  void* ptr = data_or_nothing(const_cast<void*>(a.data()), shape_numel(p->port.shape));
  plan_.bind(name, ptr, p->storage);
  p->bound = value;
  p->bound_ptr = ptr;
}

void PlanHandle::unbind(const std::string& name) {
  Lock lock(mu_);
  bool is_output = false;
  Port* p = find(name, &is_output);
  if (!p) throw Error("error: cannot unbind '" + name + "': the plan has no input or output of that name");
  plan_.unbind(name);
  p->bound = pb::object();
  p->bound_ptr = nullptr;
}

pb::array PlanHandle::state(const std::string& name) {
  Lock lock(mu_);
  return to_array(plan_.state(name));
}

void PlanHandle::set_state(const std::string& name, pb::object value) {
  Lock lock(mu_);
  const Plan::Port* port = nullptr;
  for (auto& s : plan_.states())
    if (s.name == name) port = &s;
  if (!port) throw Error("error: the plan has no state '" + name + "'");
  pb::array a = pb::array::ensure(value, pb::array::c_style | kAligned);
  if (!a) {
    PyErr_Clear();
    throw Error("error: state '" + name + "': the value is not an array");
  }
  if (!same_shape(a, port->shape))
    throw Error("error: state '" + name + "' has shape " + shape_str(port->shape) + ", the value " + shape_of(a));
  // Rounded to the declared dtype as an input would be.
  Tensor t(port->dtype, port->shape);
  if (t.numel())
    convert(a.data(), dtype_of(a.dtype(), "state '" + name + "'"), t.numel(), port->dtype, t.mutable_data(), port->dtype);
  plan_.set_state(name, t);
}

void PlanHandle::reset_state() {
  Lock lock(mu_);
  plan_.reset_state();
}

pb::list PlanHandle::describe(const std::vector<Plan::Port>& ports) const {
  pb::list r;
  for (auto& p : ports)
    r.append(pb::make_tuple(p.name, std::string(dtype_name(p.dtype)), pb::tuple(pb::cast(p.shape))));
  return r;
}

}  // namespace milrt::py
