/* src/core/fpenv.c - subnormals flushed to zero (x86 MXCSR: FTZ, bit 15, and
 * DAZ, bit 6) while ctrain computes (ct_context_opts.flush_subnormals).
 *
 * MXCSR is per thread. The outermost scope a thread enters (ct_fp_enter; the
 * scopes nest: calls that compute call each other) runs an OpenMP region of
 * the context's width in which each worker saves its MXCSR and sets the two
 * bits, then does the same for the caller; the matching ct_fp_leave restores
 * the workers' and then the caller's own values. A thread the OpenMP runtime
 * starts inherits the starting thread's MXCSR (Linux copies the FPU state on
 * clone): workers started by the first region inherit the caller's value as
 * it was; one started inside the scope inherits the bits and gets the
 * caller's saved value back on leave. The library's own threads (prefetch workers,
 * the buckets' progress thread) call ct_fp_thread_flush once at their start.
 * Other architectures: no-op (the scope still nests). */
#include <omp.h>

#include "internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define CT_MXCSR_FLUSH 0x8040u /* FTZ | DAZ */
static unsigned get_csr(void) { return _mm_getcsr(); }
static void set_csr(unsigned v) { _mm_setcsr(v); }
#else
#define CT_MXCSR_FLUSH 0u
static unsigned get_csr(void) { return 0; }
static void set_csr(unsigned v) { (void)v; }
#endif

static _Thread_local int fp_armed;            /* this thread is inside an outermost scope it entered */
static _Thread_local int fp_worker_has;        /* fp_worker_saved holds this worker's MXCSR from before the scope */
static _Thread_local unsigned fp_worker_saved;

void ct_fp_enter(const ct_context *ctx, ct_fp_scope *s) {
    s->on = 0;
    if (!ctx || !ct_context_flush_subnormals(ctx) || fp_armed) return;
    fp_armed = s->on = 1;
    s->saved = get_csr();
    s->threads = ct_context_num_threads(ctx);
    /* the workers first: one the runtime starts now inherits the caller's MXCSR as it was, and saves that */
#pragma omp parallel num_threads(s->threads) if (s->threads > 1)
    if (omp_get_thread_num() != 0) {
        fp_worker_saved = get_csr();
        fp_worker_has = 1;
        set_csr(fp_worker_saved | CT_MXCSR_FLUSH);
    }
    set_csr(s->saved | CT_MXCSR_FLUSH);
}

void ct_fp_leave(ct_fp_scope *s) {
    if (!s->on) return;
    /* a worker started inside the scope (inheriting the bits) gets the caller's value */
#pragma omp parallel num_threads(s->threads) if (s->threads > 1)
    if (omp_get_thread_num() != 0) {
        set_csr(fp_worker_has ? fp_worker_saved : s->saved);
        fp_worker_has = 0;
    }
    set_csr(s->saved);
    fp_armed = s->on = 0;
}

void ct_fp_thread_flush(const ct_context *ctx) {
    if (ctx && ct_context_flush_subnormals(ctx)) set_csr(get_csr() | CT_MXCSR_FLUSH);
}
