#include "llm/generator.h"

#include <algorithm>
#include <set>

#include "milrt/error.h"
#include "milrt/mil.h"

namespace milrt::llm {
namespace {

void collect_vars(const Arg& a, std::vector<std::string>& out) {
  if (a.kind == Arg::Kind::Var) out.push_back(a.var);
  for (const Arg& e : a.elems) collect_vars(e, out);
}

// The ops of `f` defining `names` (those it defines) and every op they read,
// in program order.
std::vector<Op> defining_ops(const Function& f, const std::vector<std::string>& names) {
  std::map<std::string, size_t> def;
  for (size_t i = 0; i < f.ops.size(); ++i)
    for (const Output& o : f.ops[i].outputs) def[o.name] = i;
  std::set<size_t> keep;
  std::vector<std::string> todo = names;
  while (!todo.empty()) {
    const std::string n = todo.back();
    todo.pop_back();
    auto it = def.find(n);
    if (it == def.end() || !keep.insert(it->second).second) continue;
    for (const Input& in : f.ops[it->second].inputs) collect_vars(in.arg, todo);
  }
  std::vector<Op> r;
  for (size_t i : keep) r.push_back(f.ops[i]);
  return r;
}

CompileOptions compile_options(const GeneratorOptions& g) {
  CompileOptions o;
  o.activation_precision = g.activations;
  return o;
}

CompileOptions prefill_compile_options(const GeneratorOptions& g) {
  CompileOptions o = compile_options(g);
  if (prefill_uses_bf16(g)) o.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  return o;
}

}  // namespace

GeneratorOptions parse_generator_options(const std::string& weights, std::optional<int64_t> block,
                                         const std::string& activations, const std::string& prefill_precision,
                                         const std::string& scales) {
  GeneratorOptions o;
  o.weights = weights == "fp32" ? WeightStorage::inputs : parse_weight_storage(weights);
  const bool quantized = o.weights == WeightStorage::int8 || o.weights == WeightStorage::int4;
  if (block) {
    if (!quantized) throw Error("a block size is for int8 or int4 weights, not " + weights);
    if (*block <= 0) throw Error("the " + weights + " block size must be positive, got " + std::to_string(*block));
    o.block = *block;
  }
  if (!scales.empty()) {
    if (!quantized) throw Error("a scale dtype is for int8 or int4 weights, not " + weights);
    o.scales = parse_scale_dtype(scales);
  }
  if (activations == "int8") {
    if (!quantized)
      throw Error("int8 activations need int8 weights (--weights int8), not " + weights +
                  " weights (or int4: --weights int4)");
    o.activations = CompileOptions::ActivationPrecision::int8;
  } else if (activations != "fp32") {
    throw Error("unknown activation precision '" + activations + "' (fp32, int8)");
  }
  if (prefill_precision == "bf16") o.prefill_precision = CompileOptions::MatmulPrecision::bf16;
  else if (prefill_precision == "fp32") o.prefill_precision = CompileOptions::MatmulPrecision::fp32;
  else if (!prefill_precision.empty())
    throw Error("unknown prefill precision '" + prefill_precision + "' (fp32, bf16)");
  return o;
}

int64_t decode_weight_bytes(const LlamaConfig& c, WeightStorage storage, int64_t block, DType scales) {
  const int64_t kv = c.kv_dim();
  const int64_t matrix = c.layers * (2 * c.dim * c.dim + 2 * kv * c.dim + 3 * c.hidden * c.dim) + c.vocab * c.dim;
  int64_t per_matrix_bytes = 4 * matrix;
  if (storage == WeightStorage::fp16 || storage == WeightStorage::bf16) per_matrix_bytes = 2 * matrix;
  const int64_t scale_bytes = (scales == DType::FP16 ? 2 : 4) * (matrix / std::max<int64_t>(block, 1));
  if (storage == WeightStorage::int8) per_matrix_bytes = matrix + scale_bytes;
  if (storage == WeightStorage::int4) per_matrix_bytes = matrix / 2 + scale_bytes;
  const int64_t fp32_vectors = (2 * c.layers + 1) * c.dim + c.dim;  // gains, one embedding row
  return per_matrix_bytes + 4 * fp32_vectors;
}

double prefill_flops(const LlamaConfig& c, int64_t tokens) {
  const double layer_matrix = double(2 * c.dim * c.dim + 2 * c.kv_dim() * c.dim + 3 * c.hidden * c.dim);
  const double t = double(tokens);
  const double attention_pairs = t * (t + 1) / 2;  // (query, visible key) pairs
  return 2 * double(c.layers) * layer_matrix * t + 2 * double(c.vocab * c.dim) +
         2 * 2 * double(c.layers) * double(c.dim) * attention_pairs;
}

bool prefill_uses_bf16(const GeneratorOptions& g) {
  if (g.prefill_precision) return *g.prefill_precision == CompileOptions::MatmulPrecision::bf16;
  return g.weights == WeightStorage::bf16;
}

Generator::Generator(LlamaWeights weights, GeneratorOptions options) : cfg_(weights.cfg), opt_(options) {
  check_llama_weights(weights);
  if (opt_.activations != CompileOptions::ActivationPrecision::exact && opt_.weights != WeightStorage::int8 &&
      opt_.weights != WeightStorage::int4)
    throw Error(std::string("generate: int8 activations need int8 weights, not ") +
                (opt_.weights == WeightStorage::inputs ? "fp32" : weight_storage_name(opt_.weights)) +
                " (or int4 weights)");
  logits_.assign(size_t(cfg_.vocab), 0.0f);
  if (opt_.weights == WeightStorage::inputs) {
    w_ = std::move(weights);
    decode_ = compile(build_llama_decoder(cfg_, 1));
    for (auto& [name, t] : w_.tensors) decode_.bind(name, t);
  } else {
    Program d = build_llama_decoder(weights, 1, {opt_.weights, opt_.block, DType::FP32, opt_.scales});
    // The program now holds the weights in their storage: the fp32 tensors
    // are not needed again (freed here unless the caller kept a copy).
    weights.tensors.clear();
    std::vector<std::string> names{"wcls"};
    for (const WeightSpec& s : llama_weight_specs(cfg_)) names.push_back(s.name);
    weight_ops_ = defining_ops(d.functions.at(0), names);
    decode_ = compile(d, compile_options(opt_));
  }
  bind_common(decode_);
  decode_.bind("tokens", &token_);
}

void Generator::bind_common(Plan& p) {
  p.bind("pos", &pos_in_);
  p.bind("logits", logits_.data());
}

void Generator::check_token(int32_t t) const {
  if (t < 0 || t >= cfg_.vocab)
    throw Error("generate: token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                std::to_string(cfg_.vocab) + ")");
}

void Generator::reset() {
  decode_.reset_state();
  pos_ = 0;
}

// For const storages: the inputs-form program of T tokens with its weight
// inputs replaced by the decode program's weight ops, so that every plan
// reads the same stored tensors and no fp32 copy has to be kept around to
// build programs for new prompt lengths. The programs differ only in how the
// weights are defined, and in that a shared classifier in a compressed
// storage is a matrix "wcls" of its own (the embedding gather keeps fp32).
Program Generator::prefill_program(int64_t T) const {
  Program p = build_llama_decoder(cfg_, T);
  if (opt_.weights == WeightStorage::inputs) return p;
  Function& f = p.functions.at(0);
  std::set<std::string> defined;
  for (const Op& op : weight_ops_)
    for (const Output& o : op.outputs) defined.insert(o.name);
  std::erase_if(f.params, [&](const Param& prm) { return defined.count(prm.name) > 0; });
  if (cfg_.shared_classifier && defined.count("wcls"))
    for (Op& op : f.ops)
      if (op.type == "matmul")
        for (Input& in : op.inputs)
          if (in.arg.kind == Arg::Kind::Var && in.arg.var == "tok_embeddings") in.arg.var = "wcls";
  f.ops.insert(f.ops.begin(), weight_ops_.begin(), weight_ops_.end());
  verify(p);
  return p;
}

Generator::Prefill& Generator::prefill_plan(int64_t T) {
  auto it = prefill_.find(T);
  if (it == prefill_.end()) {
    Plan plan = compile(prefill_program(T), prefill_compile_options(opt_));
    it = prefill_.emplace(T, Prefill{std::move(plan), std::vector<int32_t>(size_t(T))}).first;
    Plan& p = it->second.plan;
    for (auto& [name, t] : w_.tensors) p.bind(name, t);  // inputs storage only
    bind_common(p);
    p.bind("tokens", it->second.tokens.data());
    if (profiling_) p.set_profiling(true, tracing_);
  }
  return it->second;
}

void Generator::set_profiling(bool on, bool trace) {
  profiling_ = on, tracing_ = trace;
  decode_.set_profiling(on, trace);
  for (auto& [t, pf] : prefill_) pf.plan.set_profiling(on, trace);
}

const Plan* Generator::compiled_prefill(int64_t tokens) const {
  auto it = prefill_.find(tokens);
  return it == prefill_.end() ? nullptr : &it->second.plan;
}

void Generator::prepare(int64_t tokens) {
  if (tokens > 1 && tokens <= cfg_.seq) prefill_plan(tokens);
}

const float* Generator::prefill(const std::vector<int32_t>& ids) {
  const int64_t T = int64_t(ids.size());
  if (T == 0) throw Error("generate: the prompt has no tokens (it needs at least BOS)");
  if (T > cfg_.seq)
    throw Error("generate: the prompt has " + std::to_string(T) + " tokens, more than the model's seq_len " +
                std::to_string(cfg_.seq));
  for (int32_t t : ids) check_token(t);
  reset();
  if (T == 1) return decode(ids[0]);
  Prefill& pf = prefill_plan(T);
  std::copy(ids.begin(), ids.end(), pf.tokens.begin());
  pos_in_ = 0;
  // Cache rows beyond T are masked out and never read, but zeroing them keeps
  // the decode plan's cache identical to one built token by token.
  pf.plan.reset_state();
  pf.plan.run();
  for (const std::string& n : llama_cache_names(cfg_)) decode_.set_state(n, pf.plan.state(n));
  pos_ = T;
  return logits_.data();
}

const float* Generator::decode(int32_t token) {
  check_token(token);
  if (pos_ >= cfg_.seq)
    throw Error("generate: the context is full (seq_len " + std::to_string(cfg_.seq) + " tokens)");
  token_ = token;
  pos_in_ = int32_t(pos_);
  decode_.run();
  ++pos_;
  return logits_.data();
}

}  // namespace milrt::llm
