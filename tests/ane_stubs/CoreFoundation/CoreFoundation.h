// Stub of the CoreFoundation types ane_private.mm touches (syntax check only).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
typedef const void* CFTypeRef;
typedef const struct __CFString* CFStringRef;
typedef const struct __CFDictionary* CFDictionaryRef;
typedef long CFIndex;
void CFRelease(CFTypeRef cf);
CFTypeRef CFRetain(CFTypeRef cf);
#ifdef __cplusplus
}
#endif
