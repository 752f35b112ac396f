// The partition's steps in order over one map of named values.
#include "ane/executor.h"

#include <cstring>

#include "milrt/error.h"

namespace milrt::ane {
namespace {

constexpr size_t kErr = 512;

std::string step_name(size_t i) { return "engine program (step " + std::to_string(i) + ")"; }

}  // namespace

Executor::Executor(const Partition& partition, milrt_ane_device* device, ExecutorOptions options)
    : part_(partition), dev_(device), opt_(options), loaded_(partition.steps.size(), nullptr),
      last_used_(partition.steps.size(), 0) {
  if (!dev_) throw Error("ane: no device");
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
  return prog;
}

void Executor::run_engine(size_t i, TensorMap& env) {
  const EngineProgram& ep = part_.steps[i].engine;
  std::vector<Tensor> operands;
  for (auto& s : ep.input.slots) operands.push_back(env.at(s.name));
  Tensor in = pack(ep.input, operands);
  milrt_ane_program* prog = program_for(i);
  char err[kErr] = {0};
  auto check = [&](int rc, const char* what) {
    if (rc != 0) throw Error("ane: " + std::string(dev_->name) + " " + what + " failed for " + step_name(i) + ": " + err);
  };
  check(dev_->write_input(dev_->context, prog, 0, in.data(), in.nbytes(), err, kErr), "write_input");
  check(dev_->evaluate(dev_->context, prog, err, kErr), "evaluate");
  Tensor out(DType::FP16, ep.output.shape());
  check(dev_->read_output(dev_->context, prog, 0, out.mutable_data(), out.nbytes(), err, kErr), "read_output");
  std::vector<Tensor> results = unpack(ep.output, out);
  for (size_t k = 0; k < results.size(); ++k) env[ep.output.slots[k].name] = std::move(results[k]);
  ++stats_.engine_runs;
}

TensorMap Executor::run(const TensorMap& inputs) {
  TensorMap states;
  return run(inputs, states);
}

TensorMap Executor::run(const TensorMap& inputs, TensorMap& states) {
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
  for (auto& [name, t] : inputs)
    if (!f.param(name)) throw Error("ane: function '" + part_.function + "' has no input '" + name + "'");
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
    TensorMap out;
    if (s.whole_function) {
      TensorMap in;
      for (auto& n : s.inputs)
        if (inputs.count(n)) in[n] = inputs.at(n);
      out = run_reference(part_.program, part_.function, in, states);
    } else {
      TensorMap in;
      for (auto& n : s.inputs) in[n] = env.at(n);
      out = run_reference(s.host, "main", in);
    }
    for (auto& [n, t] : out) env[n] = t;
  }
  TensorMap result;
  for (auto& o : f.outputs) result[o] = env.at(o);
  return result;
}

}  // namespace milrt::ane
