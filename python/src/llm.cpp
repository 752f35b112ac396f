// milrt._milrt.llm: training (src/llm/trainer.h) and KV-cache generation
// (src/llm/generator.h) of llama2.c-format models, as `milrt train` and
// `milrt generate` set them up (tools/milrt/cmd_train.cpp, cmd_generate.cpp).
// The Python side (python/milrt/llm.py) gives the defaults and the generator
// protocol; this file does the work with the GIL released.
#include "llm.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>

#include "kernels/threads.h"
#include "llm/checkpoint.h"
#include "llm/generator.h"
#include "llm/llama_config.h"
#include "llm/sample.h"
#include "llm/tokenizer.h"
#include "llm/train_progress.h"
#include "llm/train_tasks.h"
#include "llm/trainer.h"
#include "milrt/error.h"

namespace milrt::py {
namespace {
namespace pb = pybind11;

// Sets the kernels' thread count for one call and restores it after.
struct ThreadScope {
  int before;
  explicit ThreadScope(std::optional<int> threads) : before(kernels::num_threads()) {
    if (threads && *threads < 1) throw Error("error: threads must be at least 1, got " + std::to_string(*threads));
    if (threads) kernels::set_num_threads(*threads);
  }
  ~ThreadScope() { kernels::set_num_threads(before); }
};

// One generation, run.c's loop (cmd_generate.cpp) cut at each token: next()
// returns the next text piece, or nullopt at the end (steps reached or BOS).
class Generation {
 public:
  Generation(const std::string& checkpoint, const std::string& prompt, int64_t steps, double temperature, double top_p,
             std::optional<uint64_t> seed, const std::string& tokenizer, const std::string& weights,
             std::optional<int64_t> block, const std::string& activations, const std::string& prefill_precision,
             bool echo, std::optional<int> threads, const std::string& scales)
      : threads_(threads) {
    if (threads && *threads < 1) throw Error("error: threads must be at least 1, got " + std::to_string(*threads));
    pb::gil_scoped_release release;
    ThreadScope ts(threads_);
    const llm::GeneratorOptions gopt =
        llm::parse_generator_options(weights, block, activations, prefill_precision, scales);
    llm::LlamaWeights w = llm::load_llama2c_checkpoint(checkpoint);
    cfg_ = w.cfg;
    tok_ = tokenizer.empty() ? llm::byte_tokenizer() : llm::load_llama2c_tokenizer(tokenizer, cfg_.vocab);
    if (tok_->vocab_size() != cfg_.vocab)
      throw Error("generate: " + checkpoint + " has a vocabulary of " + std::to_string(cfg_.vocab) +
                  " tokens: give its tokenizer (without one, bytes: 259 tokens)");
    steps_ = steps <= 0 || steps > cfg_.seq ? cfg_.seq : steps;
    temperature_ = temperature < 0 ? 0 : temperature;
    top_p_ = top_p <= 0 || top_p > 1 ? 0.9 : top_p;
    rng_ = seed && *seed ? *seed : uint64_t(std::time(nullptr));
    ids_ = tok_->encode(prompt, /*bos=*/true, /*eos=*/false);
    if (int64_t(ids_.size()) > cfg_.seq)
      throw Error("generate: the prompt has " + std::to_string(ids_.size()) + " tokens, more than the model's seq_len " +
                  std::to_string(cfg_.seq));
    gen_ = std::make_unique<llm::Generator>(std::move(w), gopt);
    if (echo)
      for (size_t i = 1; i < ids_.size(); ++i) pending_ += llm::printable_piece(tok_->decode(ids_[i - 1], ids_[i]));
    token_ = ids_.back();
    pos_ = int64_t(ids_.size()) - 1;
  }

  // The next piece ("" pieces are skipped by the caller); nullopt when done.
  std::optional<std::string> next() {
    if (!pending_.empty()) {
      std::string s;
      s.swap(pending_);
      return s;
    }
    if (done_) return std::nullopt;
    pb::gil_scoped_release release;
    ThreadScope ts(threads_);
    if (!logits_) logits_ = gen_->prefill(ids_);
    if (pos_ >= steps_) return finish();
    const int32_t next = llm::pick_token(logits_, cfg_.vocab, temperature_, top_p_, llm::xorshift_coin(rng_));
    if (next == llm::Tokenizer::kBos) return finish();
    std::string piece = llm::printable_piece(tok_->decode(token_, next));
    token_ = next;
    ++generated_;
    if (++pos_ >= steps_) done_ = true;
    else logits_ = gen_->decode(token_);
    return piece;
  }

