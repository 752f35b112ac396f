// The reference executor's main loop: ops in program order, one value map.
#include <unordered_map>

#include "milrt/error.h"
#include "milrt/reference.h"
#include "reference/ref_ops.h"

namespace milrt {
namespace {

[[noreturn]] void fail_op(const Op& op, const std::string& msg) { throw_op_error(op, msg); }

bool shape_admits(const Shape& declared, const Shape& actual) {
  if (declared.size() != actual.size()) return false;
  for (size_t i = 0; i < declared.size(); ++i)
    if (declared[i] >= 0 && declared[i] != actual[i]) return false;
  return true;
}

// The values of a run by name, and the run's limits.
struct Env : std::unordered_map<std::string, Tensor> {
  int64_t max_loop_iterations = kDefaultMaxLoopIterations;
};

void gather(const Op& op, const Arg& a, const Env& env, std::vector<Tensor>& out) {
  switch (a.kind) {
    case Arg::Kind::Var: {
      auto it = env.find(a.var);
      if (it == env.end()) fail_op(op, "uses undefined value '" + a.var + "'");
      out.push_back(it->second);
      return;
    }
    case Arg::Kind::Const:
      if (a.lit->value.empty() && a.lit->type.is_tensor())
        fail_op(op, "blob literal was not loaded (call load_blobs)");
      out.push_back(a.lit->value);
      return;
    case Arg::Kind::Tuple:
      for (auto& e : a.elems) gather(op, e, env, out);
      return;
  }
}

void bind_results(const Op& op, std::vector<Tensor> results, Env& env) {
  if (results.size() != op.outputs.size())
    fail_op(op, "produced " + std::to_string(results.size()) + " results for " +
                    std::to_string(op.outputs.size()) + " declared outputs");
  for (size_t i = 0; i < results.size(); ++i) {
    const Output& o = op.outputs[i];
    Tensor& r = results[i];
    if (r.dtype() != o.type.dtype) fail_op(op, "produced " + std::string(dtype_name(r.dtype())) +
                                                    " for output '" + o.name + "' declared " + o.type.str());
    if (!shape_admits(o.type.shape, r.shape()))
      fail_op(op, "produced shape " + shape_str(r.shape()) + " for output '" + o.name + "' declared " +
                      o.type.str());
    env[o.name] = std::move(r);
  }
}

void run_ops(const std::vector<Op>& ops, Env& env);

// Runs block b of `owner` in `env` with its parameters bound to `args` and
// returns its outputs; the names it defines are gone again afterwards.
std::vector<Tensor> run_block(const Op& owner, const Block& b, const std::vector<Tensor>& args, Env& env) {
  if (args.size() != b.inputs.size())
    fail_op(owner, "a block takes " + std::to_string(b.inputs.size()) + " values, given " + std::to_string(args.size()));
  std::vector<std::string> defined;
  struct Scope {
    Env& env;
    std::vector<std::string>& names;
    ~Scope() { for (auto& n : names) env.erase(n); }
  } scope{env, defined};
  for (size_t i = 0; i < args.size(); ++i) {
    const Param& prm = b.inputs[i];
    if (args[i].dtype() != prm.type.dtype || !shape_admits(prm.type.shape, args[i].shape()))
      fail_op(owner, "block parameter '" + prm.name + "' is declared " + prm.type.str() + " but is given " +
                         std::string(dtype_name(args[i].dtype())) + " " + shape_str(args[i].shape()));
    env[prm.name] = args[i];
    defined.push_back(prm.name);
  }
  for (const Op& op : b.ops)
    for (const Output& o : op.outputs) defined.push_back(o.name);
  run_ops(b.ops, env);
  std::vector<Tensor> out;
  for (const std::string& name : b.outputs) {
    auto it = env.find(name);
    if (it == env.end()) fail_op(owner, "a block returns undefined value '" + name + "'");
    out.push_back(it->second);
  }
  return out;
}

// A predicate: one bool (coremltools' cond and while_loop conditions).
bool predicate(const Op& op, const Tensor& t, const char* what) {
  if (t.dtype() != DType::Bool || t.numel() != 1)
    fail_op(op, std::string(what) + " must be one bool, not " + std::string(dtype_name(t.dtype())) + " " +
                    shape_str(t.shape()));
  return t.at(0) != 0;
}

// cond: the branch the predicate picks; while_loop: the body while the cond
// block holds, from the loop variables' initial values (coremltools iOS15
// control_flow.py). Core ML bounds no loop; a run stops one at
// max_loop_iterations with an Error (untrusted models must not hang).
std::vector<Tensor> run_control_flow(const Op& op, Env& env) {
  if (op.blocks.size() != 2) fail_op(op, "needs two blocks, has " + std::to_string(op.blocks.size()));
  if (op.type == "cond") {
    const Arg* pred = op.arg("pred");
    if (!pred) fail_op(op, "missing required input 'pred'");
    std::vector<Tensor> p;
    gather(op, *pred, env, p);
    if (p.size() != 1) fail_op(op, "'pred' must be one value");
    return run_block(op, op.blocks[predicate(op, p[0], "'pred'") ? 0 : 1], {}, env);
  }
  if (op.type != "while_loop") fail_op(op, "only cond and while_loop have nested blocks");
  const Arg* lv = op.arg("loop_vars");
  if (!lv) fail_op(op, "missing required input 'loop_vars'");
  std::vector<Tensor> vars;
  gather(op, *lv, env, vars);
  for (int64_t iterations = 0;; ++iterations) {
    std::vector<Tensor> c = run_block(op, op.blocks[0], vars, env);
    if (c.size() != 1) fail_op(op, "the cond block must return one value");
    if (!predicate(op, c[0], "the cond block's result")) break;
    if (iterations >= env.max_loop_iterations)
      fail_op(op, "stopped after " + std::to_string(iterations) + " iterations: the loop cap " +
                      "(ReferenceOptions::max_loop_iterations, --max-loop-iterations) ends loops that do not");
    std::vector<Tensor> next = run_block(op, op.blocks[1], vars, env);
    if (next.size() != vars.size()) fail_op(op, "the body returns " + std::to_string(next.size()) + " values for " +
                                                    std::to_string(vars.size()) + " loop variables");
    vars = std::move(next);
  }
  return vars;
}

void run_ops(const std::vector<Op>& ops, Env& env) {
  for (auto& op : ops) {
    if (!op.blocks.empty() || op.type == "while_loop" || op.type == "cond") {
      bind_results(op, run_control_flow(op, env), env);
      continue;
    }
    ref::RefFn fn = ref::find_ref(op.type);
    if (!fn) fail_op(op, "the reference executor has no implementation of '" + op.type + "'");
    std::vector<std::pair<std::string, std::vector<Tensor>>> ins;
    for (auto& in : op.inputs) {
      std::vector<Tensor> vals;
      gather(op, in.arg, env, vals);
      ins.emplace_back(in.key, std::move(vals));
    }
    ref::RefCtx ctx(op, std::move(ins));
    fn(ctx);
    bind_results(op, std::move(ctx.results()), env);
    if (op.type == "coreml_update_state") {
      const Arg* st = op.arg("state");
      if (!st || st->kind != Arg::Kind::Var) fail_op(op, "'state' must name a state parameter");
      env[st->var] = env[op.outputs[0].name];
    }
  }
}

bool is_state(const Param& p) { return p.type.kind == Type::Kind::State && p.type.elems.size() == 1; }

// Runs function `fn_name`. State parameters take their values from `states`
// (zeros when absent) and every coreml_update_state writes back into it, so a
// later read_state of the same call, and the next call, see the new value.
Env run(const Program& p, const std::string& fn_name, const TensorMap& inputs, TensorMap& states,
        const ReferenceOptions& options) {
  const Function* f = p.function(fn_name);
  if (!f) throw Error(p.path + ": error: no function '" + fn_name + "'");
  Env env;
  env.max_loop_iterations = options.max_loop_iterations;
  for (auto& [name, t] : inputs) {
    const Param* prm = f->param(name);
    if (!prm) throw Error("error: function '" + fn_name + "' has no input '" + name + "'");
    if (is_state(*prm)) throw Error("error: '" + name + "' is a state of function '" + fn_name + "', not an input");
  }
  for (auto& [name, t] : states) {
    const Param* prm = f->param(name);
    if (!prm || !is_state(*prm)) throw Error("error: function '" + fn_name + "' has no state '" + name + "'");
  }
  for (auto& prm : f->params) {
    const bool state = is_state(prm);
    const Type& ty = state ? prm.type.elems[0] : prm.type;
    const TensorMap& from = state ? states : inputs;
    auto it = from.find(prm.name);
    if (it == from.end()) {
      if (!state) throw Error("error: missing input '" + prm.name + "'");
      if (ty.has_unknown_dims() || ty.dtype == DType::String)
        throw Error("error: state '" + prm.name + "' of type " + ty.str() + " needs an initial value");
      env[prm.name] = Tensor(ty.dtype, ty.shape);  // absent states start at zero
      continue;
    }
    const char* what = state ? "state" : "input";
    if (!shape_admits(ty.shape, it->second.shape()))
      throw Error(std::string("error: ") + what + " '" + prm.name + "' has shape " + shape_str(it->second.shape()) +
                  " but the function declares " + shape_str(ty.shape));
    if (it->second.dtype() == DType::String || ty.dtype == DType::String)
      throw Error(std::string("error: ") + what + " '" + prm.name + "': string values are not supported");
    env[prm.name] = it->second.cast(ty.dtype);
  }
  run_ops(f->ops, env);
  for (auto& prm : f->params)
    if (is_state(prm)) states[prm.name] = env[prm.name];
  return env;
}

// States given among `inputs` (the plain entry points) are their initial values.
Env run_plain(const Program& p, const std::string& fn_name, const TensorMap& inputs, const ReferenceOptions& options) {
  const Function* f = p.function(fn_name);
  TensorMap in, states;
  for (auto& [name, t] : inputs) {
    const Param* prm = f ? f->param(name) : nullptr;
    (prm && is_state(*prm) ? states : in)[name] = t;
  }
  return run(p, fn_name, in, states, options);
}

TensorMap outputs_of(const Program& p, const std::string& fn, const Env& env) {
  TensorMap out;
  for (auto& name : p.function(fn)->outputs) {
    auto it = env.find(name);
    if (it == env.end()) throw Error("error: function '" + fn + "' returns undefined value '" + name + "'");
    out[name] = it->second;
  }
  return out;
}
}  // namespace

TensorMap run_reference(const Program& p, const std::string& fn, const TensorMap& inputs,
                        const ReferenceOptions& options) {
  return outputs_of(p, fn, run_plain(p, fn, inputs, options));
}

TensorMap run_reference(const Program& p, const std::string& fn, const TensorMap& inputs, TensorMap& states,
                        const ReferenceOptions& options) {
  return outputs_of(p, fn, run(p, fn, inputs, states, options));
}

TensorMap run_reference_all(const Program& p, const std::string& fn, const TensorMap& inputs,
                            const ReferenceOptions& options) {
  Env env = run_plain(p, fn, inputs, options);
  return TensorMap(env.begin(), env.end());
}

}  // namespace milrt
