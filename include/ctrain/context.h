/* ctrain/context.h - the context owns everything that would otherwise be
 * global: thread count, the counter-based RNG seed, detected CPU features,
 * the allocator and its memory budget, and the last error message. */
#ifndef CTRAIN_CONTEXT_H
#define CTRAIN_CONTEXT_H

#include <stddef.h>
#include <stdint.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_context ct_context;

/* Instruction-set levels for the hand-written fast kernels. */
typedef enum ct_isa {
    CT_ISA_REF = 0,   /* plain C reference kernels only (also disables oneDNN) */
    CT_ISA_AVX2,      /* AVX2 + FMA                                             */
    CT_ISA_AVX512,    /* AVX-512 F/BW/DQ/VL                                     */
    CT_ISA_COUNT
} ct_isa;

typedef struct ct_cpu_features {
    int avx2, fma, f16c;
    int avx512f, avx512bw, avx512dq, avx512vl;
    int avx512_bf16, avx512_fp16;
    int amx_tile, amx_bf16, amx_int8;
    int os_avx, os_avx512, os_amx; /* OS saves the register state (XGETBV)  */
    int amx_permitted;             /* arch_prctl(ARCH_REQ_XCOMP_PERM) worked */
} ct_cpu_features;

/* Replaceable allocator. alloc must return memory aligned to `align`. */
typedef struct ct_allocator {
    void *(*alloc)(void *user, size_t bytes, size_t align);
    void (*free)(void *user, void *ptr);
    void *user;
} ct_allocator;

typedef struct ct_context_opts {
    int num_threads;          /* 0: all online cores                            */
    uint64_t seed;            /* RNG seed; results independent of threads       */
    size_t memory_budget;     /* bytes; 0: unlimited                            */
    const ct_allocator *allocator; /* NULL: aligned malloc                      */
    int isa;                  /* -1: best available (CT_ISA env var can lower)  */
    int use_onednn;           /* 1: oneDNN kernels where available (default)    */
    /* 1 (default): subnormal floats are flushed to zero (x86 MXCSR FTZ and
     * DAZ) in every thread that computes for this context: the caller's
     * thread and the OpenMP workers for the duration of each call that
     * computes (ct_plan_forward, ct_plan_backward, ct_optimizer_step,
     * ct_train; the caller's and the workers' own MXCSR are restored when the
     * outermost such call returns), the prefetch workers and the gradient
     * buckets' progress thread. Values below 1.2e-38 become 0: gradients and
     * Adam's second moments decay into that range late in training, and x86
     * cores take microcode assists on them (the demo's epochs slowed from
     * 2.7 s to 5.1 s on a Xeon). 0 keeps subnormals, as PyTorch does by
     * default (torch.set_flush_denormal(False)); results can then differ from
     * the default in the last bits. The environment variable
     * CT_FLUSH_SUBNORMALS=0|1 overrides it. */
    int flush_subnormals;
    /* 1 (default): the default allocator puts blocks of 4 MiB and more (the
     * plan's arenas, parameters, gradients, optimizer state) on 2 MiB
     * boundaries and asks the kernel for transparent huge pages for them
     * (madvise MADV_HUGEPAGE: Debian's default THP mode grants them only to
     * regions that ask). Fewer TLB misses: a few to 10% faster steps, a few
     * MB more resident memory. No effect with a caller's allocator or where
     * /sys/kernel/mm/transparent_hugepage/enabled is "never". The
     * environment variable CT_HUGE_PAGES=0|1 overrides it. */
    int huge_pages;
} ct_context_opts;

/* Fills opts with defaults (all threads, seed 0, no budget, best ISA). */
void ct_context_opts_default(ct_context_opts *opts);
/* Creates a context. It does not (cannot) change how OpenMP threads wait:
 * see ct_openmp_limit_spin below, which a program calls first thing in main
 * to get the `ctrain` CLI's short spin. */
ct_status ct_context_create(const ct_context_opts *opts, ct_context **out);
/* Checks the environment variables ctrain reads (CT_ISA=ref|avx2|avx512,
 * CT_ONEDNN, CT_FLUSH_SUBNORMALS, CT_HUGE_PAGES, CT_ATTENTION_AMX and CT_BF16_NATIVE = 0|1, CT_MATMUL_AMX =
 * auto|0|1): CT_OK, or
 * CT_E_CONFIG with "environment variable X='v' is not valid: use ..." in msg
 * (when msg is not NULL). ct_context_create returns CT_E_CONFIG for the same
 * values, before it has a context to carry a message: call this to say why. */