  int64_t generated() const { return generated_; }
  const llm::LlamaConfig& config() const { return cfg_; }

 private:
  std::optional<std::string> finish() {
    done_ = true;
    return std::nullopt;
  }

  std::optional<int> threads_;
  llm::LlamaConfig cfg_;
  std::shared_ptr<const llm::Tokenizer> tok_;
  std::unique_ptr<llm::Generator> gen_;
  std::vector<int32_t> ids_;
  std::string pending_;
  const float* logits_ = nullptr;
  int64_t steps_ = 0, pos_ = 0, generated_ = 0;
  double temperature_ = 0, top_p_ = 0.9;
  uint64_t rng_ = 0;
  int32_t token_ = 0;
  bool done_ = false;
};

pb::dict row_dict(const llm::TrainLog::Row& r) {
  pb::dict d;
  d["step"] = r.step;
  d["loss"] = r.loss;
  d["val_loss"] = std::isnan(r.val_loss) ? pb::object(pb::none()) : pb::object(pb::float_(r.val_loss));
  d["lr"] = r.lr;
  d["grad_norm"] = r.grad_norm;
  d["ms"] = r.ms;
  d["tok_s"] = r.tok_s;
  d["comm_ms"] = r.comm_ms;
  return d;
}

// `milrt train` for a Llama config (run_llama in cmd_train.cpp), without the
// samples and reports: the log as a dict. Every argument is explicit here;
// python/milrt/llm.py gives the CLI's defaults.
pb::dict train_llama(const std::string& config, const std::string& out, int64_t steps, const std::string& data,
                     pb::object progress, int64_t batch, int64_t seq, int64_t accum, double lr, int64_t warmup,
                     int64_t eval_every, int64_t eval_batches, uint64_t seed, const std::string& tokenizer,
                     const std::string& init, const std::string& precision, int checkpoint_version, bool overwrite,
                     bool verbose, std::optional<int> threads) {
  namespace fs = std::filesystem;
  if (steps < 1) throw Error("train: steps must be at least 1, got " + std::to_string(steps));
  if (batch < 1 || accum < 1 || eval_batches < 1 || seq < 0)
    throw Error("train: batch, accum and eval_batches must be at least 1, seq at least 0");
  if (precision != "fp32" && precision != "bf16" && precision != "fp16")
    throw Error("train: precision must be 'fp32', 'bf16' or 'fp16', got '" + precision + "'");
  if (checkpoint_version != 0 && checkpoint_version != 1)
    throw Error("train: checkpoint_version must be 0 or 1, got " + std::to_string(checkpoint_version));
  if (!out.empty() && !overwrite)
    for (const char* f : {"checkpoint.bin", "train_state.bin", "run.json"})
      if (fs::exists(fs::path(out) / f))
        throw Error("train: " + out + " already holds a run (" + f + "): pass overwrite=True to replace it");

  llm::TrainLog log;
  llm::LlamaConfig cfg;
  {
    pb::gil_scoped_release release;
    ThreadScope ts(threads);
    TensorMap weights;
    if (!init.empty()) {
      llm::LlamaWeights w = llm::load_llama2c_checkpoint(init);
      cfg = w.cfg;
      weights = std::move(w.tensors);
    } else {
      auto preset = llm::llama_preset(config);
      if (!preset) {
        std::string names;
        for (const std::string& n : llm::llama_preset_names()) names += (names.empty() ? "" : ", ") + n;
        throw Error("train: unknown config '" + config + "' (" + names + ")");
      }
      cfg = *preset;
    }
    std::shared_ptr<const llm::Tokenizer> tok;
    if (tokenizer.empty()) {
      tok = llm::byte_tokenizer();
      if (weights.empty()) cfg.vocab = tok->vocab_size();
    } else {
      tok = llm::load_llama2c_tokenizer(tokenizer, cfg.vocab);
    }
    llm::LlamaTaskOptions o;
    o.batch = batch;
    o.seq = seq;
    o.data = data;
    o.seed = seed;
    o.checkpoint_version = checkpoint_version;
    o.compute = precision == "fp16" ? DType::FP16 : DType::FP32;
    llm::TrainTask task = llm::llama_task(cfg, tok, o);
    if (weights.empty()) weights = llm::init_llama_weights(cfg, seed).tensors;

    llm::TrainOptions t;
    t.steps = steps;
    t.accum = accum;
    t.adamw.lr = lr;
    t.adamw.warmup = warmup;
    t.adamw.total_steps = steps;
    t.eval_every = eval_every;
    t.eval_batches = eval_batches;
    t.out_dir = out;
    t.precision = precision == "bf16" ? CompileOptions::MatmulPrecision::bf16 : CompileOptions::MatmulPrecision::fp32;
    // Every step: the progress callback, and Ctrl-C (Python's SIGINT handler
    // only flags it) raised as KeyboardInterrupt. Either exception leaves
    // train() as pybind11::error_already_set and reaches Python as itself.
    // verbose: the CLI's progress lines on stdout (never the live line).
    std::unique_ptr<llm::TrainProgress> lines;
    if (verbose) {
      llm::ProgressOptions p;
      p.steps = steps;
      p.accum = accum;
      p.tokens_per_microstep = task.tokens_per_microstep;
      lines = std::make_unique<llm::TrainProgress>(p);
    }
    t.on_step = [&progress, &lines](int64_t step, const llm::TrainLog& l) {
      if (lines) lines->on_step(step, l);
      pb::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() != 0) throw pb::error_already_set();
      if (!progress.is_none()) progress(row_dict(l.rows.back()));
    };
    log = llm::train(task, t, weights);
  }

