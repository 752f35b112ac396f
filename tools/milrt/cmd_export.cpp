// milrt export: a llama2.c checkpoint as a Core ML bundle (DIR.mlmodelc:
// model.mil, weights/weight.bin, metadata.json), holding the KV-cache decode
// program (--tokens 1) or a T-token prefill program of
// src/llm/llama_decoder.h, with its weights stored as --weights says.
// With --format mlpackage (or an .mlpackage --out) the same program as a
// package. The model appears whole or not at all (model_dir_writer.h).
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "model_dir_writer.h"
#include "llm/checkpoint.h"
#include "llm/llama_decoder.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"
#include "passes/rewriter.h"

namespace milrt::cli {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct Args {
  std::string checkpoint, out, weights = "fp32", cache = "fp16", format, scales = "fp16";
  int64_t block = 32, tokens = 1;
  bool overwrite = false;
};

// coremlc writes an iOS18 constexpr op's inputs as inline literals
// (`constexpr_blockwise_shift_scale(data = tensor<int8, [..]>(BLOBFILE(..)),
// scale = ..)`, see mil-format.md), not as references to const ops; the
// builder makes const ops, so those used only by the constexpr op are folded
// into it here.
void inline_constexpr_inputs(Function& f) {
  std::unordered_map<std::string, int> uses = passes::count_uses(f);
  std::map<std::string, const Op*> consts;
  for (const Op& op : f.ops)
    if (op.type == "const" && op.outputs.size() == 1 && op.arg("val") && op.arg("val")->kind == Arg::Kind::Const)
      consts[op.outputs[0].name] = &op;
  std::map<std::string, Arg> inlined;  // const output -> its literal
  for (Op& op : f.ops) {
    if (op.type.rfind("constexpr_", 0) != 0) continue;
    for (Input& in : op.inputs) {
      if (in.arg.kind != Arg::Kind::Var || uses[in.arg.var] != 1) continue;
      auto c = consts.find(in.arg.var);
      if (c == consts.end()) continue;
      const std::string var = in.arg.var;
      in.arg = *c->second->arg("val");
      inlined.emplace(var, in.arg);
    }
  }
  std::erase_if(f.ops, [&](const Op& op) { return op.type == "const" && inlined.count(op.outputs[0].name); });
}

// Core ML's spelling of a MIL dtype in metadata.json ("Float32", "Int32").
std::string coreml_dtype(DType t) {
  switch (t) {
    case DType::FP32: return "Float32";
    case DType::FP16: return "Float16";
    case DType::FP64: return "Double";
    case DType::Int32: return "Int32";
    default: return std::string(dtype_name(t));
  }
}

json schema_entry(const std::string& name, const Type& tensor, const char* kind) {
  std::string dims = "[", pretty;
  for (size_t i = 0; i < tensor.shape.size(); ++i) {
    dims += (i ? ", " : "") + std::to_string(tensor.shape[i]);
    pretty += (i ? " × " : " ") + std::to_string(tensor.shape[i]);
  }
  dims += "]";
  const std::string dt = coreml_dtype(tensor.dtype);
  json e;
  e["hasShapeFlexibility"] = "0";
  e["isOptional"] = "0";
  e["dataType"] = dt;
  e["formattedType"] = std::string(kind) + " (" + dt + pretty + ")";
  e["shortDescription"] = "";
  e["shape"] = dims;
  e["name"] = name;
  e["type"] = kind;
  return e;
}

// "slice_by_index" -> "SliceByIndex", the histogram's spelling (without
// coremlc's per-op opset prefixes, which depend on its own op tables).
std::string camel(const std::string& op) {
  std::string r;
  bool up = true;
  for (char c : op) {
    if (c == '_') { up = true; continue; }
    r += up ? char(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return r;
}

// The metadata.json coremlc writes beside model.mil (the fields the real
// bundles in shared/testdata carry): input, output and state schemas, the op
// histogram, availability. Core ML does not need it to run the program;
// tools (Xcode, coremltools' inspection) read it.
std::string metadata(const Function& f, const llm::LlamaConfig& cfg, const Args& a) {
  std::map<std::string, Type> out_types;
  std::map<std::string, int> histogram;
  for (const Op& op : f.ops) {
    for (const Output& o : op.outputs) out_types[o.name] = o.type;
    if (op.type != "const") ++histogram[camel(op.type)];
  }
  json inputs = json::array(), states = json::array(), outputs = json::array(), hist = json::object();
  for (const Param& p : f.params) {
    if (p.type.kind == Type::Kind::State) states.push_back(schema_entry(p.name, p.type.elems.at(0), "State"));
    else inputs.push_back(schema_entry(p.name, p.type, "MultiArray"));
  }
  for (const std::string& o : f.outputs) outputs.push_back(schema_entry(o, out_types.at(o), "MultiArray"));
  for (auto& [k, v] : histogram) hist[k] = v;
  json m;
  m["metadataOutputVersion"] = "3.0";
  m["shortDescription"] = a.tokens == 1 ? "Llama decode step (KV cache in states), exported by milrt"
                                        : "Llama prefill of " + std::to_string(a.tokens) +
                                              " tokens (KV cache in states), exported by milrt";
  m["outputSchema"] = outputs;
  m["modelParameters"] = json::array();
  m["specificationVersion"] = 9;  // iOS18: states
  m["storagePrecision"] = a.weights == "fp32" ? "Float32" : a.weights == "fp16" ? "Mixed (Float16, Float32)"
                          : a.weights == "int8" ? "Mixed (Float32, Int8)" : "Mixed (BFloat16, Float32)";
  m["mlProgramOperationTypeHistogram"] = hist;
  m["computePrecision"] = "Float32";
  m["isUpdatable"] = "0";
  m["stateSchema"] = states;
  m["availability"] = {{"macOS", "15.0"}, {"tvOS", "18.0"}, {"visionOS", "2.0"},
                       {"watchOS", "11.0"}, {"iOS", "18.0"}, {"macCatalyst", "18.0"}};
  m["modelType"] = {{"name", "MLModelType_mlProgram"}};
  m["inputSchema"] = inputs;
  m["userDefinedMetadata"] = {{"milrt.source", fs::path(a.checkpoint).filename().string()},
                              {"milrt.weights", a.weights},
                              {"milrt.block", std::to_string(a.block)},
                              {"milrt.tokens", std::to_string(a.tokens)},
                              {"milrt.config", "dim " + std::to_string(cfg.dim) + ", hidden " +
                                                   std::to_string(cfg.hidden) + ", layers " +
                                                   std::to_string(cfg.layers) + ", heads " +
                                                   std::to_string(cfg.heads) + ", kv_heads " +
                                                   std::to_string(cfg.kv_heads) + ", vocab " +
                                                   std::to_string(cfg.vocab) + ", seq " + std::to_string(cfg.seq)}};
  m["generatedClassName"] = fs::path(a.out).stem().string();
  m["method"] = "predict";
  return json::array({m}).dump(2) + "\n";
}

void run(Args a) {
  const llm::WeightStorage storage = llm::parse_weight_storage(a.weights);
  if (a.block <= 0) throw Error("export: --block must be positive, got " + std::to_string(a.block));
  const DType scales = llm::parse_scale_dtype(a.scales);
  while (a.out.size() > 1 && a.out.back() == '/') a.out.pop_back();
  if (a.out.empty()) throw Error("export: --out is empty");
  const fs::path out = fs::absolute(a.out);
  const bool package = model_dir_format("export", a.format, out) == ModelDirFormat::mlpackage;
  // Before the work, as the write checks it again.
  if (fs::exists(fs::symlink_status(out)) && !a.overwrite)
    throw Error("export: " + out.string() + " exists; give --overwrite to replace it");

  llm::LlamaWeights w = llm::load_llama2c_checkpoint(a.checkpoint);
  if (a.tokens < 1 || a.tokens > w.cfg.seq)
    throw Error("export: --tokens must be in 1.." + std::to_string(w.cfg.seq) + " (the model's seq_len), got " +
                std::to_string(a.tokens));
  if (a.cache != "fp16" && a.cache != "fp32") throw Error("export: --cache must be fp16 or fp32, got '" + a.cache + "'");
  llm::DecoderOptions opt{storage, a.block, a.cache == "fp16" ? DType::FP16 : DType::FP32, scales};
  Program p = llm::build_llama_decoder(w, a.tokens, opt);
  // After the build, so that a failed bf16 export says one line, the error.
  if (storage == llm::WeightStorage::bf16)
    std::fprintf(stderr, "warning: Core ML cannot load bf16 weights (milrt can); for Apple's toolchain use --weights fp16 or int8\n");
  inline_constexpr_inputs(p.functions.at(0));

  write_model_dir("export", out, package ? ModelDirFormat::mlpackage : ModelDirFormat::mlmodelc, a.overwrite,
                  [&](const fs::path& tmp) {
                    if (package) {
                      save_mlpackage(p, tmp.string(), 16);
                    } else {
                      save_model(p, tmp.string(), 16);
                      write_file_atomic((tmp / "metadata.json").string(), metadata(p.functions.at(0), w.cfg, a));
                    }
                  });
  std::error_code ec;

  const fs::path blob = (package ? out / "Data" / "com.apple.CoreML" : out) / "weights" / "weight.bin";
  const uintmax_t bytes = fs::exists(blob, ec) ? fs::file_size(blob, ec) : 0;
  std::string program = a.tokens == 1 ? "decode (1 token per run)" : "prefill (" + std::to_string(a.tokens) + " tokens per run)";
  std::string weights = a.weights + (storage == llm::WeightStorage::int8 ? " (block " + std::to_string(a.block) + ")" : "");
  std::printf("exported %s program, %s weights, %s KV cache, weight.bin %ju bytes: %s\n", program.c_str(),
              weights.c_str(), a.cache.c_str(), bytes, out.string().c_str());
}

}  // namespace

void add_export(CLI::App& app) {
  static Args a;
  auto* cmd = app.add_subcommand("export", "Write a llama2.c checkpoint as a Core ML model (DIR.mlmodelc or DIR.mlpackage)");
  cmd->add_option("--checkpoint", a.checkpoint, "llama2.c checkpoint (version 0 or 1)")->required();
  cmd->add_option("--out", a.out, "the directory to write, e.g. model.mlmodelc or model.mlpackage")->required();
  cmd->add_option("--format", a.format,
                  "mlmodelc (a compiled bundle: model.mil + weights) or mlpackage (what coremltools writes: "
                  "Manifest.json + protobuf model); default from --out's extension");
  cmd->add_option("--weights", a.weights, "storage of the matrices: fp32 (default), fp16, bf16 (milrt only), int8");
  cmd->add_option("--block", a.block, "int8: elements of a row sharing one scale (default 32)");
  cmd->add_option("--scales", a.scales,
                  "int8, int4: the block scales' dtype, fp16 (default; the weight is then fp16, as Core ML defines "
                  "constexpr_blockwise_shift_scale) or fp32");
  cmd->add_option("--tokens", a.tokens, "tokens per run: 1 = the decode program (default), T > 1 = a T-token prefill");
  cmd->add_option("--cache", a.cache,
                  "KV-cache state dtype: fp16 (default: Core ML accepts only fp16 states) or fp32 (exactly milrt generate)");
  cmd->add_flag("--overwrite", a.overwrite, "replace an existing bundle at --out (after the new one is complete)");
  cmd->callback([] { run(a); });
}

}  // namespace milrt::cli
