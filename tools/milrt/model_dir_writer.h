// Writing a model directory (.mlmodelc bundle or .mlpackage) whole or not at
// all: it is written into a hidden sibling directory and renamed into place,
// so a failed or interrupted command never leaves a half-written model at the
// destination, and --overwrite swaps an old model out only once the new one
// is complete (and only a model of the same kind).
#pragma once
#include <filesystem>
#include <functional>
#include <string>

namespace milrt::cli {

enum class ModelDirFormat { mlmodelc, mlpackage };

// `format` ("mlmodelc", "mlpackage" or "" for the extension of `out`:
// .mlpackage, else a bundle); throws "CMD: --format must be ..." otherwise.
ModelDirFormat model_dir_format(const std::string& cmd, const std::string& format, const std::filesystem::path& out);

// Refuses an existing `out` unless `overwrite`, and then anything at `out`
// but a model of that format; calls write(tmp) and moves tmp into place.
// Errors start with "CMD: ".
void write_model_dir(const std::string& cmd, const std::filesystem::path& out, ModelDirFormat format, bool overwrite,
                     const std::function<void(const std::filesystem::path& tmp)>& write);

}  // namespace milrt::cli
