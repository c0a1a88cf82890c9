/* src/core/context.c - the context: threads, RNG seed, CPU features, the
 * counting allocator with its memory budget, and the last error message. */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

struct ct_context {
    int num_threads;
    uint64_t seed;
    size_t budget;
    ct_allocator alloc;
    ct_cpu_features cpu;
    ct_isa isa;
    int use_onednn;
    int flush_subnormals;
    int huge_pages; /* default allocator: blocks of >= CT_HUGE_MIN bytes on 2 MiB pages */
    ct_mem_stats mem;
    char err[1024];
    ct_batch_sum_fn batch_sum; /* sync_batchnorm (ct_context_set_batch_sum) */
    void *batch_sum_user;
};

/* ---- errors ---------------------------------------------------------------- */

ct_status (ct_set_error)(ct_context *ctx, ct_status s, const char *fmt, ...) {
    if (!ctx) return s;
    int o = snprintf(ctx->err, sizeof ctx->err, "%s %s: ", ct_status_code(s), ct_status_name(s));
    if (o < 0) o = 0;
    if ((size_t)o < sizeof ctx->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->err + o, sizeof ctx->err - (size_t)o, fmt, ap);
        va_end(ap);
    }
    return s;
}

ct_status (ct_wrap_error)(ct_context *ctx, ct_status s, const char *prefix, const char *suffix) {
    if (!ctx) return s;
    char msg[sizeof ctx->err];
    snprintf(msg, sizeof msg, "%s", ctx->err);
    const char *c = strstr(msg, ": "); /* after the code set by ct_set_error */
    return ct_set_error(ctx, s, "%s%s%s", prefix ? prefix : "", c && c - msg < 40 ? c + 2 : msg, suffix ? suffix : "");
}

const char *ct_context_last_error(const ct_context *ctx) { return ctx ? ctx->err : "no context"; }
void ct_context_clear_error(ct_context *ctx) { if (ctx) ctx->err[0] = 0; }

/* ---- CPU features ------------------------------------------------------------ */

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

const char *ct_isa_name(ct_isa isa) {
    static const char *n[] = {"ref", "avx2", "avx512"};
    _Static_assert(sizeof n / sizeof n[0] == CT_ISA_COUNT, "one name per ct_isa");
    return (unsigned)isa < CT_ISA_COUNT ? n[isa] : "invalid";
}

/* ---- allocator --------------------------------------------------------------- */

/* Large blocks (the plan's arenas, parameters, gradients, optimizer state) start on a 2 MiB boundary and ask
 * for transparent huge pages (MADV_HUGEPAGE), which Debian's default THP mode ("madvise") grants only to regions
 * that ask. With 4 KiB pages a step's working set (hundreds of MB) misses the TLB on every pass: gpt-char-small
 * BF16 on an AMX Xeon ran 232 -> 211 ms per step with them, every op a little faster (docs/results.md). Where the
 * kernel has no THP, madvise fails and the block stays on small pages. */
#define CT_HUGE_PAGE ((size_t)2 << 20)
#define CT_HUGE_MIN ((size_t)4 << 20)

static void *default_alloc(void *user, size_t bytes, size_t align) {
    const int *huge = user;
    void *p = NULL;
    if (huge && *huge && bytes >= CT_HUGE_MIN && align <= CT_HUGE_PAGE) {
        if (posix_memalign(&p, CT_HUGE_PAGE, bytes) != 0) return NULL;
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        (void)madvise(p, (bytes + page - 1) / page * page, MADV_HUGEPAGE);
        return p;
    }
    if (posix_memalign(&p, align, bytes ? bytes : align) != 0) return NULL;
    return p;
}
static void default_free(void *user, void *p) { (void)user; free(p); }

/* Each block carries a header with its size so the budget can be tracked. */
#define HDR CT_ALIGN

ct_status ct_alloc(ct_context *ctx, size_t bytes, void **out) {
    *out = NULL;
    if (ctx->budget && ctx->mem.bytes_in_use + bytes > ctx->budget)
        return ct_set_error(ctx, CT_E_OOM,
                            "memory budget exceeded: %zu bytes requested, %zu of %zu in use; lower the batch "
                            "size, raise the budget or enable activation checkpointing",
                            bytes, ctx->mem.bytes_in_use, ctx->budget);
    char *p = ctx->alloc.alloc(ctx->alloc.user, bytes + HDR, CT_ALIGN);
    if (!p)
        return ct_set_error(ctx, CT_E_OOM,
                            "out of memory allocating %zu bytes; lower the batch size or enable activation "
                            "checkpointing",
                            bytes);
    memcpy(p, &bytes, sizeof bytes);
    ctx->mem.n_allocs++;
    ctx->mem.bytes_in_use += bytes;
    if (ctx->mem.bytes_in_use > ctx->mem.peak_bytes) ctx->mem.peak_bytes = ctx->mem.bytes_in_use;
    *out = p + HDR;
    return CT_OK;
}

