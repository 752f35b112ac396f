// milrt._milrt: the C++ library as the pure-Python package milrt/ uses it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <optional>

#include "milrt/error.h"
#include "milrt/plan.h"
#include "llm.h"
#include "plan_handle.h"
#include "program.h"

namespace milrt::py {
namespace {

CompileOptions compile_options(const std::string& function, const std::string& precision, const std::string& numerics,
                               const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  CompileOptions o;
  o.function = function;
  if (precision == "bf16") o.matmul_precision = CompileOptions::MatmulPrecision::bf16;
  else if (precision != "fp32") throw Error("error: precision must be 'fp32' or 'bf16', got '" + precision + "'");
  if (numerics == "fp16") o.numerics = CompileOptions::Numerics::fp16;
  else if (numerics != "fp32") throw Error("error: numerics must be 'fp32' or 'fp16', got '" + numerics + "'");
  for (auto& [name, shape] : input_shapes) o.input_shapes[name] = shape;
  return o;
}

PlanHandle* compile_plan(ProgramHandle& h, const std::string& function, const std::string& precision,
                         std::optional<int> threads, const std::map<std::string, std::vector<int64_t>>& input_shapes,
                         const std::string& numerics) {
  if (threads && *threads < 1) throw Error("error: threads must be at least 1, got " + std::to_string(*threads));
  CompileOptions o = compile_options(function, precision, numerics, input_shapes);
  h.function(function);
  const Program& p = h.checked_program();
  Plan plan;
  {
    pb::gil_scoped_release release;
    plan = compile(p, o);
  }
  return new PlanHandle(std::move(plan), threads.value_or(0));
}

}  // namespace
}  // namespace milrt::py

PYBIND11_MODULE(_milrt, m) {
  namespace pb = pybind11;
  using namespace milrt::py;
  m.doc() = "milrt: Core ML MIL programs compiled and run on CPUs";
  pb::register_exception<milrt::Error>(m, "Error", PyExc_RuntimeError);

  bind_program(m);
  bind_description(m);
  bind_llm(m);

  pb::class_<PlanHandle>(m, "Plan")
      .def("run", &PlanHandle::run, pb::arg("inputs") = pb::none())
      .def("bind", &PlanHandle::bind, pb::arg("name"), pb::arg("array"))
      .def("unbind", &PlanHandle::unbind, pb::arg("name"))
      .def("cancel", &PlanHandle::cancel)
      .def("state", &PlanHandle::state, pb::arg("name"))
      .def("set_state", &PlanHandle::set_state, pb::arg("name"), pb::arg("value"))
      .def("reset_state", &PlanHandle::reset_state)
      .def_property_readonly("inputs", [](const PlanHandle& h) { return h.describe(h.plan().inputs()); })
      .def_property_readonly("outputs", [](const PlanHandle& h) { return h.describe(h.plan().outputs()); })
      .def_property_readonly("states", [](const PlanHandle& h) { return h.describe(h.plan().states()); })
      .def_property_readonly("steps", [](const PlanHandle& h) {
        std::vector<std::string> r;
        for (auto& s : h.plan().steps()) r.push_back(s.kernel);
        return r;
      })
      .def_property_readonly("arena_bytes", [](const PlanHandle& h) { return h.plan().arena_bytes(); });

  m.def("compile", &compile_plan, pb::arg("program"), pb::arg("function") = "main", pb::arg("precision") = "fp32",
        pb::arg("threads") = pb::none(), pb::arg("input_shapes") = std::map<std::string, std::vector<int64_t>>{},
        pb::arg("numerics") = "fp32");
}
