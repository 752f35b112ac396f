// Model bundles: loading `.mlmodelc` directories and `.mil` files, resolving
// BLOBFILE references, and writing bundles back out.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "milrt/blob.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/npy.h"

namespace milrt {
namespace fs = std::filesystem;
namespace {

constexpr uintmax_t kMaxTextBytes = uintmax_t(1) << 30;

std::string read_text(const std::string& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  if (ec) throw Error(path + ": error: cannot read: " + ec.message());
  if (size > kMaxTextBytes) throw Error(path + ": error: MIL text larger than 1 GiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": error: cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string resolve_blob_path(const Program& p, const std::string& path) {
  const std::string prefix = "@model_path/";
  if (path.rfind(prefix, 0) == 0) return (fs::path(p.base_dir) / path.substr(prefix.size())).string();
  if (fs::path(path).is_absolute()) return path;
  return (fs::path(p.base_dir) / path).string();
}

class BlobLoader {
 public:
  explicit BlobLoader(Program& p) : p_(p) {}

  void load(Arg& a, const Op& op, const std::string& key) {
    if (a.kind == Arg::Kind::Tuple) {
      for (auto& e : a.elems) load(e, op, key);
      return;
    }
    if (a.kind != Arg::Kind::Const || a.lit->blob_path.empty() || !a.lit->value.empty()) return;
    Literal lit = *a.lit;
    std::string file = resolve_blob_path(p_, lit.blob_path);
    std::string what = op.type + " input '" + key + "' (" + file + ")";
    auto it = files_.find(file);
    if (it == files_.end()) {
      std::shared_ptr<Buffer> buf;
      try {
        buf = map_file(file);
      } catch (const Error& e) {
        // "path: error: why" becomes "loc: error: op input 'key': path: why".
        std::string msg = e.what();
        auto cut = msg.find(": error: ");
        if (cut != std::string::npos) msg = msg.substr(0, cut) + ": " + msg.substr(cut + 9);
        throw Error(op.loc.str() + ": error: " + op.type + " input '" + key + "': " + msg);
      }
      it = files_.emplace(file, std::move(buf)).first;
    }
    try {
      lit.value = read_blob(it->second, lit.blob_offset, lit.type.dtype, lit.type.shape, what);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.find(": error: ") == std::string::npos) msg = op.loc.str() + ": error: " + msg;
      throw Error(msg);
    }
    a.lit = std::make_shared<const Literal>(std::move(lit));
  }

 private:
  Program& p_;
  std::map<std::string, std::shared_ptr<Buffer>> files_;
};
}  // namespace

void load_blobs(Program& p) {
  BlobLoader loader(p);
  for (auto& f : p.functions)
    for (auto& op : f.ops)
      for (auto& in : op.inputs) loader.load(in.arg, op, in.key);
}

Program load_model(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path + ": error: no such file or directory");
  std::string mil_path = path, base = fs::path(path).parent_path().string();
  if (fs::is_directory(path, ec)) {
    mil_path = (fs::path(path) / "model.mil").string();
    base = path;
    if (!fs::exists(mil_path, ec)) throw Error(path + ": error: bundle has no model.mil");
  }
  if (base.empty()) base = ".";
  Program p = parse_mil(read_text(mil_path), mil_path, base);
  load_blobs(p);
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

void save_model(const Program& p, const std::string& dir, int64_t inline_limit) {
  Program q = p;
  BlobWriter w;
  bool used = false;
  for (auto& f : q.functions)
    for (auto& op : f.ops)
      for (auto& in : op.inputs) externalize(in.arg, w, inline_limit, used);
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "weights", ec);
  if (ec) throw Error(dir + ": error: cannot create directory: " + ec.message());
  if (used) w.write((fs::path(dir) / "weights" / "weight.bin").string());
  write_file_atomic((fs::path(dir) / "model.mil").string(), print_mil(q));
}

}  // namespace milrt