void ct_free(ct_context *ctx, void *ptr) {
    if (!ptr) return;
    char *p = (char *)ptr - HDR;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    ctx->mem.n_frees++;
    ctx->mem.bytes_in_use -= bytes;
    ctx->alloc.free(ctx->alloc.user, p);
}

void ct_context_mem_stats(const ct_context *ctx, ct_mem_stats *out) { *out = ctx->mem; }

ct_status ct_scratch_reserve(ct_context *ctx, ct_scratch *sc, size_t bytes, void **out) {
    if (!ctx || !sc || !out) return CT_E_INVALID_ARG;
    if (bytes > sc->bytes) {
        ct_scratch_release(ctx, sc); /* first: the old and the new one need not fit together */
        CT_TRY(ct_alloc(ctx, bytes, &sc->p));
        sc->bytes = bytes;
    }
    *out = sc->p;
    return CT_OK;
}

void ct_scratch_release(ct_context *ctx, ct_scratch *sc) {
    if (!sc) return;
    ct_free(ctx, sc->p);
    sc->p = NULL;
    sc->bytes = 0;
}

/* ---- lifecycle --------------------------------------------------------------- */

void ct_context_opts_default(ct_context_opts *o) {
    memset(o, 0, sizeof *o);
    o->isa = -1;
    o->use_onednn = 1;
    o->flush_subnormals = 1;
    o->huge_pages = 1;
}

/* The variables ct_context_create reads (and CT_BF16_NATIVE, read at compile, CT_ONEDNN_BWD_DATA, read when a
 * convolution's primitives are created, CT_ATTENTION_AMX and CT_MATMUL_AMX, when an attention's or a GEMM's
 * kernel is built): a value that is not one of the accepted ones is an error, never silently ignored. */
ct_status ct_context_env_check(char *msg, size_t len) {
    static const struct {
        const char *name, *accepted[4];
    } vars[] = {{"CT_ISA", {"ref", "avx2", "avx512", NULL}},
                {"CT_ONEDNN", {"0", "1", NULL}},
                {"CT_FLUSH_SUBNORMALS", {"0", "1", NULL}},
                {"CT_HUGE_PAGES", {"0", "1", NULL}},
                {"CT_ATTENTION_AMX", {"0", "1", NULL}},
                {"CT_MATMUL_AMX", {"auto", "0", "1", NULL}},
                {"CT_BF16_NATIVE", {"0", "1", NULL}},
                {"CT_ONEDNN_BWD_DATA", {"fwd", "bwd", "auto", NULL}}};
    for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++) {
        const char *e = getenv(vars[v].name);
        if (!e || !*e) continue;
        int ok = 0;
        for (int j = 0; vars[v].accepted[j]; j++) ok |= !strcmp(e, vars[v].accepted[j]);
        if (ok) continue;
        if (msg && len) {
            char acc[64] = "";
            for (int j = 0; vars[v].accepted[j]; j++)
                snprintf(acc + strlen(acc), sizeof acc - strlen(acc), "%s%s", j == 0 ? "" : vars[v].accepted[j + 1] ? ", " : " or ",
                         vars[v].accepted[j]);
            snprintf(msg, len, "environment variable %s='%.64s' is not valid: use %s, or unset it", vars[v].name, e, acc);
        }
        return CT_E_CONFIG;
    }
    if (msg && len) msg[0] = 0;
    return CT_OK;
}

