// The `.mlpackage` layout: Manifest.json names the root item (the model
// document) by an identifier; item paths are relative to <package>/Data.
// Every file is opened with open_beneath(), so the package's own rules
// (no absolute path, no `..`, no symbolic link) are the bundle rules.
#include "mil/mlpackage.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "milrt/blob.h"
#include "milrt/error.h"

namespace milrt {
namespace fs = std::filesystem;

bool is_mlpackage(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  if (fs::path(path).extension() == ".mlpackage") return true;
  return fs::exists(fs::symlink_status(fs::path(path) / "Manifest.json", ec));
}

namespace mlpackage {

std::string shown(const std::string& s) {
  std::string r;
  for (char c : s.substr(0, 64)) r += (c >= 0x20 && c < 0x7f) ? c : '?';
  return s.size() > 64 ? r + "..." : r;
}

namespace {

std::string read_beneath(const std::string& root, const std::string& rel, size_t limit, const char* what) {
  const std::string path = (fs::path(root) / rel).string();
  auto buf = map_fd(open_beneath(root, rel), path);
  if (buf->size() > limit)
    throw Error(path + ": error: " + what + " larger than " + std::to_string(limit >> 20) + " MiB");
  return std::string(reinterpret_cast<const char*>(buf->data()), buf->size());
}

// The root item's path below Data/, checked before any open so that the
// message says what the manifest got wrong.
std::string root_item_path(const std::string& manifest_text, const std::string& manifest) {
  using nlohmann::json;
  json m = json::parse(manifest_text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& why) { return Error(manifest + ": error: " + why); };
  if (m.is_discarded()) throw bad("not valid JSON");
  if (!m.is_object()) throw bad("not a JSON object");
  auto root = m.find("rootModelIdentifier");
  if (root == m.end() || !root->is_string()) throw bad("no rootModelIdentifier string");
  auto entries = m.find("itemInfoEntries");
  if (entries == m.end() || !entries->is_object()) throw bad("no itemInfoEntries object");
  const std::string id = root->get<std::string>();
  auto item = entries->find(id);
  if (item == entries->end()) throw bad("the root model '" + shown(id) + "' is not among itemInfoEntries");
  if (!item->is_object()) throw bad("item '" + shown(id) + "' is not an object");
  auto path = item->find("path");
  if (path == item->end() || !path->is_string()) throw bad("item '" + shown(id) + "' has no path string");
  const std::string p = path->get<std::string>();
  if (p.empty()) throw bad("item '" + shown(id) + "' has an empty path");
  if (p[0] == '/') throw bad("item path '" + shown(p) + "' is absolute (item paths are relative to Data/)");
  for (const auto& c : fs::path(p))
    if (c == ".." || c == ".") throw bad("item path '" + shown(p) + "' has a '" + shown(c.string()) + "' component (refused: it must stay inside Data/)");
  return p;
}

}  // namespace

ModelFile read_model_file(const std::string& package) {
  std::error_code ec;
  if (!fs::is_directory(package, ec)) throw Error(package + ": error: not a directory");
  if (!fs::exists(fs::symlink_status(fs::path(package) / "Manifest.json", ec)))
    throw Error(package + ": error: package has no Manifest.json");
  const std::string manifest = (fs::path(package) / "Manifest.json").string();
  const std::string rel = root_item_path(read_beneath(package, "Manifest.json", kMaxManifestBytes, "Manifest.json"), manifest);
  const fs::path data = fs::path(package) / "Data";
  ModelFile f;
  f.path = (data / rel).lexically_normal().string();
  f.dir = (data / rel).lexically_normal().parent_path().string();
  f.bytes = read_beneath(package, "Data/" + rel, kMaxModelBytes, "model document");
  return f;
}

Program load(const std::string& package, const LoadOptions& options) {
  ModelFile f = read_model_file(package);
  Program p = program_from_bytes(f.bytes, f.path, f.dir);
  load_blobs(p, options);
  return p;
}

}  // namespace mlpackage
}  // namespace milrt