  pb::list rows;
  for (const llm::TrainLog::Row& r : log.rows) rows.append(row_dict(r));
  double final_val = NAN;
  for (const llm::TrainLog::Row& r : log.rows)
    if (!std::isnan(r.val_loss)) final_val = r.val_loss;
  std::vector<double> ms;
  for (const llm::TrainLog::Row& r : log.rows) ms.push_back(r.ms);
  std::sort(ms.begin(), ms.end());
  pb::dict d;
  d["config"] = cfg.str();
  d["parameters"] = cfg.param_count();
  d["rows"] = rows;
  d["final_val_loss"] = std::isnan(final_val) ? pb::object(pb::none()) : pb::object(pb::float_(final_val));
  d["ms_per_step"] = ms.empty() ? 0.0 : ms[ms.size() / 2];
  d["compile_ms"] = log.compile_ms;
  d["train_ms"] = log.train_ms;
  d["wall_ms"] = log.wall_ms;
  d["checkpoint"] = out.empty() ? pb::object(pb::none()) : pb::object(pb::str((fs::path(out) / "checkpoint.bin").string()));
  return d;
}

}  // namespace

void bind_llm(pb::module_& m) {
  pb::module_ llm = m.def_submodule("llm", "training and generation of llama2.c-format models");
  pb::class_<Generation>(llm, "Generation")
      .def(pb::init<const std::string&, const std::string&, int64_t, double, double, std::optional<uint64_t>,
                    const std::string&, const std::string&, std::optional<int64_t>, const std::string&,
                    const std::string&, bool, std::optional<int>, const std::string&>(),
           pb::arg("checkpoint"), pb::arg("prompt"), pb::arg("steps"), pb::arg("temperature"), pb::arg("top_p"),
           pb::arg("seed"), pb::arg("tokenizer"), pb::arg("weights"), pb::arg("block"), pb::arg("activations"),
           pb::arg("prefill_precision"), pb::arg("echo"), pb::arg("threads"), pb::arg("scales"))
      // bytes: a piece may be part of a UTF-8 character (byte tokens).
      .def("next", [](Generation& g) -> pb::object {
        std::optional<std::string> s = g.next();
        if (!s) return pb::none();
        return pb::bytes(*s);
      })
      .def_property_readonly("generated", &Generation::generated)
      .def_property_readonly("seq_len", [](const Generation& g) { return g.config().seq; })
      .def_property_readonly("vocab", [](const Generation& g) { return g.config().vocab; });
  llm.def("train", &train_llama, pb::arg("config"), pb::arg("out"), pb::arg("steps"), pb::arg("data"),
          pb::arg("progress"), pb::arg("batch"), pb::arg("seq"), pb::arg("accum"), pb::arg("lr"), pb::arg("warmup"),
          pb::arg("eval_every"), pb::arg("eval_batches"), pb::arg("seed"), pb::arg("tokenizer"), pb::arg("init"),
          pb::arg("precision"), pb::arg("checkpoint_version"), pb::arg("overwrite"), pb::arg("verbose"),
          pb::arg("threads"));
  llm.def("presets", &llm::llama_preset_names);
  llm.def("adamw_defaults", [] {
    const llm::AdamWConfig a;
    pb::dict d;
    d["lr"] = a.lr, d["warmup"] = a.warmup, d["beta1"] = a.beta1, d["beta2"] = a.beta2, d["eps"] = a.eps;
    d["weight_decay"] = a.weight_decay, d["grad_clip"] = a.grad_clip, d["min_lr_ratio"] = a.min_lr_ratio;
    return d;
  });
}

}  // namespace milrt::py
