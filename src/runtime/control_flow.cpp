// Compiled control flow: a `while_loop` or `cond` op becomes one step that
// owns a sub-plan per block, each compiled (with the caller's options and
// passes) from the block as a function whose parameters are the block's own
// (loop variables) and the outer values it captures; outer constants it reads
// are copied in as constants, so their weights stay packed. At run time the
// step binds the sub-plans to the outer frame's memory and loops or branches.
// Loop variables live in two buffers owned by the step: the body reads the
// current ones and writes the next ones, which are copied back after each
// iteration; nothing is allocated per iteration or per run.
#include <atomic>
#include <cstring>
#include <set>

#include "ir/control_flow.h"
#include "milrt/error.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

// An empty buffer still needs an address to bind (Plan::bind unbinds on null).
alignas(64) uint8_t g_empty[64];
void* addr(Tensor& t) { return t.nbytes() ? t.mutable_data() : g_empty; }

// One block compiled as a plan.
struct SubPlan {
  // Where block output k comes from when the plan does not compute it.
  struct Out {
    enum class From { Plan, Param, Capture, Repeat } from = From::Plan;
    int index = -1;  // Param: block parameter; Capture: into `captures`; Repeat: an earlier output
    std::string name;
  };
  Plan plan;
  std::vector<std::pair<std::string, int>> captures;  // parameter name, outer value id
  std::vector<DType> capture_dtypes;                  // as the outer plan stores each capture
  std::vector<const void*> bound;                     // the capture addresses bound last
  std::vector<Out> outs;
  size_t steps = 0;

  // Binds the captures to the outer frame's current memory (rebinding only what moved).
  void bind_captures(const Frame& f) {
    for (size_t i = 0; i < captures.size(); ++i) {
      void* p = f.ptr[size_t(captures[i].second)];
      if (bound[i] == p) continue;
      plan.bind(captures[i].first, p ? p : g_empty, capture_dtypes[i]);
      bound[i] = p;
    }
  }
};

class Builder {
 public:
  Builder(const Op& op, LowerCtx& ctx, const ControlFlowEnv& env) : op_(op), ctx_(ctx), env_(env) {}

  // `params`: the block's parameters with static types (the loop variables').
  SubPlan build(const Block& b, const std::vector<Type>& params, const std::string& label) {
    SubPlan s;
    Function fn;
    fn.name = "main";
    fn.opset = env_.function.opset;
    fn.loc = b.loc.file.empty() ? op_.loc : b.loc;
    std::set<std::string> param_names;
    for (size_t i = 0; i < b.inputs.size(); ++i) {
      fn.params.push_back({b.inputs[i].name, params[i], b.inputs[i].loc});
      param_names.insert(b.inputs[i].name);
    }
    Op wrapper = op_;  // the block alone: what it captures
    wrapper.blocks = {b};
    std::vector<std::string> caps;
    for (const std::string& name : captured_values(wrapper)) {
      if (const Op* c = outer_const(name)) {
        fn.ops.push_back(*c);
        continue;
      }
      auto t = env_.types.find(name);
      if (t == env_.types.end()) throw_op_error(op_, "internal: captured value '" + name + "' has no type");
      if (!t->second.is_tensor()) throw_op_error(op_, "a block reads '" + name + "', which is not a tensor");
      Op probe;  // of_arg's checks and `need` for one value
      probe.type = op_.type;
      probe.loc = op_.loc;
      probe.outputs = op_.outputs;
      probe.inputs.push_back({"v", Arg::of_var(name), false});
      ValueRef v = ctx_.input(probe, "v");
      fn.params.push_back({name, Type::tensor(t->second.dtype, v.shape), op_.loc});
      s.captures.emplace_back(name, v.id);
      caps.push_back(name);
      s.capture_dtypes.push_back(v.dtype);
    }
    for (const Op& o : b.ops) fn.ops.push_back(o);
    std::set<std::string> computed;
    for (size_t k = 0; k < b.outputs.size(); ++k) {
      const std::string& name = b.outputs[k];
      SubPlan::Out out;
      out.name = name;
      for (size_t j = 0; j < b.inputs.size(); ++j)
        if (b.inputs[j].name == name) out.from = SubPlan::Out::From::Param, out.index = int(j);
      for (size_t j = 0; j < caps.size(); ++j)
        if (caps[j] == name) out.from = SubPlan::Out::From::Capture, out.index = int(j);
      for (size_t j = 0; j < k; ++j)
        if (b.outputs[j] == name && out.from == SubPlan::Out::From::Plan) out.from = SubPlan::Out::From::Repeat, out.index = int(j);
      if (out.from == SubPlan::Out::From::Plan) {
        if (!computed.insert(name).second) throw_op_error(op_, "internal: output '" + name + "' twice");
        fn.outputs.push_back(name);
      }
      s.outs.push_back(out);
    }
    Program prog;
    prog.version = env_.program.version;
    prog.path = env_.program.path;
    prog.base_dir = env_.program.base_dir;
    prog.functions.push_back(std::move(fn));
    CompileOptions o = env_.options;
    o.function = "main";
    o.input_shapes.clear();  // the parameters' static shapes settle the dims a block declares '?'
    for (const Param& prm : prog.functions[0].params) o.input_shapes[prm.name] = prm.type.shape;
    o.state_aliases.clear();
    o.stable_inputs.clear();
    o.taps.clear();
    o.profile = o.trace = false;
    try {
      s.plan = compile(prog, o);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (in the " + label + " of " + op_.type + " '" +
                  (op_.outputs.empty() ? op_.name : op_.outputs[0].name) + "')");
    }
    s.bound.assign(s.captures.size(), nullptr);
    s.steps = s.plan.steps().size();
    return s;
  }

