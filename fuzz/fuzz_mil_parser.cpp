// MIL text: parse_mil, print_mil (must parse back to the same program),
// verify (shape inference) before and after load_blobs, which reads BLOBFILE
// literals from a bundle made in the scratch directory. The bundle also holds
// hostile entries (issue #20): a symlink to a file outside it, a symlink to a
// file inside, a symlinked folder, a FIFO; outside it lies a canary file. No
// BLOBFILE path may load from outside the bundle or through a symlink: a
// program whose blobs load must name only regular files below the bundle,
// reached without a link, and no loaded value may hold the canary's bytes.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "fuzz_util.h"
#include "milrt/blob.h"
#include "milrt/error.h"
#include "milrt/mil.h"

namespace fs = std::filesystem;

namespace {

constexpr uint8_t kCanary = 0xA5;

// The bundle's weights/weight.bin: blob storage v2, records at offsets 64,
// 192, 320 and 448 (what the corpus's BLOBFILE literals name); no byte of it
// equals the canary.
std::string make_bundle() {
  const std::string scratch = fs::canonical(milrt_fuzz::scratch_dir()).string();
  const std::string bundle = scratch + "/bundle";
  fs::create_directories(bundle + "/weights");
  milrt::BlobWriter w;
  milrt::Tensor a(milrt::DType::FP16, {4}), b(milrt::DType::FP32, {2, 2}), c(milrt::DType::Int8, {8}),
      d(milrt::DType::UInt4, {6});
  for (int i = 0; i < 4; ++i) a.mutable_ptr<uint16_t>()[i] = milrt::f32_to_f16(float(i + 1));
  for (int i = 0; i < 4; ++i) b.mutable_ptr<float>()[i] = float(i + 1);
  for (int i = 0; i < 8; ++i) c.mutable_ptr<int8_t>()[i] = int8_t(i - 4);
  for (int i = 0; i < 6; ++i) d.mutable_ptr<uint8_t>()[i] = uint8_t(i * 2);
  for (const milrt::Tensor* t : {&a, &b, &c, &d}) w.add(*t);
  for (uint8_t byte : w.bytes())
    if (byte == kCanary) milrt_fuzz::finding("the fuzz bundle's weight.bin holds the canary byte");
  w.write(bundle + "/weights/weight.bin");
  std::string raw(96, '\x11');  // a raw array file
  milrt_fuzz::write_input("bundle/weights/raw.bin", reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
  std::string canary(4096, char(kCanary));
  milrt_fuzz::write_input("outside.bin", reinterpret_cast<const uint8_t*>(canary.data()), canary.size());
  fs::create_symlink("../../outside.bin", bundle + "/weights/link.bin");
  fs::create_symlink(scratch + "/outside.bin", bundle + "/weights/abslink.bin");
  fs::create_symlink("weight.bin", bundle + "/weights/inlink.bin");
  fs::create_directory_symlink("weights", bundle + "/linkdir");
  fs::create_directory_symlink("..", bundle + "/up");
  if (mkfifo((bundle + "/weights/fifo").c_str(), 0600) != 0) milrt_fuzz::finding("mkfifo failed");
  return bundle;
}

// The confinement rule checked independently of the loader: where a loaded
// BLOBFILE path must lead.
void check_confined(const std::string& blob_path, const fs::path& bundle) {
  const std::string prefix = "@model_path/";
  std::string p = blob_path.rfind(prefix, 0) == 0 ? blob_path.substr(prefix.size()) : blob_path;
  fs::path target = (fs::path(p).is_absolute() ? fs::path(p) : bundle / p).lexically_normal();
  fs::path rel = target.lexically_relative(bundle);
  if (rel.empty() || rel == "." || *rel.begin() == "..")
    milrt_fuzz::finding("a blob loaded from outside the bundle: " + blob_path);
  fs::path at = bundle;
  for (const fs::path& comp : rel) {
    at /= comp;
    if (fs::is_symlink(fs::symlink_status(at))) milrt_fuzz::finding("a blob loaded through a symlink: " + blob_path);
  }
  if (!fs::is_regular_file(fs::symlink_status(target)))
    milrt_fuzz::finding("a blob loaded from something not a regular file: " + blob_path);
}

void check_loaded(const milrt::Arg& a, const fs::path& bundle) {
  for (const milrt::Arg& e : a.elems) check_loaded(e, bundle);
  if (a.kind != milrt::Arg::Kind::Const || a.lit->blob_path.empty()) return;
  check_confined(a.lit->blob_path, bundle);
  const milrt::Tensor& t = a.lit->value;
  if (t.dtype() == milrt::DType::String || t.nbytes() == 0) return;
  const uint8_t* p = static_cast<const uint8_t*>(t.data());
  size_t n = t.nbytes(), canary = 0;
  for (size_t i = 0; i < n; ++i) canary += p[i] == kCanary;
  if (canary == n) milrt_fuzz::finding("a loaded blob holds the canary file's bytes: " + a.lit->blob_path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string bundle = make_bundle();
  std::string text(reinterpret_cast<const char*>(data), size);
  milrt::Program p;
  try {
    p = milrt::parse_mil(text, "fuzz.mil", bundle);
  } catch (const milrt::Error&) {
    return 0;
  }
  // The printer round-trips: what it prints parses back to the same program.
  std::string printed = milrt::print_mil(p);
  milrt::Program back;
  try {
    back = milrt::parse_mil(printed, "printed.mil", bundle);
  } catch (const milrt::Error& e) {
    milrt_fuzz::finding(std::string("print_mil's text does not parse: ") + e.what() + "\n" + printed);
  }
  std::string diff = milrt::ir_diff(p, back);
  if (!diff.empty()) milrt_fuzz::finding("print_mil does not round-trip: " + diff + "\n" + printed);
  try {
    milrt::verify(p);
  } catch (const milrt::Error&) {
  }
  try {
    milrt::load_blobs(p);
  } catch (const milrt::Error&) {
    return 0;
  }
  for (const milrt::Function& f : p.functions)
    for (const milrt::Op& op : f.ops)
      for (const milrt::Input& in : op.inputs) check_loaded(in.arg, bundle);
  try {
    milrt::verify(p);
  } catch (const milrt::Error&) {
  }
  return 0;
}
