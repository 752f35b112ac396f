// The simulated device: the table's calls over a set of parsed programs, each
// run with the reference executor. See sim_device.h for the rules enforced.
#include "ane/sim_device.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/reference.h"

struct milrt_ane_program {
  milrt::Program program;
  std::string input_name;
  milrt::Type input_type;
  std::vector<milrt::Type> output_types;
  milrt::Tensor input;                // last written
  milrt_ane_surface* bound = nullptr;  // bind_input: read in place instead of `input`
  std::vector<milrt::Tensor> outputs;  // last evaluated
  std::string temp_dir;               // the private copy of model.mil and weights/
};

struct milrt_ane_surface {
  std::vector<uint8_t> bytes;
};

namespace milrt::ane {
namespace {

struct Sim {
  SimLimits limits;
  size_t compiles = 0;
  std::set<milrt_ane_program*> loaded;
  std::set<milrt_ane_surface*> surfaces;
  size_t input_bytes_written = 0;  // through write_input: the copies binding avoids
};

// Copies a one-line message into the caller's buffer and returns 1.
int fail(char* error, size_t error_size, const std::string& msg) {
  if (error && error_size) {
    std::string line = msg.substr(0, msg.find('\n'));
    std::snprintf(error, error_size, "%s", line.c_str());
  }
  return 1;
}

// fp16 and fp32 surfaces only; rank 4, [1, C, 1, S], every dim within limits.
void check_io(const Type& t, const std::string& what, size_t declared_bytes, int64_t max_dim) {
  if (!t.is_tensor() || (t.dtype != DType::FP16 && t.dtype != DType::FP32))
    throw Error("ane-sim: " + what + " is " + t.str() + "; the engine's surfaces are fp16 (or fp32)");
  if (t.shape.size() != 4 || t.shape[0] != 1 || t.shape[2] != 1 || t.shape[1] < 1 || t.shape[3] < 1)
    throw Error("ane-sim: " + what + " is " + t.str() + "; the engine's tensors are [1, C, 1, S]");
  for (int64_t d : t.shape)
    if (d > max_dim) throw Error("ane-sim: " + what + " has a dim above " + std::to_string(max_dim) + ": " + t.str());
  size_t bytes = size_t(shape_numel(t.shape)) * dtype_size(t.dtype);
  if (bytes != declared_bytes)
    throw Error("ane-sim: " + what + " " + t.str() + " is " + std::to_string(bytes) + " bytes, but the surface is " +
                std::to_string(declared_bytes));
}

// "@model_path/weights/weight.bin" -> "weights/weight.bin"; refuses paths
// that would leave the private directory.
std::string relative_weight_path(const std::string& mil_path) {
  const std::string prefix = "@model_path/";
  if (mil_path.rfind(prefix, 0) != 0) throw Error("ane-sim: weight path '" + mil_path + "' does not start with @model_path/");
  std::filesystem::path rel(mil_path.substr(prefix.size()));
  for (auto& part : rel)
    if (part == ".." || part == "." || part.empty()) throw Error("ane-sim: bad weight path '" + mil_path + "'");
  if (rel.empty() || rel.is_absolute()) throw Error("ane-sim: bad weight path '" + mil_path + "'");
  return rel.string();
}

std::string make_private_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "milrt-ane-sim-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw Error("ane-sim: cannot create a temporary directory: " + std::string(std::strerror(errno)));
  return tmpl;
}

void write_file(const std::filesystem::path& path, const void* data, size_t size) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(size));
  if (!f) throw Error("ane-sim: cannot write " + path.string());
}

void verify_dims(const Function& f, int64_t max_dim) {
  for (const Op& op : f.ops)
    for (const Output& o : op.outputs)
      for (int64_t d : o.type.shape)
        if (d > max_dim)
          throw Error("ane-sim: '" + o.name + "' (" + op.type + ") has a dim above " + std::to_string(max_dim) + ": " +
                      o.type.str());
}

