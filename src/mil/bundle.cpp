// Model bundles: loading `.mlmodelc` directories and `.mil` files, resolving
// BLOBFILE references, and writing bundles back out.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "mil/literal_blobs.h"
#include "mil/mlpackage.h"
#include "milrt/blob.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"

namespace milrt {
namespace fs = std::filesystem;
namespace {

constexpr uintmax_t kMaxTextBytes = uintmax_t(1) << 30;

// Reads MIL text from an open descriptor (closed here).
std::string read_text_fd(int fd, const std::string& path) {
  auto buf = map_fd(fd, path);
  if (buf->size() > kMaxTextBytes) throw Error(path + ": error: MIL text larger than 1 GiB");
  return std::string(reinterpret_cast<const char*>(buf->data()), buf->size());
}

std::string read_text(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": error: cannot open: " + std::strerror(errno));
  return read_text_fd(fd, path);
}

// The directories a model may read from (see LoadOptions): each once as its
// real path and once as the user spelled it (absolute, `..` folded), so that
// a path written through a symlinked parent is still recognized as below it.
// Files are always opened below the real path.
struct Root {
  fs::path lexical, real;
};

Root make_root(const std::string& dir, const char* what) {
  std::error_code ec;
  fs::path real = fs::canonical(dir.empty() ? "." : dir, ec);
  if (ec) throw Error(dir + ": error: cannot resolve " + what + ": " + ec.message());
  fs::path lexical = fs::absolute(dir.empty() ? "." : dir, ec).lexically_normal();
  if (ec) lexical = real;
  return {lexical, real};
}

// `path` relative to `root` if it lies below it (component-wise), else "".
std::string below(const fs::path& path, const fs::path& root) {
  fs::path rel = path.lexically_relative(root);
  if (rel.empty() || rel == ".") return "";
  auto first = *rel.begin();
  if (first == "..") return "";
  return rel.string();
}

// Confines BLOBFILE paths to a model's directory and the allowed ones. The
// directories are resolved on the first BLOBFILE, so a program without any
// needs no base_dir on disk.
class Confinement {
 public:
  Confinement(std::string base_dir, const LoadOptions& o) : base_dir_(std::move(base_dir)), options_(o) {}
  // Opens a BLOBFILE path; *shown receives the path it names, for messages
  // and to share one mapping between literals.
  int open(const std::string& blob_path, std::string* shown) {
    if (roots_.empty()) {
      roots_.push_back(make_root(base_dir_, "the model directory"));
      for (auto& d : options_.allow_external_weights)
        roots_.push_back(make_root(d, "--allow-external-weights directory"));
    }
    const std::string prefix = "@model_path/";
    std::string p = blob_path.rfind(prefix, 0) == 0 ? blob_path.substr(prefix.size()) : blob_path;
    fs::path target = (fs::path(p).is_absolute() ? fs::path(p) : roots_[0].real / p).lexically_normal();
    *shown = target.string();
    for (const Root& r : roots_)
      for (const fs::path* form : {&r.real, &r.lexical}) {
        std::string rel = below(target, *form);
        if (!rel.empty()) return open_beneath(r.real.string(), rel);
      }
    throw Error(path_for_message(blob_path) + ": error: resolves outside the model's directory " + roots_[0].real.string() +
                " (refused: a model may read only its own bundle; --allow-external-weights DIR, or "
                "LoadOptions::allow_external_weights, admits another directory)");
  }

 private:
  std::string base_dir_;
  const LoadOptions& options_;
  std::vector<Root> roots_;  // the model's directory first
};

class BlobLoader {
 public:
  BlobLoader(Program& p, const LoadOptions& o) : confine_(p.base_dir, o) {}

