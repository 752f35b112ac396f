// Stub of IOSurface/IOSurfaceRef.h: the calls and property keys
// ane_private.mm uses, with the SDK's signatures (syntax check only).
#pragma once
#include <CoreFoundation/CoreFoundation.h>

#ifdef __cplusplus
extern "C" {
#endif
typedef int kern_return_t;  // <mach/kern_return.h>
typedef struct __IOSurface* IOSurfaceRef;
typedef uint32_t IOSurfaceLockOptions;
enum { kIOSurfaceLockReadOnly = 0x00000001, kIOSurfaceLockAvoidSync = 0x00000002 };

extern const CFStringRef kIOSurfaceAllocSize;
extern const CFStringRef kIOSurfaceWidth;
extern const CFStringRef kIOSurfaceHeight;
extern const CFStringRef kIOSurfaceBytesPerRow;
extern const CFStringRef kIOSurfaceBytesPerElement;
extern const CFStringRef kIOSurfacePixelFormat;

IOSurfaceRef IOSurfaceCreate(CFDictionaryRef properties);
kern_return_t IOSurfaceLock(IOSurfaceRef buffer, IOSurfaceLockOptions options, uint32_t* seed);
kern_return_t IOSurfaceUnlock(IOSurfaceRef buffer, IOSurfaceLockOptions options, uint32_t* seed);
void* IOSurfaceGetBaseAddress(IOSurfaceRef buffer);
size_t IOSurfaceGetAllocSize(IOSurfaceRef buffer);
#ifdef __cplusplus
}
#endif
