// Stub of <objc/message.h> (syntax check only). Declared as the SDK does
// with OBJC_OLD_DISPATCH_PROTOTYPES=0: callers must cast objc_msgSend to the
// method's exact signature before calling it, as ane_private.mm does.
#pragma once
#include <objc/runtime.h>
#ifdef __cplusplus
extern "C" {
#endif
void objc_msgSend(void);
#ifdef __cplusplus
}
#endif
