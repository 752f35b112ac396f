// The model description of an .mlpackage (metadata, default function) for
// MLModel; a .mlmodelc keeps its own in metadata.json, read in Python.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "milrt/model_description.h"
#include "program.h"

namespace milrt::py {

void bind_description(pybind11::module_& m) {
  namespace pb = pybind11;
  m.def("load_description", [](const std::string& path) -> pb::object {
    if (!is_mlpackage(path)) return pb::none();
    ModelDescription d = load_model_description(path);
    pb::dict r;
    r["author"] = d.author;
    r["license"] = d.license;
    r["version"] = d.version;
    r["short_description"] = d.short_description;
    r["user_defined_metadata"] = d.user_defined;
    r["default_function"] = d.default_function;
    r["specification_version"] = d.specification_version;
    return r;
  }, pb::arg("path"));
}

}  // namespace milrt::py
