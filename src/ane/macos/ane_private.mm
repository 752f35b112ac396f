// The device table of ane/device.h filled from Apple's private
// AppleNeuralEngine.framework. Objective-C++, compiled with ARC (-fobjc-arc),
// built on Apple platforms only; see ane_private.h.
//
// The framework has no headers: its classes are looked up by name and every
// call into it goes through objc_msgSend cast to that method's exact C
// signature (self, _cmd, arguments...). Public Foundation classes are used
// with ordinary message syntax. The sequence (shared Neural Engine notes):
//   descriptor = +[_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:]
//   model      = +[_ANEInMemoryModel inMemoryModelWithDescriptor:]
//   model.mil and the weight files written to NSTemporaryDirectory()/<hexStringIdentifier>/
//   -compileWithQoS:options:error:, -loadWithQoS:options:error: (one retry after 100 ms)
//   one flat IOSurface per tensor, wrapped by +[_ANEIOSurfaceObject objectWithIOSurface:]
//   one _ANERequest built at compile time and reused by every evaluation
//   -evaluateWithQoS:options:request:error:, -unloadWithQoS:error:
// No Objective-C or C++ exception leaves this file: every entry point turns
// them into the one-line message the table promises.
#import <Foundation/Foundation.h>
#include <IOSurface/IOSurfaceRef.h>
#include <dlfcn.h>
#include <objc/message.h>
#include <objc/runtime.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "ane/macos/ane_private.h"