ct_status ct_context_env_check(char *msg, size_t len);
void ct_context_free(ct_context *ctx); /* accepts NULL */

/* OpenMP spin-waiting. ctrain and oneDNN run on GNU OpenMP (libgomp), whose
 * idle threads spin GOMP_SPINCOUNT = 300000 times at a barrier before they
 * sleep. On cores shared with other jobs that makes a training step up to 5x
 * slower (50 MLP steps: 15.7 s against 3.3 s with GOMP_SPINCOUNT=10000 beside
 * a 2-thread neighbour). libgomp reads GOMP_SPINCOUNT and OMP_WAIT_POLICY
 * once, in its constructor, when the program is loaded, before main and
 * before any ctrain code: a setenv() afterwards (by ct_context_create or by
 * the program) has no effect on the running process (measured, docs/abi.md).
 * So the library cannot shorten the spin of the process it is loaded in; the
 * one way is to start the process with the variable set, in its environment
 * or with this call, which does what `ctrain` does:
 *
 *   int main(int argc, char **argv) {
 *       ct_openmp_limit_spin(argv);   // first, before any thread starts
 *       ...
 *
 * When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set (to anything), it
 * sets GOMP_SPINCOUNT=10000 and re-executes the program (/proc/self/exe)
 * with the same argv and environment: on success it does not return, and in
 * the new process the variable is set, so the call returns CT_OK at once.
 * When either variable is already set it returns CT_OK and does nothing (set
 * one to choose another policy, e.g. OMP_WAIT_POLICY=active on dedicated
 * cores). Errors (the program then simply runs with libgomp's defaults):
 * CT_E_INVALID_ARG (argv NULL or empty), CT_E_OOM (setenv failed), CT_E_IO
 * (the re-execution failed; GOMP_SPINCOUNT is unset again). No context
 * exists yet, so there is no message. For programs, not libraries: it
 * replaces the process, so call it before any other work (threads, files,
 * output). */
ct_status ct_openmp_limit_spin(char *const *argv);

/* Last error message set on this context ("" when none). */
const char *ct_context_last_error(const ct_context *ctx);
void ct_context_clear_error(ct_context *ctx);

int ct_context_num_threads(const ct_context *ctx);
int ct_context_flush_subnormals(const ct_context *ctx); /* 1: FTZ/DAZ on (ct_context_opts) */
/* 1: the context's default allocator asks for huge pages (ct_context_opts.huge_pages) */
int ct_context_huge_pages(const ct_context *ctx);
uint64_t ct_context_seed(const ct_context *ctx);
/* Sums x (n doubles) in place across the processes of a data parallel job
 * (sync_batchnorm: BatchNorm's batch statistics over the global batch). */
typedef ct_status (*ct_batch_sum_fn)(void *user, double *x, size_t n);
/* Installs fn (NULL: none, the default): training-mode BatchNorm then sums its
 * per-channel statistics (forward: sum and squared deviations and the count;
 * backward: the two sums of dy) through it, on the reference kernel. */
void ct_context_set_batch_sum(ct_context *ctx, ct_batch_sum_fn fn, void *user);
ct_batch_sum_fn ct_context_batch_sum(const ct_context *ctx, void **user);
const ct_cpu_features *ct_context_cpu(const ct_context *ctx);
/* ISA actually used for fast kernels (min of CPU support, opts, CT_ISA). */
ct_isa ct_context_isa(const ct_context *ctx);
/* 1 when oneDNN kernels are enabled (off under CT_ISA=ref). */
int ct_context_use_onednn(const ct_context *ctx);
const char *ct_isa_name(ct_isa isa);

/* Allocation through the context: counted and checked against the budget. */
ct_status ct_alloc(ct_context *ctx, size_t bytes, void **out);
void ct_free(ct_context *ctx, void *ptr);
/* Statistics of the context allocator (for tests and memory reports). */
typedef struct ct_mem_stats {
    uint64_t n_allocs, n_frees;
    size_t bytes_in_use, peak_bytes;
} ct_mem_stats;
void ct_context_mem_stats(const ct_context *ctx, ct_mem_stats *out);

/* Counter-based RNG (Philox4x32-10): the value depends only on
 * (seed, stream, counter), never on thread count or call order. */
void ct_philox(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]);
/* Uniform float in [0,1) for element `i` of stream `stream`. */
float ct_rand_uniform(uint64_t seed, uint64_t stream, uint64_t i);

#ifdef __cplusplus
}
#endif
#endif
