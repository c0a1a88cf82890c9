/* src/core/internal.h - helpers shared by the library's sources (not public). */
#ifndef CT_CORE_INTERNAL_H
#define CT_CORE_INTERNAL_H

#include <stdarg.h>
#include "ctrain/context.h"
#include "ctrain/status.h"
#include "ctrain/tensor.h"

#define CT_ALIGN 64

/* Records `s` with a formatted message on ctx and returns s. The message
 * should name the problem and say what to do. */
ct_status ct_set_error(ct_context *ctx, ct_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Re-records the context's last message as `prefix` + that message (without
 * its "E70001 CT_E_IO: " code) + `suffix`, with status s, and returns s: a
 * caller adds what it knows (the file, the fix) to a callee's error. */
ct_status ct_wrap_error(ct_context *ctx, ct_status s, const char *prefix, const char *suffix);
/* Both return their `s`; the macros say so where the call is, so that the
 * static analyzers (make lint) see that an error path never returns CT_OK
 * and leaves its out-parameters unset only then (they do not see into
 * context.c). `s` is evaluated once. */
#define ct_set_error(ctx, s, ...) \
    __extension__({ const ct_status ct_se_s_ = (s); (ct_set_error)((ctx), ct_se_s_, __VA_ARGS__); ct_se_s_; })
#define ct_wrap_error(ctx, s, prefix, suffix) \
    __extension__({ const ct_status ct_we_s_ = (s); (ct_wrap_error)((ctx), ct_we_s_, (prefix), (suffix)); ct_we_s_; })

/* The CPU's features (cpuid + XGETBV; cpu.c, the one probe), detected once
 * per process. amx_permitted is 0 here: a context asks for it. */
const ct_cpu_features *ct_cpu_probe(void);
/* The best ISA these features run (AVX-512: F, BW, DQ, VL; AVX2: AVX2 + FMA). */
ct_isa ct_cpu_best_isa(const ct_cpu_features *f);
/* FLOPs per second of the CPU's AVX512-BF16 dot products (vdpbf16ps: 64 a
 * zmm instruction) over those of its FP32 FMAs (vfmadd231ps: 32), both
 * measured once per process on 12 independent chains (~1 ms in all, best of
 * 5 alternating runs); 0 without AVX512-BF16. About 2 on AMD Zen 4 / 5, whose
 * dot products run at the FMA's instruction rate; about 0.5 on Intel
 * Sapphire / Emerald Rapids (vdpbf16ps there is a quarter of the FMA's
 * instruction rate), where BF16 matmuls only pay on AMX. */
double ct_cpu_bf16_dot_ratio(void);

/* The monotonic clock (clock.c): nanoseconds / seconds since an arbitrary start. */
int64_t ct_now_ns(void);
double ct_now_s(void);

/* Propagate a failing status. */
#define CT_TRY(expr)                                \
    do {                                            \
        ct_status ct_try_s_ = (expr);               \
        if (ct_try_s_ != CT_OK) return ct_try_s_;   \
    } while (0)

#define CT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CT_MAX(a, b) ((a) > (b) ? (a) : (b))

static inline size_t ct_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
/* The whole pages inside x[b, e) back to the system (madvise MADV_DONTNEED: they read as zeros and come back
 * when written): 1 when released and reading back as zeros, 0 when the range holds no whole page, -1 when the
 * system did not give them back as zeros; *a, *d: the pages' bounds (context.c; ZeRO's gradients and
 * parameters). */
int ct_release_pages(float *x, size_t b, size_t e, char **a, char **d);
/* Subnormals flushed to zero while ctrain computes (fpenv.c; ct_context_opts.flush_subnormals): every call that
 * computes brackets its work with ct_fp_enter / ct_fp_leave (nested scopes are free; the outermost sets FTZ/DAZ
 * in the caller's thread and the OpenMP workers and restores their MXCSR on leave); the library's own threads
 * call ct_fp_thread_flush at their start. */
typedef struct ct_fp_scope {
    unsigned saved;
    int threads, on;
} ct_fp_scope;
void ct_fp_enter(const ct_context *ctx, ct_fp_scope *s);
void ct_fp_leave(ct_fp_scope *s);
void ct_fp_thread_flush(const ct_context *ctx);
/* The length of [b0, e0) ∩ [b1, e1) (0 when they do not meet). */
static inline size_t ct_overlap(size_t b0, size_t e0, size_t b1, size_t e1) {
    const size_t lo = CT_MAX(b0, b1), hi = CT_MIN(e0, e1);
    return hi > lo ? hi - lo : 0;
}

/* Temporary memory of kernels that need it only while they run, shared by
 * every node of a plan (they run one at a time): grown on demand by
 * ct_scratch_reserve (old contents lost), freed with the plan. oneDNN's
 * layout copies and scratchpads live there. */
typedef struct ct_scratch {
    void *p;
    size_t bytes;
} ct_scratch;

/* *out <- at least `bytes` of sc, grown through ct_alloc when smaller;
 * release frees it. */
ct_status ct_scratch_reserve(ct_context *ctx, ct_scratch *sc, size_t bytes, void **out);
void ct_scratch_release(ct_context *ctx, ct_scratch *sc);

#endif