namespace {

// Every public project passes 21 (on M5 all of 0..63 behave the same).
constexpr unsigned int kQoS = 21;
constexpr const char* kFrameworkPath =
    "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine";
constexpr const char* kModelPathPrefix = "@model_path/";

// The C signature of each private method, i.e. what objc_msgSend is cast to
// for it. The NSError** parameters are __autoreleasing, as Cocoa's are, so
// ARC passes a local strong variable by write-back.
using GetObjectFn = id (*)(id, SEL);                                      // -hexStringIdentifier
using DescriptorFn = id (*)(id, SEL, id, id, id);                         // +modelWithMILText:weights:optionsPlist:
using ModelFn = id (*)(id, SEL, id);                                      // +inMemoryModelWithDescriptor:
using WrapSurfaceFn = id (*)(id, SEL, IOSurfaceRef);                      // +objectWithIOSurface:
using RequestFn = id (*)(id, SEL, id, id, id, id, id, id, id);            // +requestWithInputs:...procedureIndex:
using QoSOptionsFn = BOOL (*)(id, SEL, unsigned int, id, NSError* __autoreleasing*);      // compile, load
using EvaluateFn = BOOL (*)(id, SEL, unsigned int, id, id, NSError* __autoreleasing*);    // evaluate
using UnloadFn = BOOL (*)(id, SEL, unsigned int, NSError* __autoreleasing*);              // unload

template <typename Fn>
Fn send() {
  return reinterpret_cast<Fn>(objc_msgSend);
}

// Process-wide state: the framework handle, its classes and selectors, the
// compile counter and the temporary folders in use. Never destroyed (the
// table has no close, and programs may outlive static destruction).
struct PrivateApi {
  std::mutex open_mutex;
  bool ready = false;
  void* handle = nullptr;
  __unsafe_unretained Class descriptor_class = nil;  // _ANEInMemoryModelDescriptor
  __unsafe_unretained Class model_class = nil;       // _ANEInMemoryModel
  __unsafe_unretained Class request_class = nil;     // _ANERequest
  __unsafe_unretained Class surface_class = nil;     // _ANEIOSurfaceObject
  SEL model_with_mil = nullptr;
  SEL in_memory_model = nullptr;
  SEL hex_identifier = nullptr;
  SEL compile = nullptr;
  SEL load = nullptr;
  SEL evaluate = nullptr;
  SEL unload = nullptr;
  SEL wrap_surface = nullptr;
  SEL make_request = nullptr;
  // Attempts, counted on entry to compile whatever happens next.
  std::atomic<size_t> compiles{0};
  // Two identical programs get the same hex identifier and so the same
  // folder: it is removed when the last of them is unloaded.
  std::mutex folders_mutex;
  std::map<std::string, int> folder_users;
};

PrivateApi& shared_api() {
  static PrivateApi* api = new PrivateApi;
  return *api;
}

// Writes a one-line message (newlines become spaces), truncated to the buffer.
__attribute__((format(printf, 3, 4))) void set_error(char* error, size_t error_size, const char* format, ...) {
  if (!error || error_size == 0) return;
  va_list args;
  va_start(args, format);
  std::vsnprintf(error, error_size, format, args);
  va_end(args);
  for (char* c = error; *c; ++c) {
    if (*c == '\n' || *c == '\r') *c = ' ';
  }
}

std::string utf8(NSString* s) {
  const char* text = s ? [s UTF8String] : nullptr;
  return text ? std::string(text) : std::string();
}

// "description (domain code)", or a note that the framework gave no NSError.
std::string describe(NSError* e) {
  if (!e) return "no NSError given";
  return utf8([e localizedDescription]) + " (" + utf8([e domain]) + " " + std::to_string(static_cast<long>([e code])) +
         ")";
}

// Runs one entry point's body in an autorelease pool and turns anything it
// throws, Objective-C or C++, into a message and a non-zero return.
template <typename Body>
int guarded(char* error, size_t error_size, const char* what, Body&& body) {
  try {
    @try {
      @autoreleasepool {
        return body();
      }
    } @catch (NSException* e) {
      set_error(error, error_size, "ane: %s: Objective-C exception %s: %s", what, utf8([e name]).c_str(),
                utf8([e reason]).c_str());
      return 1;
    }
  } catch (const std::bad_alloc&) {
    set_error(error, error_size, "ane: %s: out of memory", what);
  } catch (const std::exception& e) {
    set_error(error, error_size, "ane: %s: %s", what, e.what());
  } catch (...) {
    set_error(error, error_size, "ane: %s: unknown exception", what);
  }
  return 1;
}

// A flat byte buffer: one row of `bytes` one-byte elements, pixel format 0.
IOSurfaceRef make_surface(size_t bytes) {
  NSDictionary* properties = @{
    (__bridge NSString*)kIOSurfaceWidth : @(bytes),
    (__bridge NSString*)kIOSurfaceHeight : @1,
    (__bridge NSString*)kIOSurfaceBytesPerElement : @1,
    (__bridge NSString*)kIOSurfaceBytesPerRow : @(bytes),
    (__bridge NSString*)kIOSurfaceAllocSize : @(bytes),
    (__bridge NSString*)kIOSurfacePixelFormat : @0,
  };
  return IOSurfaceCreate((__bridge CFDictionaryRef)properties);
}

// "@model_path/weights/w.bin" -> "weights/w.bin"; empty when the path does
// not start with @model_path/ or would leave the program's folder.
std::string folder_relative(const char* mil_path) {
  const size_t prefix = std::strlen(kModelPathPrefix);
  if (!mil_path || std::strncmp(mil_path, kModelPathPrefix, prefix) != 0) return {};
  std::string rest(mil_path + prefix);
  if (rest.empty() || rest.front() == '/') return {};
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find('/', start);
    if (end == std::string::npos) end = rest.size();
    const std::string part = rest.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return {};
    start = end + 1;
  }
  return rest;
}

NSString* ns_string(const std::string& s) { return [NSString stringWithUTF8String:s.c_str()]; }

void release_folder(PrivateApi& api, NSString* folder) {
  const std::string key = utf8(folder);
  bool remove = false;
  {
    std::lock_guard<std::mutex> lock(api.folders_mutex);
    auto it = api.folder_users.find(key);
    if (it != api.folder_users.end() && --it->second <= 0) {
      api.folder_users.erase(it);
      remove = true;
    }
  }
  if (remove) {
    NSError* ignored = nil;
    [[NSFileManager defaultManager] removeItemAtPath:folder error:&ignored];
  }
}

}  // namespace

// A compiled and loaded program: the model, its surfaces (one per tensor,
// owned here: CFRelease on unload) and the request that binds them.
struct milrt_ane_program {
  PrivateApi* api = nullptr;
  id model = nil;
  id request = nil;
  NSString* folder = nil;  // set once the folder is counted in api->folder_users
  bool loaded = false;
  std::vector<IOSurfaceRef> inputs;
  std::vector<IOSurfaceRef> outputs;
  std::vector<size_t> input_bytes;
  std::vector<size_t> output_bytes;
};

