// Stub of <Foundation/Foundation.h>: the classes, methods and functions
// ane_private.mm uses, with the SDK's signatures (syntax check only; nothing
// here is implemented). Literals need NSString, NSNumber, NSArray and
// NSDictionary with the factory methods clang emits for them.
#pragma once
#include <CoreFoundation/CoreFoundation.h>
#include <objc/runtime.h>

typedef long NSInteger;
typedef unsigned long NSUInteger;

@class NSString, NSDictionary;

__attribute__((objc_root_class)) @interface NSObject
+ (Class)class;
- (BOOL)isKindOfClass:(Class)aClass;
@end

@interface NSString : NSObject
+ (instancetype)stringWithUTF8String:(const char*)nullTerminatedCString;
- (const char*)UTF8String;
- (NSUInteger)length;
- (NSString*)stringByAppendingPathComponent:(NSString*)str;
- (NSString*)stringByDeletingLastPathComponent;
@end

@interface NSNumber : NSObject
+ (NSNumber*)numberWithInt:(int)value;
+ (NSNumber*)numberWithUnsignedLong:(unsigned long)value;
@end

@interface NSArray : NSObject
+ (instancetype)arrayWithObjects:(const id[])objects count:(NSUInteger)cnt;
@end
@interface NSMutableArray : NSArray
+ (instancetype)array;
- (void)addObject:(id)anObject;
@end

@interface NSDictionary : NSObject
+ (instancetype)dictionaryWithObjects:(const id[])objects forKeys:(const id[])keys count:(NSUInteger)cnt;
- (id)objectForKey:(id)aKey;
@end
@interface NSMutableDictionary : NSDictionary
+ (instancetype)dictionary;
- (void)setObject:(id)anObject forKey:(id)aKey;
@end

typedef NSUInteger NSDataWritingOptions;
enum { NSDataWritingAtomic = 1UL << 0 };
@class NSError;
@interface NSData : NSObject
+ (instancetype)data;
+ (instancetype)dataWithBytes:(const void*)bytes length:(NSUInteger)length;
- (BOOL)writeToFile:(NSString*)path options:(NSDataWritingOptions)writeOptionsMask error:(NSError**)errorPtr;
@end

@interface NSError : NSObject
- (NSString*)domain;
- (NSInteger)code;
- (NSString*)localizedDescription;
@end

@interface NSException : NSObject
- (NSString*)name;
- (NSString*)reason;
@end

@interface NSFileManager : NSObject
+ (NSFileManager*)defaultManager;
- (BOOL)createDirectoryAtPath:(NSString*)path
  withIntermediateDirectories:(BOOL)createIntermediates
                   attributes:(NSDictionary*)attributes
                        error:(NSError**)error;
- (BOOL)removeItemAtPath:(NSString*)path error:(NSError**)error;
@end

#ifdef __cplusplus
extern "C" {
#endif
NSString* NSTemporaryDirectory(void);
Class NSClassFromString(NSString* aClassName);
#ifdef __cplusplus
}
#endif
