// Stub of <objc/runtime.h> (syntax check only). id, Class and SEL are
// built into clang's Objective-C; these are the runtime calls used.
#pragma once
#include <objc/objc.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef struct objc_method* Method;
SEL sel_registerName(const char* name);
const char* sel_getName(SEL sel);
Class objc_getClass(const char* name);
Method class_getClassMethod(Class cls, SEL name);
Method class_getInstanceMethod(Class cls, SEL name);
#ifdef __cplusplus
}
#endif