namespace {

// Unloads (when loaded), drops the framework objects, releases the surfaces
// and the temporary folder. Never throws.
void free_program(milrt_ane_program* p) {
  if (!p) return;
  try {
    @try {
      @autoreleasepool {
        if (p->loaded) {
          NSError* ignored = nil;
          send<UnloadFn>()(p->model, p->api->unload, kQoS, &ignored);
          p->loaded = false;
        }
        p->request = nil;
        p->model = nil;
      }
    } @catch (NSException*) {
    }
  } catch (...) {
  }
  for (IOSurfaceRef s : p->inputs) {
    if (s) CFRelease(s);
  }
  for (IOSurfaceRef s : p->outputs) {
    if (s) CFRelease(s);
  }
  if (p->folder) {
    try {
      @try {
        @autoreleasepool {
          release_folder(*p->api, p->folder);
        }
      } @catch (NSException*) {
      }
    } catch (...) {
    }
    p->folder = nil;
  }
  delete p;
}

struct ProgramDeleter {
  void operator()(milrt_ane_program* p) const { free_program(p); }
};
using ProgramPtr = std::unique_ptr<milrt_ane_program, ProgramDeleter>;

// Writes `data` to `path`, creating its parent folders.
bool write_file(NSString* path, NSData* data, std::string* why) {
  NSError* err = nil;
  NSString* parent = [path stringByDeletingLastPathComponent];
  if (![[NSFileManager defaultManager] createDirectoryAtPath:parent
                                 withIntermediateDirectories:YES
                                                  attributes:nil
                                                       error:&err]) {
    *why = "cannot create " + utf8(parent) + ": " + describe(err);
    return false;
  }
  if (![data writeToFile:path options:NSDataWritingAtomic error:&err]) {
    *why = "cannot write " + utf8(path) + ": " + describe(err);
    return false;
  }
  return true;
}

int do_compile(PrivateApi& api, const char* mil_text, size_t mil_size, const milrt_ane_weight_file* weights,
               size_t n_weights, const size_t* input_bytes, size_t n_inputs, const size_t* output_bytes,
               size_t n_outputs, milrt_ane_program** program, char* error, size_t error_size) {
  if (!mil_text || mil_size == 0) {
    set_error(error, error_size, "ane: compile: empty MIL text");
    return 1;
  }
  if (n_weights > 0 && !weights) {
    set_error(error, error_size, "ane: compile: %zu weight files but no array", n_weights);
    return 1;
  }
  if (n_inputs == 0 || !input_bytes || n_outputs == 0 || !output_bytes) {
    set_error(error, error_size, "ane: compile: a program needs at least one input and one output (got %zu, %zu)",
              n_inputs, n_outputs);
    return 1;
  }
  for (size_t i = 0; i < n_inputs; ++i) {
    if (input_bytes[i] == 0) {
      set_error(error, error_size, "ane: compile: input %zu has size 0", i);
      return 1;
    }
  }
  for (size_t i = 0; i < n_outputs; ++i) {
    if (output_bytes[i] == 0) {
      set_error(error, error_size, "ane: compile: output %zu has size 0", i);
      return 1;
    }
  }

  ProgramPtr p(new milrt_ane_program);
  p->api = &api;
  p->input_bytes.assign(input_bytes, input_bytes + n_inputs);
  p->output_bytes.assign(output_bytes, output_bytes + n_outputs);

  // The weights as the descriptor takes them: MIL path -> {offset: 0, data}.
  NSData* mil = [NSData dataWithBytes:mil_text length:mil_size];
  NSMutableDictionary* weight_dict = [NSMutableDictionary dictionary];
  std::vector<std::string> relative_paths;
  for (size_t i = 0; i < n_weights; ++i) {
    const milrt_ane_weight_file& w = weights[i];
    const std::string relative = folder_relative(w.mil_path);
    if (relative.empty()) {
      set_error(error, error_size, "ane: compile: weight path \"%s\" is not @model_path/<relative path>",
                w.mil_path ? w.mil_path : "(null)");
      return 1;
    }
    if (w.size > 0 && !w.data) {
      set_error(error, error_size, "ane: compile: weight file %s has %zu bytes but no data", w.mil_path, w.size);
      return 1;
    }
    NSData* bytes = w.size > 0 ? [NSData dataWithBytes:w.data length:w.size] : [NSData data];
    [weight_dict setObject:@{@"offset" : @0, @"data" : bytes} forKey:ns_string(w.mil_path)];
    relative_paths.push_back(relative);
  }

  id descriptor = send<DescriptorFn>()((id)api.descriptor_class, api.model_with_mil, mil, weight_dict, nil);
  if (!descriptor) {
    set_error(error, error_size, "ane: compile: _ANEInMemoryModelDescriptor rejected the MIL text (%zu bytes, %zu weight files)",
              mil_size, n_weights);
    return 1;
  }
  p->model = send<ModelFn>()((id)api.model_class, api.in_memory_model, descriptor);
  if (!p->model) {
    set_error(error, error_size, "ane: compile: _ANEInMemoryModel returned no model for the descriptor");
    return 1;
  }

  // The program's folder: model.mil and the weight files under their
  // @model_path-relative names.
  id hex = send<GetObjectFn>()(p->model, api.hex_identifier);
  if (![hex isKindOfClass:[NSString class]] || [(NSString*)hex length] == 0) {
    set_error(error, error_size, "ane: compile: the model has no hexStringIdentifier");
    return 1;
  }
  NSString* folder = [NSTemporaryDirectory() stringByAppendingPathComponent:(NSString*)hex];
  {
    std::lock_guard<std::mutex> lock(api.folders_mutex);
    ++api.folder_users[utf8(folder)];
  }
  p->folder = folder;
  std::string why;
  if (!write_file([folder stringByAppendingPathComponent:@"model.mil"], mil, &why)) {
    set_error(error, error_size, "ane: compile: %s", why.c_str());
    return 1;
  }
  for (size_t i = 0; i < n_weights; ++i) {
    NSString* path = [folder stringByAppendingPathComponent:ns_string(relative_paths[i])];
    if (!write_file(path, [[weight_dict objectForKey:ns_string(weights[i].mil_path)] objectForKey:@"data"], &why)) {
      set_error(error, error_size, "ane: compile: %s", why.c_str());
      return 1;
    }
  }

  NSError* err = nil;
  if (!send<QoSOptionsFn>()(p->model, api.compile, kQoS, @{}, &err)) {
    set_error(error, error_size, "ane: compile failed (attempt %zu in this process): %s", api.compiles.load(),
              describe(err).c_str());
    return 1;
  }
  err = nil;
  BOOL loaded = send<QoSOptionsFn>()(p->model, api.load, kQoS, @{}, &err);
  if (!loaded) {
    usleep(100 * 1000);
    err = nil;
    loaded = send<QoSOptionsFn>()(p->model, api.load, kQoS, @{}, &err);
  }
  if (!loaded) {
    set_error(error, error_size, "ane: load failed (after one retry): %s", describe(err).c_str());
    return 1;
  }
  p->loaded = true;

  // One surface per tensor, wrapped for the request; the request is built
  // here once and reused by every evaluation.
  NSMutableArray* input_objects = [NSMutableArray array];
  NSMutableArray* input_indices = [NSMutableArray array];
  NSMutableArray* output_objects = [NSMutableArray array];
  NSMutableArray* output_indices = [NSMutableArray array];
  for (size_t k = 0; k < n_inputs + n_outputs; ++k) {
    const bool is_input = k < n_inputs;
    const size_t index = is_input ? k : k - n_inputs;
    const size_t bytes = is_input ? input_bytes[index] : output_bytes[index];
    IOSurfaceRef surface = make_surface(bytes);
    if (!surface) {
      set_error(error, error_size, "ane: compile: IOSurfaceCreate failed for %s %zu (%zu bytes)",
                is_input ? "input" : "output", index, bytes);
      return 1;
    }
    (is_input ? p->inputs : p->outputs).push_back(surface);
    id wrapped = send<WrapSurfaceFn>()((id)api.surface_class, api.wrap_surface, surface);
    if (!wrapped) {
      set_error(error, error_size, "ane: compile: _ANEIOSurfaceObject could not wrap %s %zu",
                is_input ? "input" : "output", index);
      return 1;
    }
    [(is_input ? input_objects : output_objects) addObject:wrapped];
    [(is_input ? input_indices : output_indices) addObject:@(index)];
  }
  p->request = send<RequestFn>()((id)api.request_class, api.make_request, input_objects, input_indices,
                                 output_objects, output_indices, nil, nil, @0);
  if (!p->request) {
    set_error(error, error_size, "ane: compile: _ANERequest returned no request (%zu inputs, %zu outputs)", n_inputs,
              n_outputs);
    return 1;
  }
  *program = p.release();
  return 0;
}

// ---- the table's entry points ----

int ane_compile(void* context, const char* mil_text, size_t mil_size, const milrt_ane_weight_file* weights,
                size_t n_weights, const size_t* input_bytes, size_t n_inputs, const size_t* output_bytes,
                size_t n_outputs, milrt_ane_program** program, char* error, size_t error_size) {
  if (!context || !program) {
    set_error(error, error_size, "ane: compile: null %s", context ? "program pointer" : "context");
    return 1;
  }
  *program = nullptr;
  PrivateApi& api = *static_cast<PrivateApi*>(context);
  api.compiles.fetch_add(1);
  return guarded(error, error_size, "compile", [&]() -> int {
    return do_compile(api, mil_text, mil_size, weights, n_weights, input_bytes, n_inputs, output_bytes, n_outputs,
                      program, error, error_size);
  });
}

// Locks `surface` (read-only when reading), copies, unlocks.
int copy_surface(IOSurfaceRef surface, void* host, size_t size, bool to_surface, const char* what, size_t index,
                 char* error, size_t error_size) {
  const IOSurfaceLockOptions options = to_surface ? 0 : kIOSurfaceLockReadOnly;
  const kern_return_t locked = IOSurfaceLock(surface, options, nullptr);
  if (locked != 0) {
    set_error(error, error_size, "ane: %s %zu: IOSurfaceLock failed (0x%x)", what, index,
              static_cast<unsigned>(locked));
    return 1;
  }
  void* base = IOSurfaceGetBaseAddress(surface);
  if (base) {
    if (to_surface) {
      std::memcpy(base, host, size);
    } else {
      std::memcpy(host, base, size);
    }
  }
  IOSurfaceUnlock(surface, options, nullptr);
  if (!base) {
    set_error(error, error_size, "ane: %s %zu: the surface has no base address", what, index);
    return 1;
  }
  return 0;
}

int ane_write_input(void* context, milrt_ane_program* program, size_t index, const void* data, size_t size,
                    char* error, size_t error_size) {
  if (!program) {
    set_error(error, error_size, "ane: write_input: null program");
    return 1;
  }
  if (index >= program->inputs.size()) {
    set_error(error, error_size, "ane: write_input: input %zu of %zu", index, program->inputs.size());
    return 1;
  }
  if (size != program->input_bytes[index] || !data) {
    set_error(error, error_size, "ane: write_input: input %zu takes %zu bytes, got %zu%s", index,
              program->input_bytes[index], size, data ? "" : " (null data)");
    return 1;
  }
  return guarded(error, error_size, "write_input", [&]() -> int {
    return copy_surface(program->inputs[index], const_cast<void*>(data), size, true, "input", index, error,
                        error_size);
  });
}

int ane_evaluate(void* context, milrt_ane_program* program, char* error, size_t error_size) {
  if (!program) {
    set_error(error, error_size, "ane: evaluate: null program");
    return 1;
  }
  return guarded(error, error_size, "evaluate", [&]() -> int {
    NSError* err = nil;
    if (!send<EvaluateFn>()(program->model, program->api->evaluate, kQoS, @{}, program->request, &err)) {
      set_error(error, error_size, "ane: evaluate failed: %s", describe(err).c_str());
      return 1;
    }
    return 0;
  });
}

int ane_read_output(void* context, milrt_ane_program* program, size_t index, void* data, size_t size, char* error,
                    size_t error_size) {
  if (!program) {
    set_error(error, error_size, "ane: read_output: null program");
    return 1;
  }
  if (index >= program->outputs.size()) {
    set_error(error, error_size, "ane: read_output: output %zu of %zu", index, program->outputs.size());
    return 1;
  }
  if (size != program->output_bytes[index] || !data) {
    set_error(error, error_size, "ane: read_output: output %zu holds %zu bytes, asked for %zu%s", index,
              program->output_bytes[index], size, data ? "" : " (null data)");
    return 1;
  }
  return guarded(error, error_size, "read_output", [&]() -> int {
    return copy_surface(program->outputs[index], data, size, false, "output", index, error, error_size);
  });
}

void ane_unload(void* context, milrt_ane_program* program) { free_program(program); }

size_t ane_compile_count(void* context) {
  return context ? static_cast<PrivateApi*>(context)->compiles.load() : 0;
}

// Looks up one class and checks the methods this file sends it.
bool find_class(const char* name, const std::vector<SEL>& class_methods, const std::vector<SEL>& instance_methods,
                Class* out, char* error, size_t error_size) {
  Class cls = NSClassFromString(ns_string(name));
  if (!cls) {
    set_error(error, error_size, "ane: AppleNeuralEngine.framework has no class %s", name);
    return false;
  }
  for (SEL s : class_methods) {
    if (!class_getClassMethod(cls, s)) {
      set_error(error, error_size, "ane: +[%s %s] is missing", name, sel_getName(s));
      return false;
    }
  }
  for (SEL s : instance_methods) {
    if (!class_getInstanceMethod(cls, s)) {
      set_error(error, error_size, "ane: -[%s %s] is missing", name, sel_getName(s));
      return false;
    }
  }
  *out = cls;
  return true;
}

int open_api(PrivateApi& api, char* error, size_t error_size) {
  std::lock_guard<std::mutex> lock(api.open_mutex);
  if (api.ready) return 0;
  if (!api.handle) {
    api.handle = dlopen(kFrameworkPath, RTLD_NOW);
    if (!api.handle) {
      const char* why = dlerror();
      set_error(error, error_size, "ane: cannot load %s: %s", kFrameworkPath, why ? why : "unknown reason");
      return 1;
    }
  }
  api.model_with_mil = sel_registerName("modelWithMILText:weights:optionsPlist:");
  api.in_memory_model = sel_registerName("inMemoryModelWithDescriptor:");
  api.hex_identifier = sel_registerName("hexStringIdentifier");
  api.compile = sel_registerName("compileWithQoS:options:error:");
  api.load = sel_registerName("loadWithQoS:options:error:");
  api.evaluate = sel_registerName("evaluateWithQoS:options:request:error:");
  api.unload = sel_registerName("unloadWithQoS:error:");
  api.wrap_surface = sel_registerName("objectWithIOSurface:");
  api.make_request =
      sel_registerName("requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:");
  Class descriptor_class = nil, model_class = nil, request_class = nil, surface_class = nil;
  if (!find_class("_ANEInMemoryModelDescriptor", {api.model_with_mil}, {}, &descriptor_class, error, error_size) ||
      !find_class("_ANEInMemoryModel", {api.in_memory_model},
                  {api.hex_identifier, api.compile, api.load, api.evaluate, api.unload}, &model_class, error,
                  error_size) ||
      !find_class("_ANERequest", {api.make_request}, {}, &request_class, error, error_size) ||
      !find_class("_ANEIOSurfaceObject", {api.wrap_surface}, {}, &surface_class, error, error_size)) {
    return 1;
  }
  api.descriptor_class = descriptor_class;
  api.model_class = model_class;
  api.request_class = request_class;
  api.surface_class = surface_class;
  api.ready = true;
  return 0;
}

}  // namespace

extern "C" int milrt_ane_open_private(milrt_ane_device* out, char* error, size_t error_size) {
  if (!out) {
    set_error(error, error_size, "ane: open: null device table");
    return 1;
  }
  PrivateApi& api = shared_api();
  return guarded(error, error_size, "open", [&]() -> int {
    if (open_api(api, error, error_size) != 0) return 1;
    milrt_ane_device device{};
    device.name = "ane";
    device.context = &api;
    device.compile = ane_compile;
    device.write_input = ane_write_input;
    device.evaluate = ane_evaluate;
    device.read_output = ane_read_output;
    device.unload = ane_unload;
    device.compile_count = ane_compile_count;
    *out = device;
    return 0;
  });
}