 private:
  const Op* outer_const(const std::string& name) const {
    for (const Op& o : env_.function.ops)
      if (o.type == "const" && !o.outputs.empty() && o.outputs[0].name == name) return &o;
    return nullptr;
  }
  const Op& op_;
  LowerCtx& ctx_;
  const ControlFlowEnv& env_;
};

size_t bytes_of(const ValueRef& v) { return size_t(v.numel()) * dtype_size(v.dtype); }

class WhileStep final : public Step {
 public:
  WhileStep(const Op& op, LowerCtx& ctx, const ControlFlowEnv& env)
      : cancelled_(env.cancelled), max_iterations_(env.options.max_loop_iterations), where_(op_error_prefix(op)) {
    init_ = ctx.tuple(op, "loop_vars");
    for (size_t k = 0; k < op.outputs.size(); ++k) outs_.push_back(ctx.output(op, k));
    if (init_.size() != outs_.size() || op.blocks.size() != 2) throw_op_error(op, "malformed while_loop");
    std::vector<Type> params;
    for (size_t k = 0; k < init_.size(); ++k) {
      if (init_[k].shape != outs_[k].shape || init_[k].dtype != outs_[k].dtype)
        throw_op_error(op, "loop variable " + std::to_string(k) + " changes shape or dtype (" + shape_str(init_[k].shape) +
                               " to " + shape_str(outs_[k].shape) + "): only loops with static shapes compile");
      params.push_back(Type::tensor(op.outputs[k].type.dtype, init_[k].shape));
      cur_.emplace_back(init_[k].dtype, init_[k].shape);
      next_.emplace_back(init_[k].dtype, init_[k].shape);
    }
    Builder b(op, ctx, env);
    cond_ = b.build(op.blocks[0], params, "cond block");
    body_ = b.build(op.blocks[1], params, "body");
    pred_ = Tensor(DType::Bool, {});
    for (size_t k = 0; k < init_.size(); ++k) {
      cond_.plan.bind(op.blocks[0].inputs[k].name, addr(cur_[k]), init_[k].dtype);
      body_.plan.bind(op.blocks[1].inputs[k].name, addr(cur_[k]), init_[k].dtype);
    }
    const auto& cond_outs = cond_.plan.outputs();
    if (cond_.outs.size() != 1 || cond_.outs[0].from != SubPlan::Out::From::Plan || cond_outs.size() != 1 ||
        shape_numel(cond_outs[0].shape) != 1)
      throw_op_error(op, "the cond block must compute one bool (a loop whose condition is a loop variable or an "
                         "outer value does not compile)");
    cond_.plan.bind(cond_outs[0].name, addr(pred_), DType::Bool);
    for (size_t k = 0; k < body_.outs.size(); ++k)
      if (body_.outs[k].from == SubPlan::Out::From::Plan) body_.plan.bind(body_.outs[k].name, addr(next_[k]), init_[k].dtype);
    info.kernel = "while_loop (cond " + std::to_string(cond_.steps) + " steps, body " + std::to_string(body_.steps) + " steps)";
    info.ops = implemented_ops(op);
  }