std::unique_ptr<milrt_ane_program> build(const Sim& sim, const std::string& text, const milrt_ane_weight_file* weights,
                                         size_t n_weights, const size_t* input_bytes, size_t n_inputs,
                                         const size_t* output_bytes, size_t n_outputs) {
  if (n_inputs != 1)
    throw Error("ane-sim: " + std::to_string(n_inputs) + " inputs: the engine takes exactly one (error 0x1d); pack them");
  auto prog = std::make_unique<milrt_ane_program>();
  prog->temp_dir = make_private_dir();
  try {
    std::filesystem::path dir(prog->temp_dir);
    write_file(dir / "model.mil", text.data(), text.size());
    for (size_t i = 0; i < n_weights; ++i)
      write_file(dir / relative_weight_path(weights[i].mil_path), weights[i].data, weights[i].size);
    prog->program = parse_mil(text, (dir / "model.mil").string(), dir.string());
    load_blobs(prog->program);
    verify(prog->program);
    const Function* f = prog->program.function("main");
    if (!f) throw Error("ane-sim: the program has no function 'main'");
    if (prog->program.functions.size() != 1) throw Error("ane-sim: the program has more than one function");
    if (f->params.size() != 1)
      throw Error("ane-sim: function main has " + std::to_string(f->params.size()) +
                  " parameters; the engine takes exactly one input (error 0x1d)");
    const Param& in = f->params[0];
    if (in.type.kind == Type::Kind::State) throw Error("ane-sim: state parameters are not simulated");
    check_io(in.type, "input '" + in.name + "'", input_bytes[0], sim.limits.max_dim);
    if (f->outputs.size() != n_outputs)
      throw Error("ane-sim: function main has " + std::to_string(f->outputs.size()) + " outputs, " +
                  std::to_string(n_outputs) + " surfaces were declared");
    std::map<std::string, Type> types;
    for (const Op& op : f->ops)
      for (const Output& o : op.outputs) types[o.name] = o.type;
    for (size_t i = 0; i < n_outputs; ++i) {
      auto it = types.find(f->outputs[i]);
      if (it == types.end()) throw Error("ane-sim: output '" + f->outputs[i] + "' is not computed by an op");
      check_io(it->second, "output '" + f->outputs[i] + "'", output_bytes[i], sim.limits.max_dim);
      prog->output_types.push_back(it->second);
    }
    verify_dims(*f, sim.limits.max_dim);
    prog->input_name = in.name;
    prog->input_type = in.type;
    prog->input = Tensor(in.type.dtype, in.type.shape);
  } catch (...) {
    std::filesystem::remove_all(prog->temp_dir);
    throw;
  }
  return prog;
}

Sim& sim_of(void* context) { return *static_cast<Sim*>(context); }

int sim_compile(void* context, const char* mil_text, size_t mil_size, const milrt_ane_weight_file* weights,
                size_t n_weights, const size_t* input_bytes, size_t n_inputs, const size_t* output_bytes,
                size_t n_outputs, milrt_ane_program** program, char* error, size_t error_size) {
  Sim& sim = sim_of(context);
  *program = nullptr;
  if (sim.compiles >= sim.limits.max_compiles) {
    ++sim.compiles;  // an attempt, refused as the chip's compiler refuses
    return fail(error, error_size,
                "ane-sim: compile budget spent (" + std::to_string(sim.limits.max_compiles) + " compiles per process)");
  }
  ++sim.compiles;
  try {
    auto p = build(sim, std::string(mil_text, mil_size), weights, n_weights, input_bytes, n_inputs, output_bytes,
                   n_outputs);
    *program = p.release();
    sim.loaded.insert(*program);
    return 0;
  } catch (const std::exception& e) {
    return fail(error, error_size, e.what());
  }
}

bool is_loaded(Sim& sim, milrt_ane_program* p) { return p && sim.loaded.count(p); }

int sim_write_input(void* context, milrt_ane_program* p, size_t index, const void* data, size_t size, char* error,
                    size_t error_size) {
  if (!is_loaded(sim_of(context), p)) return fail(error, error_size, "ane-sim: write_input: program not loaded");
  if (index != 0) return fail(error, error_size, "ane-sim: write_input: input " + std::to_string(index) + " of 1");
  if (size != p->input.nbytes())
    return fail(error, error_size, "ane-sim: write_input: " + std::to_string(size) + " bytes, the input is " +
                                       std::to_string(p->input.nbytes()));
  if (p->bound) return fail(error, error_size, "ane-sim: write_input: input 0 is bound to a surface; write the surface");
  std::memcpy(p->input.mutable_data(), data, size);
  sim_of(context).input_bytes_written += size;
  return 0;
}

int sim_create_surface(void* context, size_t size, milrt_ane_surface** surface, void** data, char* error,
                       size_t error_size) {
  Sim& sim = sim_of(context);
  *surface = nullptr;
  const size_t most = size_t(sim.limits.max_dim) * size_t(sim.limits.max_dim) * 2;  // one fp16 [1, C, 1, S]
  if (size == 0 || size > most)
    return fail(error, error_size, "ane-sim: create_surface: " + std::to_string(size) + " bytes; a surface holds 1 to " +
                                       std::to_string(most));
  auto s = std::make_unique<milrt_ane_surface>();
  s->bytes.assign(size, 0);
  *data = s->bytes.data();
  *surface = s.release();
  sim.surfaces.insert(*surface);
  return 0;
}