  void load(Arg& a, const Op& op, const std::string& key) {
    if (a.kind == Arg::Kind::Tuple) {
      for (auto& e : a.elems) load(e, op, key);
      return;
    }
    if (a.kind != Arg::Kind::Const || a.lit->blob_path.empty() || !a.lit->value.empty()) return;
    Literal lit = *a.lit;
    // Every literal is confined and opened anew (a descriptor, no bytes
    // read); literals naming one file share the first one's mapping.
    std::string file;
    std::shared_ptr<Buffer> buf;
    try {
      int fd = confine_.open(lit.blob_path, &file);
      auto it = files_.find(file);
      if (it != files_.end()) {
        ::close(fd);
        buf = it->second;
      } else {
        buf = files_.emplace(file, map_fd(fd, file)).first->second;
      }
    } catch (const Error& e) {
      // "path: error: why" becomes "loc: error: op input 'key': path: why".
      std::string msg = e.what();
      auto cut = msg.find(": error: ");
      if (cut != std::string::npos) msg = msg.substr(0, cut) + ": " + msg.substr(cut + 9);
      throw Error(op.loc.str() + ": error: " + op.type + " input '" + key + "': " + msg);
    }
    std::string what = op.type + " input '" + key + "' (" + file + ")";
    try {
      lit.value = read_blob(buf, lit.blob_offset, lit.type.dtype, lit.type.shape, what);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.find(": error: ") == std::string::npos) msg = op.loc.str() + ": error: " + msg;
      throw Error(msg);
    }
    a.lit = std::make_shared<const Literal>(std::move(lit));
  }

 private:
  Confinement confine_;
  std::map<std::string, std::shared_ptr<Buffer>> files_;
};
}  // namespace

void load_blobs(Program& p, const LoadOptions& options) {
  BlobLoader loader(p, options);
  for (auto& f : p.functions)
    walk_ops(f.ops, [&](Op& op) {
      for (auto& in : op.inputs) loader.load(in.arg, op, in.key);
    });
}

Program load_model(const std::string& path, const LoadOptions& options) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": error: no such file or directory");
  if (is_mlpackage(path)) return mlpackage::load(path, options);
  std::string base = fs::path(path).parent_path().string(), text, mil_path = path;
  if (fs::is_directory(path, ec)) {
    // A bundle's model.mil is confined like its weights: no symlink out.
    mil_path = (fs::path(path) / "model.mil").string();
    base = path;
    if (!fs::exists(fs::symlink_status(mil_path, ec))) throw Error(path + ": error: bundle has no model.mil");
    text = read_text_fd(open_beneath(path, "model.mil"), mil_path);
  } else {
    text = read_text(path);  // a bare .mil file: the user named it
  }
  if (base.empty()) base = ".";
  Program p = parse_mil(text, mil_path, base);
  load_blobs(p, options);
  return p;
}

namespace {
// Moves large tensor literals into a blob file, rewriting their BLOBFILE references.
void externalize(Arg& a, BlobWriter& w, int64_t limit, bool& used) {
  if (a.kind == Arg::Kind::Tuple) {
    for (auto& e : a.elems) externalize(e, w, limit, used);
    return;
  }
  if (a.kind != Arg::Kind::Const) return;
  const Literal& l = *a.lit;
  if (l.value.empty()) return;
  Literal m = l;
  if (l.value.dtype() == DType::String || l.value.numel() <= limit || blob_dtype_code(l.value.dtype()) < 0) {
    if (l.blob_path.empty()) return;
    m.blob_path.clear();  // small values are written inline rather than pointing at the old file
    m.blob_offset = 0;
    a.lit = std::make_shared<const Literal>(std::move(m));
    return;
  }
  m.blob_offset = w.add(l.value);
  m.blob_path = "@model_path/weights/weight.bin";
  a.lit = std::make_shared<const Literal>(std::move(m));
  used = true;
}
}  // namespace

bool move_large_literals_to_blobs(Program& p, BlobWriter& w, int64_t inline_limit) {
  bool used = false;
  for (auto& f : p.functions)
    walk_ops(f.ops, [&](Op& op) {
      for (auto& in : op.inputs) externalize(in.arg, w, inline_limit, used);
    });
  return used;
}

void save_model(const Program& p, const std::string& dir, int64_t inline_limit) {
  Program q = p;
  BlobWriter w;
  const bool used = move_large_literals_to_blobs(q, w, inline_limit);
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "weights", ec);
  if (ec) throw Error(dir + ": error: cannot create directory: " + ec.message());
  if (used) w.write((fs::path(dir) / "weights" / "weight.bin").string());
  write_file_atomic((fs::path(dir) / "model.mil").string(), print_mil(q));
}

}  // namespace milrt
