/* src/core/status.c - names, codes and advice for ct_status values. */
#include "ctrain/status.h"
#include "ctrain/version.h"

typedef struct {
    const char *name, *code, *advice;
} status_info;

static const status_info k_info[] = {
    [CT_OK] = {"CT_OK", "E00000", "no error"},
    [CT_E_INVALID_ARG] = {"CT_E_INVALID_ARG", "E40001", "check the argument's documented range"},
    [CT_E_SHAPE] = {"CT_E_SHAPE", "E40003", "check the layer sizes where the model is built"},
    [CT_E_DTYPE] = {"CT_E_DTYPE", "E40005",
                    "check the FP16/BF16 conversion boundaries: both operands need the same dtype"},
    [CT_E_UNSUPPORTED] = {"CT_E_UNSUPPORTED", "E50001",
                          "this op is not supported for this dtype/ISA: train in FP32 (precision fp32), keep that layer "
                          "or op kind in FP32 (keep_fp32), or lower the ISA (CT_ISA=avx2 or ref)"},
    [CT_E_OOM] = {"CT_E_OOM", "E60003",
                  "out of memory: lower the batch size, raise the memory budget, or enable activation "
                  "checkpointing"},
    [CT_E_IO] = {"CT_E_IO", "E70001", "check that the path exists and is readable/writable"},
    [CT_E_CORRUPT] = {"CT_E_CORRUPT", "E70002", "the file is corrupt or truncated: download or write it again"},
    [CT_E_CONFIG] = {"CT_E_CONFIG", "E40010", "fix the recipe; see docs/recipes.md for every key"},
    [CT_E_NONFINITE] = {"CT_E_NONFINITE", "E40020", "NaN/inf found: check the data, lower the learning rate"},
    [CT_E_STATE] = {"CT_E_STATE", "E40030", "call the functions in the documented order"},
    [CT_E_INTERNAL] = {"CT_E_INTERNAL", "E90001", "this is a bug in ctrain: please report it"},
    [CT_E_DIST] = {"CT_E_DIST", "E80001",
                   "a distributed run failed: check that every rank runs the same recipe and that no rank died "
                   "(the launcher names it); see docs/distributed.md"},
};

_Static_assert(sizeof k_info / sizeof k_info[0] == CT_STATUS_COUNT, "k_info needs one row per ct_status");

static const status_info *info(ct_status s) {
    if ((unsigned)s >= CT_STATUS_COUNT) return &k_info[CT_E_INTERNAL];
    return &k_info[s];
}

const char *ct_status_name(ct_status s) { return info(s)->name; }
const char *ct_status_code(ct_status s) { return info(s)->code; }
const char *ct_status_advice(ct_status s) { return info(s)->advice; }

const char *ct_version(void) { return CT_VERSION_STRING; }