  void run(const Frame& f) const override {
    for (size_t k = 0; k < init_.size(); ++k)
      if (cur_[k].nbytes()) std::memcpy(cur_[k].mutable_data(), f.ptr[size_t(init_[k].id)], cur_[k].nbytes());
    cond_.bind_captures(f);
    body_.bind_captures(f);
    for (int64_t iterations = 0;; ++iterations) {
      if (cancelled_ && cancelled_->load(std::memory_order_relaxed)) return;  // the plan throws after this step
      cond_.plan.run();
      if (!*static_cast<const uint8_t*>(pred_.data())) break;
      if (iterations >= max_iterations_)
        throw Error(where_ + "stopped after " + std::to_string(iterations) + " iterations: the loop cap " +
                    "(CompileOptions::max_loop_iterations, --max-loop-iterations) ends loops that do not");
      body_.plan.run();
      for (size_t k = 0; k < next_.size(); ++k) {
        const SubPlan::Out& o = body_.outs[k];
        const void* src = o.from == SubPlan::Out::From::Plan    ? next_[k].data()
                          : o.from == SubPlan::Out::From::Param ? cur_[size_t(o.index)].data()
                          : o.from == SubPlan::Out::From::Capture
                              ? f.ptr[size_t(body_.captures[size_t(o.index)].second)]
                              : next_[size_t(o.index)].data();
        if (src != next_[k].data() && next_[k].nbytes()) std::memcpy(next_[k].mutable_data(), src, next_[k].nbytes());
      }
      for (size_t k = 0; k < next_.size(); ++k)
        if (cur_[k].nbytes()) std::memcpy(cur_[k].mutable_data(), next_[k].data(), cur_[k].nbytes());
    }
    for (size_t k = 0; k < outs_.size(); ++k)
      if (cur_[k].nbytes()) std::memcpy(f.ptr[size_t(outs_[k].id)], cur_[k].data(), cur_[k].nbytes());
  }

 private:
  std::vector<ValueRef> init_, outs_;
  mutable std::vector<Tensor> cur_, next_;
  mutable SubPlan cond_, body_;
  Tensor pred_;
  const std::atomic<bool>* cancelled_;
  int64_t max_iterations_;
  std::string where_;  // "file:line:col: error: while_loop 'y': "
};

class CondStep final : public Step {
 public:
  CondStep(const Op& op, LowerCtx& ctx, const ControlFlowEnv& env) {
    pred_ = ctx.input(op, "pred");
    if (pred_.numel() != 1 || pred_.dtype != DType::Bool) throw_op_error(op, "'pred' must be one bool");
    for (size_t k = 0; k < op.outputs.size(); ++k) outs_.push_back(ctx.output(op, k));
    if (op.blocks.size() != 2) throw_op_error(op, "malformed cond");
    Builder b(op, ctx, env);
    for (int i = 0; i < 2; ++i) {
      branch_[i] = b.build(op.blocks[size_t(i)], {}, i == 0 ? "true branch" : "false branch");
      if (branch_[i].outs.size() != outs_.size()) throw_op_error(op, "a branch returns the wrong number of values");
    }
    info.kernel = "cond (branches of " + std::to_string(branch_[0].steps) + " and " + std::to_string(branch_[1].steps) +
                  " steps)";
    info.ops = implemented_ops(op);
  }

  void run(const Frame& f) const override {
    const int i = *f.at<const uint8_t>(pred_.id) ? 0 : 1;
    SubPlan& s = branch_[i];
    s.bind_captures(f);
    // The outputs' memory can move between runs (caller bindings): bind when it did.
    for (size_t k = 0; k < outs_.size(); ++k) {
      void* p = f.ptr[size_t(outs_[k].id)];
      if (s.outs[k].from != SubPlan::Out::From::Plan || (bound_out_[i].size() > k && bound_out_[i][k] == p)) continue;
      s.plan.bind(s.outs[k].name, p ? p : g_empty, outs_[k].dtype);
      bound_out_[i].resize(outs_.size(), nullptr);
      bound_out_[i][k] = p;
    }
    s.plan.run();
    for (size_t k = 0; k < outs_.size(); ++k) {
      const SubPlan::Out& o = s.outs[k];
      if (o.from == SubPlan::Out::From::Plan) continue;
      const void* src = o.from == SubPlan::Out::From::Capture ? f.ptr[size_t(s.captures[size_t(o.index)].second)]
                                                               : f.ptr[size_t(outs_[size_t(o.index)].id)];
      if (const size_t n = bytes_of(outs_[k]); n && src != f.ptr[size_t(outs_[k].id)])
        std::memcpy(f.ptr[size_t(outs_[k].id)], src, n);
    }
  }

 private:
  ValueRef pred_;
  std::vector<ValueRef> outs_;
  mutable SubPlan branch_[2];
  mutable std::vector<void*> bound_out_[2];
};

}  // namespace

std::unique_ptr<Step> lower_control_flow(const Op& op, LowerCtx& ctx, const ControlFlowEnv& env) {
  if (op.type == "while_loop") return std::make_unique<WhileStep>(op, ctx, env);
  if (op.type == "cond") return std::make_unique<CondStep>(op, ctx, env);
  throw_op_error(op, "has nested blocks, which only cond and while_loop have");
}

}  // namespace milrt::rt
