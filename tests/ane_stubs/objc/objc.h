// Stub of <objc/objc.h> (syntax check only): BOOL and nil as the SDK defines
// them; id, Class and SEL are built into clang's Objective-C.
#pragma once
typedef signed char BOOL;
#define YES ((BOOL)1)
#define NO ((BOOL)0)
#ifdef __cplusplus
#define nil nullptr
#else
#define nil ((void*)0)
#endif
