#include "program.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <map>

#include "convert.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/reference.h"

namespace milrt::py {
namespace {

// A parameter's tensor type (a state<tensor<...>> gives the tensor inside).
const Type& tensor_type(const Type& t) { return t.kind == Type::Kind::State && !t.elems.empty() ? t.elems[0] : t; }

pb::tuple describe(const std::string& name, const Type& t) {
  const Type& tt = tensor_type(t);
  return pb::make_tuple(name, std::string(dtype_name(tt.dtype)), pb::tuple(pb::cast(tt.shape)),
                        t.kind == Type::Kind::State);
}

const Type* value_type(const Function& f, const std::string& name) {
  if (const Param* p = f.param(name)) return &p->type;
  for (auto& op : f.ops)
    for (auto& o : op.outputs)
      if (o.name == name) return &o.type;
  return nullptr;
}

// Inputs as the reference executor takes them: each in its declared dtype.
TensorMap reference_inputs(const Function& f, const pb::dict& given, const char* what) {
  TensorMap r;
  for (auto item : given) {
    auto name = item.first.cast<std::string>();
    const Param* prm = f.param(name);
    if (!prm) throw Error("error: function '" + f.name + "' has no " + what + " '" + name + "'");
    auto a = pb::array::ensure(item.second, pb::array::c_style);
    if (!a) throw Error(std::string("error: ") + what + " '" + name + "' is not an array");
    const DType declared = tensor_type(prm->type).dtype;
    Tensor t(declared, Shape(a.shape(), a.shape() + a.ndim()));
    if (t.numel())
      convert(a.data(), dtype_of(a.dtype(), name), t.numel(), declared, t.mutable_data(), declared);
    r[name] = t;
  }
  return r;
}

}  // namespace

const Program& ProgramHandle::checked_program() {
  if (!checked) {
    auto p = std::make_shared<Program>(*loaded);
    // With the GIL held: two threads must not build it at once.
    notes = legalize_layout_idioms(*p);
    for (auto& n : verify(*p)) notes.push_back(n);
    checked = p;
  }
  return *checked;
}

const Function& ProgramHandle::function(const std::string& name) const {
  const Function* f = loaded->function(name);
  if (f) return *f;
  std::string names;
  for (auto& fn : loaded->functions) names += (names.empty() ? "" : ", ") + fn.name;
  throw Error(loaded->path + ": error: no function '" + name + "' (functions: " + names + ")");
}

void bind_program(pb::module_& m) {
  pb::class_<ProgramHandle>(m, "Program")
      .def("__str__", [](const ProgramHandle& h) { return print_mil(*h.loaded); })
      .def_property_readonly("path", [](const ProgramHandle& h) { return h.loaded->path; })
      .def_property_readonly("functions", [](const ProgramHandle& h) {
        std::vector<std::string> r;
        for (auto& f : h.loaded->functions) r.push_back(f.name);
        return r;
      })
      .def("verify", [](ProgramHandle& h) {
        h.checked_program();
        return h.notes;
      })
      .def("op_histogram", [](const ProgramHandle& h, std::optional<std::string> function) {
        std::map<std::string, int> hist;
        for (auto& f : h.loaded->functions)
          if (!function || f.name == *function)
            for (auto& op : f.ops) ++hist[op.type];
        if (function) h.function(*function);  // an unknown name is an error, not an empty histogram
        return hist;
      }, pb::arg("function") = pb::none())
      .def("signature", [](const ProgramHandle& h, const std::string& function) {
        const Function& f = h.function(function);
        pb::list ins, outs;
        for (auto& p : f.params) ins.append(describe(p.name, p.type));
        for (auto& name : f.outputs) {
          const Type* t = value_type(f, name);
          if (!t) throw Error("error: function '" + function + "' returns '" + name + "', which it does not define");
          outs.append(describe(name, *t));
        }
        return pb::make_tuple(ins, outs);
      }, pb::arg("function") = "main")
      .def("run_reference", [](ProgramHandle& h, pb::dict inputs, const std::string& function, pb::object states) {
        const Program& p = h.checked_program();
        const Function& f = h.function(function);
        TensorMap in = reference_inputs(f, inputs, "input");
        TensorMap st, out;
        const bool stateful = !states.is_none();
        if (stateful) st = reference_inputs(f, states.cast<pb::dict>(), "state");
        {
          pb::gil_scoped_release release;
          out = stateful ? run_reference(p, function, in, st) : run_reference(p, function, in);
        }
        pb::dict r;
        for (auto& [name, t] : out) r[pb::str(name)] = to_array(t);
        if (stateful)
          for (auto& [name, t] : st) states[pb::str(name)] = to_array(t);
        return r;
      }, pb::arg("inputs"), pb::arg("function") = "main", pb::arg("states") = pb::none());

  m.def("load", [](const std::string& path) {
    ProgramHandle h;
    {
      pb::gil_scoped_release release;
      h.loaded = std::make_shared<const Program>(load_model(path));
    }
    return h;
  }, pb::arg("path"));
}

}  // namespace milrt::py
