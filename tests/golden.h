/* tests/golden.h - reading CTG1 golden files (docs/golden-format.md) and
 * comparing plan tensors with their records (tests/golden.c). */
#ifndef CT_TEST_GOLDEN_H
#define CT_TEST_GOLDEN_H

#include <stdint.h>

#include "test.h"

#define GOLDEN_TOL 1e-5

enum { GDT_F32 = 0, GDT_I32 = 1, GDT_U8 = 2 };

typedef struct {
    char *name;
    uint32_t dtype;
    int ndim;
    int64_t dims[CT_MAX_DIMS];
    int64_t numel;
    void *data; /* numel elements, native (little-endian) layout */
} gold_rec;

typedef struct gold_file {
    int n;
    gold_rec *recs;
    struct gold_file *base; /* from meta.base: records not in this file are looked up there */
} gold_file;

typedef struct {
    const char *label; /* "mlp/ref" */
    int failed;
    double worst;
    char worst_name[96];
    char msg[512];
    int completed;     /* the run reached its end (the worst error is meaningful) */
} run_state;

/* Loads `file` from the golden folder ($CT_GOLDEN_DIR, else tests/golden
 * next to the sources, else ../../tests/golden from the binary) with its
 * meta.base chain (depth: 0). NULL with a message in err on failure. */
gold_file *gold_load(const char *file, char *err, size_t errlen, int depth);
void gold_free(gold_file *f);
/* Record by name; the case file first, then its base. */
const gold_rec *gold_get(const gold_file *f, const char *name);
/* Number of distinct record names starting with `prefix`. */
int gold_count(const gold_file *f, const char *prefix);
/* An i32 record of at most max_n elements into out (n: its count). 0 if absent. */
int meta_i32(const gold_file *f, const char *name, int32_t *out, int max_n, int *n);

/* Marks the run failed with a message (printed). */
void run_fail(run_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copies record `name` into plan tensor t (dtype and shape must match). */
int load_into(run_state *s, const gold_file *f, const char *name, const ct_tensor *t);
/* max|t - record| / max|record| <= GOLDEN_TOL; prints it, tracks the worst. */
int compare(run_state *s, const gold_file *f, const char *name, const ct_tensor *t);
/* Prints the kernel each forward op ran. */
void print_kernels(run_state *s, ct_graph *g, ct_plan *p);
/* Loads every parameter of the plan from "param.<name>" (the counts must
 * match); 0 with the run failed otherwise. */
int load_params(run_state *s, const gold_file *f, ct_plan *p);
/* Compares every parameter gradient with "grad.<name>" (counts must match);
 * 0 only when the plan cannot be read. */
int compare_grads(run_state *s, const gold_file *f, ct_plan *p);
/* A low-precision (BF16 autocast) run against the FP32 golden: the loss
 * within tol relative, and every gradient (FP32 master gradients) within tol
 * by ||g - golden|| / ||golden|| (BF16's 8-bit mantissa moves single values
 * a lot, the tensor as a whole little). Where the golden file holds
 * "bf16err.<record>", PyTorch's own BF16 autocast distance on the same case
 * (scripts/make_vision_golden.py), a gradient's tolerance is at least 3x
 * that, and the median of ctrain's / PyTorch's error over the gradients is
 * at most 1.25 (both round the same values to BF16: where ctrain does what
 * autocast does, the ratio is ~1; single tensors vary up to ~3x on Swin,
 * whose softmax / GELU / residual rounding points differ).
 * Prints the worst, tracks it in s; 0 only when the plan cannot be read. */
int compare_lowp(run_state *s, const gold_file *f, ct_plan *p, double tol);
/* BF16 autocast's tolerance for compare_lowp (PyTorch's own autocast is
 * 0.09..0.14 from FP32 on an MLP at initialization, tests/test_amp.c; on the
 * golden models, trained-scale weights, 2e-2 holds). */
#define GOLDEN_BF16_TOL 2e-2
/* Starts a golden run: s->label = "<file stem>/<ctx_name>" (written to label),
 * loads `file`; NULL (with the run failed) when it cannot. */
gold_file *run_begin(run_state *s, char label[64], const char *file, const char *ctx_name);
/* Ends a golden run: prints the worst error when it completed, and counts a
 * failed check (naming file:line and the first problem) when anything failed. */
void run_end(const run_state *s, const char *file, int line);
/* run_end, then frees what the run built (any may be NULL). */
void run_close(const run_state *s, const char *file, int line, ct_plan *p, ct_graph *g, ct_context *ctx, gold_file *f);
/* Inside a golden run (run_state s, ct_context *ctx and ct_status st in
 * scope, a `done:` label that ends the run): runs expr; on failure fails the
 * run naming expr, its status and ctx's message, and jumps to done. */
#define GOLD_TRY(expr)                                                                            \
    do {                                                                                          \
        if ((st = (expr)) != CT_OK) {                                                             \
            run_fail(&s, "%s -> %s: %s", #expr, ct_status_name(st), ct_context_last_error(ctx)); \
            goto done;                                                                            \
        }                                                                                         \
    } while (0)

#endif
