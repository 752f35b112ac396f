// The Neural Engine through Apple's private AppleNeuralEngine.framework
// (macOS only; ane_private.mm). Fills the device table of ane/device.h with
// the call sequence the shared Neural Engine notes describe: compile MIL text
// with its weights in memory, load, one IOSurface per tensor, one reusable
// request, synchronous evaluation at QoS 21.
//
// Built only on Apple platforms. On Linux the .mm is syntax-checked with
// clang against the stub headers in tests/ane_stubs/ (tools/check_ane_objc.sh,
// test AneObjcSyntax), which shows that it parses, not that the framework
// accepts these calls.
#pragma once
#include <stddef.h>

#include "ane/device.h"

#ifdef __cplusplus
extern "C" {
#endif

// Opens the private framework and fills `*out` (name "ane"). Returns 0 on
// success; otherwise non-zero with a one-line message in `error` when the
// framework cannot be loaded or one of its classes or methods is missing.
// The table's context is process-wide (the framework and the compile count
// are), so opening twice yields the same context and the same count; there
// is nothing to close.
int milrt_ane_open_private(milrt_ane_device* out, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif
