/* tests/fuzz/common.c - helpers shared by the fuzz targets (common.h). */
#define _GNU_SOURCE /* fopencookie */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static ct_context *g_ctx;
static char g_dir[512];
static char g_path[4][600];

static void cleanup(void) {
    if (!g_dir[0]) return;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[1024];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
    ct_context_free(g_ctx);
    g_ctx = NULL;
}

/* The context, created on first use; its last error is kept. */
static ct_context *ctx_get(void) {
    if (!g_ctx) {
        ct_context_opts o;
        ct_context_opts_default(&o);
        o.num_threads = 1;
        o.memory_budget = FUZZ_MEMORY_BUDGET;
        if (ct_context_create(&o, &g_ctx) != CT_OK) {
            fprintf(stderr, "fuzz: cannot create a context\n");
            abort();
        }
        atexit(cleanup);
    }
    return g_ctx;
}

ct_context *fuzz_ctx(void) {
    ct_context_clear_error(ctx_get());
    return g_ctx;
}

const char *fuzz_dir(void) {
    if (g_dir[0]) return g_dir;
    ctx_get(); /* registers the cleanup */
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/ctrain-fuzz-XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "fuzz: cannot create a scratch folder in %s: %s\n", base, strerror(errno));
        abort();
    }
    return g_dir;
}

const char *fuzz_write(int slot, const char *name, const void *data, size_t size) {
    char *p = g_path[slot & 3];
    snprintf(p, sizeof g_path[0], "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(p, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", p, strerror(errno));
        abort();
    }
    return p;
}

void fuzz_check_(int ok, const char *what, const char *cond, const char *file, int line) {
    if (ok) return;
    fprintf(stderr, "fuzz: %s:%d: invariant broken: %s (%s)\n", file, line, what, cond);
    abort();
}

void fuzz_check_error(ct_status s) {
    FUZZ_CHECK(s != CT_OK, "an error status");
    FUZZ_CHECK((unsigned)s < CT_STATUS_COUNT, "a known status code");
    FUZZ_CHECK(s != CT_E_INTERNAL, "bad input is the caller's error, never an internal one");
    const char *msg = ct_context_last_error(g_ctx);
    FUZZ_CHECK(msg && msg[0], "an error comes with a message");
    fuzz_note("%s: %s", ct_status_name(s), msg);
}

size_t fuzz_bytes_in_use(void) {
    ct_mem_stats st;
    ct_context_mem_stats(ctx_get(), &st);
    return st.bytes_in_use;
}

void fuzz_check_no_leak(size_t bytes_before) {
    FUZZ_CHECK(fuzz_bytes_in_use() == bytes_before, "the context allocator holds no more than before the input");
}

/* ---- the counting sink ------------------------------------------------------- */

static FILE *g_sink;
static size_t g_sink_count, g_sink_limit;

static ssize_t sink_write(void *cookie, const char *buf, size_t n) {
    (void)cookie;
    (void)buf;
    g_sink_count += n;
    if (g_sink_count > g_sink_limit) {
        fprintf(stderr, "fuzz: invariant broken: the output passed %zu bytes (an output loop?)\n", g_sink_limit);
        abort();
    }
    return (ssize_t)n;
}

FILE *fuzz_sink(size_t limit) {
    if (!g_sink) {
        cookie_io_functions_t io = {NULL, sink_write, NULL, NULL};
        if (!(g_sink = fopencookie(NULL, "w", io))) {
            fprintf(stderr, "fuzz: cannot open the counting sink\n");
            abort();
        }
        setvbuf(g_sink, NULL, _IOFBF, 4096);
    }
    fflush(g_sink);
    clearerr(g_sink);
    g_sink_count = 0;
    g_sink_limit = limit;
    return g_sink;
}

size_t fuzz_sink_count(void) {
    if (g_sink) fflush(g_sink);
    return g_sink_count;
}

void fuzz_note(const char *fmt, ...) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("CT_FUZZ_VERBOSE") != NULL;
    if (!verbose) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("  fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
