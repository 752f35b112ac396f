// The partition's steps in order over one map of named values.
#include "ane/executor.h"

#include <algorithm>
#include <cstring>

#include "milrt/error.h"

namespace milrt::ane {
namespace {

constexpr size_t kErr = 512;

std::string step_name(size_t i) { return "engine program (step " + std::to_string(i) + ")"; }

milrt_ane_device* check_device(milrt_ane_device* d) {
  if (!d) throw Error("ane: no device");
  return d;
}

}  // namespace

Executor::Executor(const Partition& partition, milrt_ane_device* device, ExecutorOptions options)
    : part_(partition), dev_(check_device(device)), opt_(options), states_(partition, device),
      loaded_(partition.steps.size(), nullptr), last_used_(partition.steps.size(), 0) {
  if (opt_.max_resident == 0) throw Error("ane: max_resident must be at least 1");
}

Executor::~Executor() {
  for (auto*& p : loaded_)
    if (p) dev_->unload(dev_->context, p), p = nullptr;
}

size_t Executor::resident() const {
  size_t n = 0;
  for (auto* p : loaded_) n += p != nullptr;
  return n;
}

milrt_ane_program* Executor::program_for(size_t i) {
  last_used_[i] = ++clock_;
  if (loaded_[i]) return loaded_[i];
  while (resident() >= opt_.max_resident) {  // evict the least recently used
    size_t lru = loaded_.size();
    for (size_t j = 0; j < loaded_.size(); ++j)
      if (loaded_[j] && (lru == loaded_.size() || last_used_[j] < last_used_[lru])) lru = j;
    dev_->unload(dev_->context, loaded_[lru]);
    loaded_[lru] = nullptr;
    ++stats_.evictions;
  }
  const size_t used = dev_->compile_count(dev_->context);
  if (used >= opt_.max_compiles)
    throw Error("ane: compile budget exhausted (" + std::to_string(used) + " of " + std::to_string(opt_.max_compiles) +
                " compiles used) before " + step_name(i) + "; on macOS restart the process from a checkpoint, "
                "or raise --ane-resident so fewer programs are evicted");
  const EngineProgram& ep = part_.steps[i].engine;
  milrt_ane_weight_file w{ep.weight_path.c_str(), ep.weights.data(), ep.weights.size()};
  const size_t in_bytes = ep.input.bytes(), out_bytes = ep.output.bytes();
  char err[kErr] = {0};
  milrt_ane_program* prog = nullptr;
  ++stats_.compiles;
  if (dev_->compile(dev_->context, ep.mil.data(), ep.mil.size(), &w, ep.weights.empty() ? 0 : 1, &in_bytes, 1,
                    &out_bytes, 1, &prog, err, kErr) != 0)
    throw Error("ane: " + std::string(dev_->name) + " could not compile " + step_name(i) + ": " + err);
  loaded_[i] = prog;
  if (milrt_ane_surface* s = states_.handle_of_step(i))  // the states' home: read in place, bound again after evictions
    if (dev_->bind_input(dev_->context, prog, 0, s, err, kErr) != 0)
      throw Error("ane: " + std::string(dev_->name) + " could not bind the state surface of " + step_name(i) + ": " + err);
  return prog;
}

void Executor::run_engine(size_t i, TensorMap& env) {
  const Step& st = part_.steps[i];
  const EngineProgram& ep = st.engine;
  // A home program's input is its states' surface: pack the other operands
  // into their blocks around the states.
  uint16_t* home = states_.surface_of_step(i);
  Tensor in;
  if (!home) in = Tensor(DType::FP16, ep.input.shape());
  uint16_t* dst = home ? home : in.mutable_ptr<uint16_t>();
  for (size_t k = 0; k < ep.input.slots.size(); ++k) {
    const std::string& name = ep.input.slots[k].name;
    if (home && std::count(st.state_inputs.begin(), st.state_inputs.end(), name)) continue;
    write_slot(ep.input, k, value(name, env), dst);
    stats_.packed_bytes += size_t(ep.input.slots[k].channels * ep.input.S) * 2;
  }
  milrt_ane_program* prog = program_for(i);
  char err[kErr] = {0};
  auto check = [&](int rc, const char* what) {
    if (rc != 0) throw Error("ane: " + std::string(dev_->name) + " " + what + " failed for " + step_name(i) + ": " + err);
  };
  if (!home) {
    check(dev_->write_input(dev_->context, prog, 0, in.data(), in.nbytes(), err, kErr), "write_input");
  } else if (!states_.handle_of_step(i)) {  // the device cannot share memory: the states too are copied in
    check(dev_->write_input(dev_->context, prog, 0, home, ep.input.bytes(), err, kErr), "write_input");
    stats_.state_copy_bytes += ep.input.bytes();
  }
  check(dev_->evaluate(dev_->context, prog, err, kErr), "evaluate");
  Tensor out(DType::FP16, ep.output.shape());
  check(dev_->read_output(dev_->context, prog, 0, out.mutable_data(), out.nbytes(), err, kErr), "read_output");
  std::vector<Tensor> results = unpack(ep.output, out);
  for (size_t k = 0; k < results.size(); ++k) env[ep.output.slots[k].name] = std::move(results[k]);
  ++stats_.engine_runs;
}

Tensor Executor::arg_value(const Arg& a, const TensorMap& env) {
  return a.kind == Arg::Kind::Const ? a.lit->value : value(a.var, env);
}

Tensor Executor::value(const std::string& name, const TensorMap& env) {
  if (auto it = env.find(name); it != env.end()) return it->second;
  auto v = part_.views.find(name);
  if (v == part_.views.end()) return env.at(name);
  stats_.state_copy_bytes += states_.bytes(v->second);
  return states_.read(v->second);
}

void Executor::set_state(const std::string& name, const Tensor& value) {
  const StateHome& h = part_.state(name);
  if (value.shape() != h.type.shape)
    throw Error("ane: state '" + name + "' is " + h.type.str() + ", the value given is " + shape_str(value.shape()));
  states_.write(name, value);
}

void Executor::run_writes(const Step& st, TensorMap& env) {
  for (auto& v : st.save_before) env[v] = value(v, env);  // contents a later step reads, about to be overwritten
  for (const StateWrite& w : st.writes) {
    if (w.in_place) {
      stats_.state_write_bytes +=
          states_.write_slice(w.state, arg_value(w.update, env), arg_value(w.begin, env), arg_value(w.end, env));
    } else {
      states_.write(w.state, value(w.value, env));
      stats_.state_copy_bytes += states_.bytes(w.state);
    }
  }
}

TensorMap Executor::run(const TensorMap& inputs, TensorMap& states) {
  for (auto& [name, t] : states) set_state(name, t);
  TensorMap out = run(inputs);
  for (auto& h : part_.states) states[h.name] = states_.read(h.name);
  return out;
}

TensorMap Executor::run(const TensorMap& inputs) {
  const Function& f = *part_.program.function(part_.function);
  TensorMap env;
  for (auto& prm : f.params) {
    if (prm.type.kind == Type::Kind::State) continue;
    auto it = inputs.find(prm.name);
    if (it == inputs.end()) throw Error("ane: missing input '" + prm.name + "' (" + prm.type.str() + ")");
    const Tensor& t = it->second;
    bool shape_ok = t.rank() == int(prm.type.shape.size());
    for (size_t d = 0; shape_ok && d < prm.type.shape.size(); ++d)
      shape_ok = prm.type.shape[d] < 0 || prm.type.shape[d] == t.shape()[d];
    if (t.dtype() != prm.type.dtype || !shape_ok)
      throw Error("ane: input '" + prm.name + "' is " + std::string(dtype_name(t.dtype())) + " " +
                  shape_str(t.shape()) + ", the function takes " + prm.type.str());
    env[prm.name] = t;
  }
  for (auto& [name, t] : inputs) {
    const Param* prm = f.param(name);
    if (!prm) throw Error("ane: function '" + part_.function + "' has no input '" + name + "'");
    if (prm->type.kind == Type::Kind::State)
      throw Error("ane: '" + name + "' is a state of function '" + part_.function + "', not an input: set it with set_state");
  }
  for (auto& op : f.ops)  // constants the function returns directly
    if (op.type == "const" && op.has("val") && op.arg("val")->kind == Arg::Kind::Const)
      env[op.outputs[0].name] = op.arg("val")->lit->value;

  for (size_t i = 0; i < part_.steps.size(); ++i) {
    const Step& s = part_.steps[i];
    if (s.kind == Step::Kind::Engine) {
      run_engine(i, env);
      continue;
    }
    ++stats_.host_runs;
    if (s.kind == Step::Kind::StateWrite) {
      run_writes(s, env);
      continue;
    }
    TensorMap in;
    for (auto& n : s.inputs) in[n] = value(n, env);
    TensorMap out = run_reference(s.host, "main", in);
    for (auto& [n, t] : out) env[n] = t;
  }
  TensorMap result;
  for (auto& o : f.outputs) result[o] = value(o, env);
  return result;
}

}  // namespace milrt::ane
