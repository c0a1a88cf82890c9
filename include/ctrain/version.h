/* ctrain/version.h - the library's version. The Makefile reads these three
 * numbers (the shared library's file name, ctrain.pc, the man page); the
 * soname changes only with the ABI (docs/abi.md). */
#ifndef CTRAIN_VERSION_H
#define CTRAIN_VERSION_H

#define CT_VERSION_MAJOR 0
#define CT_VERSION_MINOR 3
#define CT_VERSION_PATCH 0
#define CT_VERSION_STR_(a, b, c) #a "." #b "." #c
#define CT_VERSION_STR_X_(a, b, c) CT_VERSION_STR_(a, b, c)
/* "0.3.0": the version of the headers a program was compiled with */
#define CT_VERSION_STRING CT_VERSION_STR_X_(CT_VERSION_MAJOR, CT_VERSION_MINOR, CT_VERSION_PATCH)
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if */
#define CT_VERSION (CT_VERSION_MAJOR * 10000 + CT_VERSION_MINOR * 100 + CT_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the library loaded at run time ("0.3.0"), which may differ
 * from CT_VERSION_STRING when a program runs against another libctrain.so. */
const char *ct_version(void);

#ifdef __cplusplus
}
#endif

#endif