ct_status ct_context_create(const ct_context_opts *opts, ct_context **out) {
    ct_context_opts d;
    if (!out) return CT_E_INVALID_ARG;
    *out = NULL;
    if (!opts) {
        ct_context_opts_default(&d);
        opts = &d;
    }
    if (opts->num_threads < 0) return CT_E_INVALID_ARG;
    ct_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return CT_E_OOM;
    ctx->num_threads = opts->num_threads > 0 ? opts->num_threads : omp_get_num_procs();
    ctx->seed = opts->seed;
    ctx->budget = opts->memory_budget;
    ctx->huge_pages = opts->huge_pages != 0;
    const char *hp = getenv("CT_HUGE_PAGES");
    if (hp && *hp) ctx->huge_pages = hp[0] == '1';
    if (opts->allocator) ctx->alloc = *opts->allocator;
    else ctx->alloc = (ct_allocator){default_alloc, default_free, &ctx->huge_pages};
    ctx->cpu = *ct_cpu_probe();
    /* AMX tiles need the kernel's permission, asked once per context */
    if (ctx->cpu.amx_tile && ctx->cpu.os_amx)
        ctx->cpu.amx_permitted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    ct_isa isa = ct_cpu_best_isa(&ctx->cpu);
    if (opts->isa >= 0 && (ct_isa)opts->isa < isa) isa = (ct_isa)opts->isa;
    ctx->use_onednn = opts->use_onednn;
    if (ct_context_env_check(NULL, 0) != CT_OK) {
        free(ctx);
        return CT_E_CONFIG; /* no context to carry the message: ct_context_env_check says which variable */
    }
    const char *env = getenv("CT_ISA");
    if (env && *env) {
        ct_isa want = CT_ISA_COUNT;
        for (int i = 0; i < CT_ISA_COUNT; i++)
            if (!strcmp(env, ct_isa_name((ct_isa)i))) want = (ct_isa)i;
        if (want < isa) isa = want;
        if (want == CT_ISA_REF) ctx->use_onednn = 0;
    }
    env = getenv("CT_ONEDNN");
    if (env && !strcmp(env, "0")) ctx->use_onednn = 0;
    ctx->flush_subnormals = opts->flush_subnormals != 0;
    env = getenv("CT_FLUSH_SUBNORMALS");
    if (env && *env) ctx->flush_subnormals = env[0] == '1';
    ctx->isa = isa;
    *out = ctx;
    return CT_OK;
}

void ct_context_free(ct_context *ctx) { free(ctx); }

/* libgomp reads the variable only when it is loaded (before main), so the
 * process is started again with it set (context.h says why and measures). */
ct_status ct_openmp_limit_spin(char *const *argv) {
    if (!argv || !argv[0]) return CT_E_INVALID_ARG;
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return CT_OK;
    if (setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return CT_E_OOM;
    execv("/proc/self/exe", argv); /* returns only on failure */
    unsetenv("GOMP_SPINCOUNT");
    return CT_E_IO;
}

int ct_context_num_threads(const ct_context *ctx) { return ctx->num_threads; }
int ct_context_flush_subnormals(const ct_context *ctx) { return ctx ? ctx->flush_subnormals : 0; }
int ct_context_huge_pages(const ct_context *ctx) {
    return ctx && ctx->alloc.alloc == default_alloc && ctx->huge_pages;
}
uint64_t ct_context_seed(const ct_context *ctx) { return ctx->seed; }
void ct_context_set_batch_sum(ct_context *ctx, ct_batch_sum_fn fn, void *user) {
    if (!ctx) return;
    ctx->batch_sum = fn;
    ctx->batch_sum_user = fn ? user : NULL;
}
ct_batch_sum_fn ct_context_batch_sum(const ct_context *ctx, void **user) {
    if (user) *user = ctx ? ctx->batch_sum_user : NULL;
    return ctx ? ctx->batch_sum : NULL;
}
const ct_cpu_features *ct_context_cpu(const ct_context *ctx) { return &ctx->cpu; }
ct_isa ct_context_isa(const ct_context *ctx) { return ctx->isa; }
int ct_context_use_onednn(const ct_context *ctx) { return ctx->use_onednn; }

/* ---- Philox4x32-10 counter-based RNG ------------------------------------------ */

void ct_philox(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

float ct_rand_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
    uint32_t r[4];
    ct_philox(seed, stream, i >> 2, r);
    return (float)(r[i & 3] >> 8) * (1.0f / 16777216.0f);
}

int ct_release_pages(float *x, size_t b, size_t e, char **a, char **d) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    *a = (char *)(((uintptr_t)(x + b) + pg - 1) / pg * pg);
    *d = (char *)((uintptr_t)(x + e) / pg * pg);
    if (b >= e || *a >= *d) return 0;
    /* not on huge pages again (ct_context_opts.huge_pages): khugepaged would fold a released range back into
       whole 2 MiB pages (it collapses ranges with few pages present) and the memory would come back */
    (void)madvise(*a, (size_t)(*d - *a), MADV_NOHUGEPAGE);
    if (madvise(*a, (size_t)(*d - *a), MADV_DONTNEED) != 0) return -1;
    return *(volatile float *)*a == 0.0f && *(volatile float *)(*d - sizeof(float)) == 0.0f ? 1 : -1;
}