void sim_free_surface(void* context, milrt_ane_surface* s) {
  if (s && sim_of(context).surfaces.erase(s)) delete s;
}

int sim_bind_input(void* context, milrt_ane_program* p, size_t index, milrt_ane_surface* s, char* error,
                   size_t error_size) {
  Sim& sim = sim_of(context);
  if (!is_loaded(sim, p)) return fail(error, error_size, "ane-sim: bind_input: program not loaded");
  if (index != 0) return fail(error, error_size, "ane-sim: bind_input: input " + std::to_string(index) + " of 1");
  if (!s || !sim.surfaces.count(s)) return fail(error, error_size, "ane-sim: bind_input: not a surface of this device");
  if (s->bytes.size() != p->input.nbytes())
    return fail(error, error_size, "ane-sim: bind_input: the surface is " + std::to_string(s->bytes.size()) +
                                       " bytes, the input is " + std::to_string(p->input.nbytes()));
  p->bound = s;
  return 0;
}

int sim_evaluate(void* context, milrt_ane_program* p, char* error, size_t error_size) {
  if (!is_loaded(sim_of(context), p)) return fail(error, error_size, "ane-sim: evaluate: program not loaded");
  if (p->bound && !sim_of(context).surfaces.count(p->bound))
    return fail(error, error_size, "ane-sim: evaluate: the surface bound to input 0 was freed");
  try {
    Tensor in = p->bound ? Tensor(p->input.dtype(), p->input.shape()) : p->input.clone();
    if (p->bound) std::memcpy(in.mutable_data(), p->bound->bytes.data(), in.nbytes());  // the engine reading it
    TensorMap out = run_reference(p->program, "main", {{p->input_name, in}});
    const Function* f = p->program.function("main");
    p->outputs.clear();
    for (auto& name : f->outputs) p->outputs.push_back(out.at(name));
    return 0;
  } catch (const std::exception& e) {
    return fail(error, error_size, std::string("ane-sim: evaluate: ") + e.what());
  }
}

int sim_read_output(void* context, milrt_ane_program* p, size_t index, void* data, size_t size, char* error,
                    size_t error_size) {
  if (!is_loaded(sim_of(context), p)) return fail(error, error_size, "ane-sim: read_output: program not loaded");
  if (index >= p->output_types.size())
    return fail(error, error_size, "ane-sim: read_output: output " + std::to_string(index) + " of " +
                                       std::to_string(p->output_types.size()));
  if (p->outputs.empty()) return fail(error, error_size, "ane-sim: read_output: nothing evaluated yet");
  const Tensor& t = p->outputs[index];
  if (size != t.nbytes())
    return fail(error, error_size, "ane-sim: read_output: " + std::to_string(size) + " bytes, output " +
                                       std::to_string(index) + " is " + std::to_string(t.nbytes()));
  std::memcpy(data, t.data(), size);
  return 0;
}

void sim_unload(void* context, milrt_ane_program* p) {
  Sim& sim = sim_of(context);
  if (!p || !sim.loaded.erase(p)) return;
  std::error_code ec;
  std::filesystem::remove_all(p->temp_dir, ec);
  delete p;
}

size_t sim_compile_count(void* context) { return sim_of(context).compiles; }

}  // namespace

milrt_ane_device make_sim_device(const SimLimits& limits) {
  milrt_ane_device d{};
  d.name = "ane-sim";
  auto* sim = new Sim();
  sim->limits = limits;
  d.context = sim;
  d.compile = sim_compile;
  d.write_input = sim_write_input;
  d.evaluate = sim_evaluate;
  d.read_output = sim_read_output;
  d.unload = sim_unload;
  d.compile_count = sim_compile_count;
  d.create_surface = sim_create_surface;
  d.free_surface = sim_free_surface;
  d.bind_input = sim_bind_input;
  return d;
}

void free_sim_device(milrt_ane_device& device) {
  if (!device.context) return;
  Sim* sim = static_cast<Sim*>(device.context);
  for (milrt_ane_program* p : std::vector<milrt_ane_program*>(sim->loaded.begin(), sim->loaded.end()))
    sim_unload(sim, p);
  for (milrt_ane_surface* s : std::vector<milrt_ane_surface*>(sim->surfaces.begin(), sim->surfaces.end()))
    sim_free_surface(sim, s);
  delete sim;
  device.context = nullptr;
}

size_t SimDevice::loaded() const { return static_cast<const Sim*>(table_.context)->loaded.size(); }
size_t SimDevice::input_bytes_written() const {
  return static_cast<const Sim*>(table_.context)->input_bytes_written;
}

}  // namespace milrt::ane
