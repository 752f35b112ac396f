#include "model_dir_writer.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "milrt/error.h"

namespace milrt::cli {
namespace {
namespace fs = std::filesystem;

// Moves `from` to `to`; an existing `to` (a directory) is exchanged with it
// atomically where the kernel can (renameat2), and ends up at `from`.
void move_into_place(const std::string& cmd, const fs::path& from, const fs::path& to, bool replace) {
  if (!replace) {
    // RENAME_NOREPLACE: an --out created meanwhile by someone else is not clobbered.
    if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
    if (errno != EINVAL && errno != ENOSYS)
      throw Error(cmd + ": cannot move the model to " + to.string() + ": " + std::strerror(errno));
    if (fs::exists(to)) throw Error(cmd + ": " + to.string() + " appeared meanwhile; not replaced");
    fs::rename(from, to);
    return;
  }
  if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) return;
  if (errno != EINVAL && errno != ENOSYS) throw Error(cmd + ": cannot replace " + to.string() + ": " + std::strerror(errno));
  // No exchange on this file system: two renames, the old model parked beside.
  fs::path parked = from;
  parked += ".old";
  fs::rename(to, parked);
  fs::rename(from, to);
  fs::rename(parked, from);
}

void check_out(const std::string& cmd, const fs::path& out, bool overwrite, ModelDirFormat format) {
  std::error_code ec;
  const auto st = fs::symlink_status(out, ec);
  if (!fs::exists(st)) return;
  if (!overwrite) throw Error(cmd + ": " + out.string() + " exists; give --overwrite to replace it");
  // --overwrite replaces a model of the same kind, never some other directory or file given by mistake.
  const bool package = format == ModelDirFormat::mlpackage;
  const char* marker = package ? "Manifest.json" : "model.mil";
  if (!fs::is_directory(st) || !fs::exists(out / marker, ec))
    throw Error(cmd + ": " + out.string() + " exists and is not " + (package ? "a package" : "a bundle") +
                " (a directory with " + marker + "); not replaced");
}

}  // namespace

ModelDirFormat model_dir_format(const std::string& cmd, const std::string& format, const fs::path& out) {
  if (format.empty()) return out.extension() == ".mlpackage" ? ModelDirFormat::mlpackage : ModelDirFormat::mlmodelc;
  if (format == "mlpackage") return ModelDirFormat::mlpackage;
  if (format == "mlmodelc") return ModelDirFormat::mlmodelc;
  throw Error(cmd + ": --format must be mlmodelc or mlpackage, got '" + format + "'");
}

void write_model_dir(const std::string& cmd, const fs::path& out, ModelDirFormat format, bool overwrite,
                     const std::function<void(const fs::path& tmp)>& write) {
  check_out(cmd, out, overwrite, format);
  const fs::path tmp =
      out.parent_path() / std::string(".").append(out.filename().string()).append(".tmp").append(std::to_string(getpid()));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    write(tmp);
    move_into_place(cmd, tmp, out, fs::exists(out));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(tmp, ec);  // the replaced model, when there was one
}

}  // namespace milrt::cli
