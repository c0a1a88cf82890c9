/* bench/gemm.c - bench_gemm: the GEMMs of the bench workloads, inside the
 * training step against oneDNN alone, on the CPU it runs on.
 *
 *   bench_gemm [--workloads "mlp cnn gptchar gpt2 resnet50"] [--precision fp32|bf16|auto] [--threads 2]
 *              [--rounds 5] [--reps 3] [--warmup 2] [--fusion-level 1]
 *
 * For each workload it compiles the plan bench_step compiles (same graph,
 * batch, optimizer, fusion level 1), runs warmup steps, then R rounds of: one
 * training step with a node hook (ct_plan_set_node_hook, what the profiler
 * attaches through) that times every oneDNN matmul / linear node (forward, and
 * backward dX and dW), every oneDNN conv2d node, and the weight gradients the
 * direct SIMD kernel runs instead of oneDNN (1-2 input channels: op
 * "conv_bww_direct", in-step is that kernel); then every distinct shape
 * alone, through oneDNN's C API with primitives created once:
 *   plain   the tensors in the layouts ctrain hands oneDNN (transposes as
 *           strides; a channels-last convolution, op "..._cl": NHWC
 *           activations and the weights as oneDNN wants them, as in the
 *           step), warm cache (the same buffers call after call);
 *   packed  the weights (oneDNN's B / conv weights) in the layout oneDNN asks
 *           for (format_tag any), reordered once outside the timing;
 *   cold    as plain, with the caches flushed (64 MiB written) before each call;
 *   repack  matmul only: as packed, with B reordered from its plain layout before every call, the
 *           reorder timed with the GEMM (what a kernel that packs the weights itself per call pays);
 *   ctrain  where the node ran ctrain's own GEMM on AMX tiles (onednn/matmul.c, CT_MATMUL_AMX): that
 *           kernel alone (ct_amx_matmul_bf16 on buffers of its own, warm), B packed per call as in the step;
 *   ct-cold that kernel with the caches flushed before each call, as cold.
 * Rounds alternate step and alone, so a neighbour's load hits both; the table
 * gives, one row per shape, medians over all calls of all rounds:
 *   workload phase op calls/step batch M N K ta tb bias dtype | in-step plain packed repack cold ctrain ct-cold
 *   ratio c-ratio
 *   ratio = in-step / min(plain, packed, ctrain), c-ratio = in-step / min(cold, ct-cold)
 * then the fastest call of each (min: in-step plain packed repack ratio; the robust
 * figure when neighbours preempt the threads), and oneDNN's implementations.
 * TOTAL: ms per step over all shapes (calls x ms), in-step and alone, and the cold figures' sum (cold_best):
 * in a step the operands mostly come from L3 (the optimizer's sweep over the parameters and moments, and the
 * activations of the other layers, pass between two uses of a weight), so the in-step time sits between the
 * warm and the cold figure; how close it is to which says whether the gap is the cache or the call.
 * Shapes: matmul/linear as oneDNN sees them (ctrain folds a 2-D B's batch into
 * M); conv2d as its implicit GEMM (fwd M = N*OH*OW, N = OC, K = C/g*KH*KW;
 * bwd data M = N*H*W, N = C, K = OC/g*KH*KW; bwd weight M = OC, N = C/g*KH*KW,
 * K = N*OH*OW). GEMM_RELU nodes (fusion level 1) include ctrain's relu pass.
 * BF16 (--precision bf16, or auto where ct_context_lowp_native says the CPU
 * runs BF16 natively) compiles the plan in bf16 and times the nodes' own dtypes.
 *
 * This file reads the plan's graph (src/graph/plan.h) for the nodes' input
 * shapes and transposes: a bench, not a user of the public API only. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dnnl.h>

/* oneDNN reads ndims entries of a dnnl_dims_t argument; gcc assumes all 12 (false alarm on
 * the short compound literals below) */
#pragma GCC diagnostic ignored "-Wstringop-overread"

#include "ctrain/ctrain.h"
#define BENCH_NAME "bench_gemm"
#include "bench_util.h"
#include "graph/plan.h"
#include "kernels/kernels.h"

static int dn_verbose = 1; /* oneDNN failures are printed in the first round only */
#define DN(call)                                                                                   \
    do {                                                                                           \
        dnnl_status_t st_ = (call);                                                                \
        if (st_ != dnnl_success) {                                                                 \
            if (dn_verbose) fprintf(stderr, "bench_gemm: %s failed (%d)\n", #call, (int)st_);                      \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

static double now_ms(void) { return bench_now_ms(); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the shapes ----------------------------------------------------------------------------- */

enum { K_MM = 0, K_CONV_FWD, K_CONV_BWD_DATA, K_CONV_BWD_WEIGHT };
#define MAX_SHAPES 64
#define MAX_SAMPLES 4096

typedef struct {
    int kind, backward, bias, ta, tb, relu, cl; /* cl: a channels-last convolution (NHWC activations) */
    int fwd_form;                    /* a backward data that ran as a forward convolution (onednn/conv.c) */
    int amx;                         /* the node ran ctrain's GEMM on AMX tiles (onednn/matmul.c) */
    char op[24];
    ct_dtype adt, bdt, cdt;
    int64_t batch, bb, M, N, K;      /* K_MM: batch of GEMMs, B's batch (1: broadcast) */
    int64_t conv[13];                /* conv: N C H W OC KH KW OH OW stride pad dilation groups */
    int calls_per_step;
    char impl[2][40]; /* oneDNN's implementation, plain and packed ("gemm:jit"; "+" after packed: weights reordered) */
    int n_in, n_alone[6];
    double in[MAX_SAMPLES], alone[6][MAX_SAMPLES]; /* plain, packed, cold, repack, ctrain, ctrain cold */
} shape;

typedef struct {
    ct_plan *p;
    int n;
    shape s[MAX_SHAPES];
    double t0;
    int recording, calls;
} table;

static const int64_t *node_shape(const ct_plan *p, const ct_node_def *d, int i) { return p->g.nodes[d->in[i]].shape; }
static ct_dtype node_dt(const ct_plan *p, const ct_node_def *d, int i) { return p->g.nodes[d->in[i]].dtype; }

/* The GEMM of node d as ctrain's oneDNN kernels call it (matmul.c, conv.c). */
static int describe(const ct_plan *p, const ct_node_def *d, shape *s) {
    memset(s, 0, offsetof(shape, in));
    ct_op op = d->op;
    if (op == CT_OP_GEMM_RELU) {
        op = (ct_op)d->ia[6];
        s->relu = 1;
    }
    snprintf(s->op, sizeof s->op, "%s%s", op == CT_OP_MATMUL ? "matmul" : op == CT_OP_LINEAR ? "linear"
                                          : op == CT_OP_CONV2D ? "conv2d" : op == CT_OP_CONV2D_BWD_DATA ? "conv_bwd_data"
                                          : op == CT_OP_CONV2D_BWD_WEIGHT ? "conv_bwd_weight" : "?", s->relu ? "+relu" : "");
    s->cdt = d->dtype;
    if (op == CT_OP_LINEAR) {
        const int64_t *w = node_shape(p, d, 1);
        s->kind = K_MM, s->batch = 1, s->bb = 1, s->N = w[0], s->K = w[1], s->tb = 1;
        int64_t numel = 1;
        for (int i = 0; i < d->ndim; i++) numel *= d->shape[i];
        s->M = numel / s->N;
        s->bias = d->n_in > 2;
        s->adt = node_dt(p, d, 0), s->bdt = node_dt(p, d, 1);
        return 1;
    }
    if (op == CT_OP_MATMUL) {
        const ct_node_def *A = &p->g.nodes[d->in[0]], *B = &p->g.nodes[d->in[1]];
        int nd = d->ndim, ta = d->ia[0] != 0, tb = d->ia[1] != 0;
        int64_t M = d->shape[nd - 2], N = d->shape[nd - 1], K = A->shape[nd - 1 - ta], batch = 1;
        for (int i = 0; i < nd - 2; i++) batch *= d->shape[i];
        int flat = nd == 2 || (B->ndim <= 2 && !ta);
        s->kind = K_MM, s->ta = ta, s->tb = tb, s->N = N, s->K = K;
        s->M = flat ? batch * M : M, s->batch = flat ? 1 : batch, s->bb = flat || B->ndim <= 2 ? 1 : batch;
        s->adt = A->dtype, s->bdt = B->dtype;
        return 1;
    }
    if (op != CT_OP_CONV2D && op != CT_OP_CONV2D_BWD_DATA && op != CT_OP_CONV2D_BWD_WEIGHT) return 0;
    const int64_t *x, *w, *y;
    s->kind = op == CT_OP_CONV2D ? K_CONV_FWD : op == CT_OP_CONV2D_BWD_DATA ? K_CONV_BWD_DATA : K_CONV_BWD_WEIGHT;
    if (s->kind == K_CONV_FWD) x = node_shape(p, d, 0), w = node_shape(p, d, 1), y = d->shape;
    else if (s->kind == K_CONV_BWD_DATA) x = d->shape, w = node_shape(p, d, 1), y = node_shape(p, d, 0);
    else x = node_shape(p, d, 1), w = d->shape, y = node_shape(p, d, 0);
    int64_t xl[4], yl[4]; /* channels last: x and y's (N, C, H, W) dims */
    s->cl = d->ia[4] != 0;
    if (s->cl) {
        xl[0] = x[0], xl[1] = x[3], xl[2] = x[1], xl[3] = x[2];
        yl[0] = y[0], yl[1] = y[3], yl[2] = y[1], yl[3] = y[2];
        x = xl, y = yl;
        size_t n = strlen(s->op);
        snprintf(s->op + n, sizeof s->op - n, "_cl");
    }
    int64_t g = d->ia[3] > 0 ? d->ia[3] : 1;
    int64_t c[13] = {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], d->ia[0], d->ia[1], d->ia[2], g};
    memcpy(s->conv, c, sizeof c);
    s->bias = s->kind == K_CONV_FWD && d->n_in > 2;
    s->adt = node_dt(p, d, 0), s->bdt = node_dt(p, d, 1);
    s->batch = 1, s->bb = 1;
    if (s->kind == K_CONV_FWD) s->M = x[0] * y[2] * y[3], s->N = w[0], s->K = x[1] / g * w[2] * w[3];
    else if (s->kind == K_CONV_BWD_DATA) s->M = x[0] * x[2] * x[3], s->N = x[1], s->K = w[0] / g * w[2] * w[3];
    else s->M = w[0], s->N = x[1] / g * w[2] * w[3], s->K = x[0] * y[2] * y[3];
    return 1;
}

static int same(const shape *a, const shape *b) {
    return a->kind == b->kind && a->backward == b->backward && a->bias == b->bias && a->ta == b->ta && a->tb == b->tb &&
           a->relu == b->relu && a->adt == b->adt && a->bdt == b->bdt && a->cdt == b->cdt && a->batch == b->batch &&
           a->bb == b->bb && a->M == b->M && a->N == b->N && a->K == b->K && a->cl == b->cl &&
           a->fwd_form == b->fwd_form &&
           !memcmp(a->conv, b->conv, sizeof a->conv);
}

static void hook(void *user, const ct_node_event *ev) {
    table *t = user;
    if (ev->kind == CT_NODE_BEGIN) {
        t->t0 = now_ms();
        return;
    }
    double ms = now_ms() - t->t0;
    /* oneDNN's nodes, and the weight gradients of the direct SIMD kernel (simd/conv.c: 1-2 input channels) */
    int direct = t->p->g.nodes[ev->node].op == CT_OP_CONV2D_BWD_WEIGHT && !strncmp(ev->kernel, "avx", 3);
    if (ev->status != CT_OK || (strcmp(ev->kernel, "onednn") && !direct)) return;
    shape tmp;
    if (!describe(t->p, &t->p->g.nodes[ev->node], &tmp)) return;
    tmp.backward = ev->backward;
    if (direct) snprintf(tmp.op, sizeof tmp.op, "conv_bww_direct"); /* in-step: the direct kernel; alone: oneDNN */
    if (ev->kernel_desc && strstr(ev->kernel_desc, "convert")) { /* BF16 plan, FP32 copies: oneDNN ran in f32 */
        tmp.adt = tmp.bdt = tmp.cdt = CT_F32;
        size_t n = strlen(tmp.op);
        snprintf(tmp.op + n, sizeof tmp.op - n, "(cvt)");
    }
    const char *impl = ct_plan_kernel_impl(t->p, ev->node);
    if (tmp.kind == K_CONV_BWD_DATA && impl && strstr(impl, "as a forward convolution")) {
        tmp.fwd_form = 1; /* alone: the same forward form */
        size_t n = strlen(tmp.op);
        snprintf(tmp.op + n, sizeof tmp.op - n, "(fwd)");
    }
    tmp.amx = ev->impl && !strcmp(ev->impl, "ctrain:amx_tiles");
    int i = 0;
    while (i < t->n && !same(&t->s[i], &tmp)) i++;
    if (i == t->n) {
        if (t->n == MAX_SHAPES || !t->recording) return;
        memcpy(&t->s[i], &tmp, offsetof(shape, in));
        t->s[i].n_in = 0, memset(t->s[i].n_alone, 0, sizeof t->s[i].n_alone);
        t->n++;
    }
    if (t->recording == 1) t->s[i].calls_per_step++;
    if (t->s[i].n_in < MAX_SAMPLES) t->s[i].in[t->s[i].n_in++] = ms;
}

/* ---- oneDNN alone --------------------------------------------------------------------------- */

static dnnl_data_type_t dt_of(ct_dtype t) { return t == CT_BF16 ? dnnl_bf16 : t == CT_F16 ? dnnl_f16 : dnnl_f32; }

typedef struct {
    dnnl_engine_t eng;
    dnnl_stream_t str;
    float *flush; /* 64 MiB written before a cold call */
    size_t flush_n;
} dnn;

static void flush_caches(dnn *d) {
    for (size_t i = 0; i < d->flush_n; i += 16) d->flush[i] += 1.0f;
}

/* A buffer of md's size holding small values (so BF16 / FP32 arithmetic stays normal). */
static int mem_filled(dnn *d, const dnnl_memory_desc_t *md, dnnl_memory_t *m) {
    DN(dnnl_memory_create(m, md, d->eng, DNNL_MEMORY_ALLOCATE));
    void *p;
    DN(dnnl_memory_get_data_handle(*m, &p));
    size_t bytes = dnnl_memory_desc_get_size(md);
    if (md->data_type == dnnl_f32)
        for (size_t i = 0; i < bytes / 4; i++) ((float *)p)[i] = (float)((i * 7 % 13) - 6) * 0.01f;
    else
        for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)p)[i] = 0x3c00 + (uint16_t)(i % 64); /* ~0.008..0.016 */
    return 0;
}

typedef struct {
    dnnl_primitive_t prim;
    char impl[40];
    int nargs;
    dnnl_exec_arg_t args[6];
    dnnl_memory_t mems[6];
    int nmems;
    int keep_reorder;          /* repack: the weights' reorder stays, to run before every call */
    dnnl_primitive_t reorder;
    dnnl_exec_arg_t rargs[2];
} job;

static void job_free(job *j) {
    if (j->prim) dnnl_primitive_destroy(j->prim);
    if (j->reorder) dnnl_primitive_destroy(j->reorder);
    for (int i = 0; i < j->nmems; i++) dnnl_memory_destroy(j->mems[i]);
    memset(j, 0, sizeof *j);
}

static void job_impl(job *j, const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(j->impl, sizeof j->impl, "%s", impl);
}

static int job_arg(dnn *d, job *j, int arg, const dnnl_memory_desc_t *md) {
    dnnl_memory_t m;
    if (mem_filled(d, md, &m)) return -1;
    j->mems[j->nmems++] = m;
    j->args[j->nargs].arg = arg, j->args[j->nargs].memory = m, j->nargs++;
    return 0;
}

/* The packed weights: a plain buffer reordered once into the layout pd wants. */
static int job_weights(dnn *d, job *j, int arg, const dnnl_memory_desc_t *plain, const_dnnl_primitive_desc_t pd,
                       dnnl_query_t q) {
    const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, q, 0);
    if (dnnl_memory_desc_equal(want, plain)) return job_arg(d, j, arg, plain);
    dnnl_memory_t src, dst;
    if (mem_filled(d, plain, &src)) return -1;
    DN(dnnl_memory_create(&dst, want, d->eng, DNNL_MEMORY_ALLOCATE));
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t r;
    DN(dnnl_reorder_primitive_desc_create(&rpd, plain, d->eng, want, d->eng, NULL));
    DN(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    DN(dnnl_primitive_execute(r, d->str, 2, a));
    DN(dnnl_stream_wait(d->str));
    dnnl_primitive_desc_destroy(rpd);
    size_t n = strlen(j->impl);
    if (n + 1 < sizeof j->impl) j->impl[n] = '+', j->impl[n + 1] = 0;
    if (j->keep_reorder) {
        j->reorder = r, j->rargs[0] = a[0], j->rargs[1] = a[1];
        j->mems[j->nmems++] = src;
    } else {
        dnnl_primitive_destroy(r);
        dnnl_memory_destroy(src);
    }
    j->mems[j->nmems++] = dst;
    j->args[j->nargs].arg = arg, j->args[j->nargs].memory = dst, j->nargs++;
    return 0;
}

static int md_strides(dnnl_memory_desc_t *md, int nd, const int64_t *dims, const int64_t *st, ct_dtype t) {
    DN(dnnl_memory_desc_init_by_strides(md, nd, dims, dt_of(t), st));
    return 0;
}

/* The matmul of s as matmul.c builds it; packed: B in format any (reordered once). */
static int build_mm(dnn *d, const shape *s, int packed, job *j) {
    dnnl_memory_desc_t a, b, bany, c, bias;
    int64_t M = s->M, N = s->N, K = s->K;
    if (s->batch == 1) {
        if (md_strides(&a, 2, (int64_t[]){M, K}, s->ta ? (int64_t[]){1, M} : (int64_t[]){K, 1}, s->adt) ||
            md_strides(&b, 2, (int64_t[]){K, N}, s->tb ? (int64_t[]){1, K} : (int64_t[]){N, 1}, s->bdt) ||
            md_strides(&c, 2, (int64_t[]){M, N}, (int64_t[]){N, 1}, s->cdt))
            return -1;
        DN(dnnl_memory_desc_init_by_tag(&bany, 2, (int64_t[]){K, N}, dt_of(s->bdt), dnnl_format_tag_any));
    } else {
        int64_t bt = s->batch, bb = s->bb;
        if (md_strides(&a, 3, (int64_t[]){bt, M, K}, s->ta ? (int64_t[]){M * K, 1, M} : (int64_t[]){M * K, K, 1}, s->adt) ||
            md_strides(&b, 3, (int64_t[]){bb, K, N}, s->tb ? (int64_t[]){K * N, 1, K} : (int64_t[]){K * N, N, 1}, s->bdt) ||
            md_strides(&c, 3, (int64_t[]){bt, M, N}, (int64_t[]){M * N, N, 1}, s->cdt))
            return -1;
        DN(dnnl_memory_desc_init_by_tag(&bany, 3, (int64_t[]){bb, K, N}, dt_of(s->bdt), dnnl_format_tag_any));
    }
    if (s->bias) DN(dnnl_memory_desc_init_by_strides(&bias, 2, (int64_t[]){1, N}, dt_of(s->cdt), (int64_t[]){N, 1}));
    dnnl_matmul_desc_t md;
    DN(dnnl_matmul_desc_init(&md, &a, packed ? &bany : &b, s->bias ? &bias : NULL, &c));
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &md, NULL, d->eng, NULL));
    DN(dnnl_primitive_create(&j->prim, pd));
    job_impl(j, pd);
    int r = job_arg(d, j, DNNL_ARG_SRC, &a) || job_arg(d, j, DNNL_ARG_DST, &c) ||
            (s->bias && job_arg(d, j, DNNL_ARG_BIAS, &bias)) ||
            (packed ? job_weights(d, j, DNNL_ARG_WEIGHTS, &b, pd, dnnl_query_weights_md)
                    : job_arg(d, j, DNNL_ARG_WEIGHTS, &b));
    dnnl_primitive_desc_destroy(pd);
    return r ? -1 : 0;
}

/* The convolution of s: plain nchw / oihw (goihw), or packed: every tensor in
 * format any, weights reordered once (the activations as oneDNN wants them
 * too, as a blocked-layout network would keep them). */
static int build_conv(dnn *d, const shape *s0, int packed, job *j) {
    shape f;
    const shape *s = s0;
    if (s0->fwd_form) { /* dx = conv(dy, flipped weights): C <-> OC, H <-> OH, stride 1, padding (KH - 1) d - p */
        const int64_t *c = s0->conv;
        memcpy(&f, s0, offsetof(shape, in));
        int64_t fc[13] = {c[0], c[4], c[7], c[8], c[1], c[5], c[6], c[2], c[3], 1, (c[5] - 1) * c[11] - c[10], c[11], c[12]};
        memcpy(f.conv, fc, sizeof fc);
        f.kind = K_CONV_FWD, f.bias = 0;
        s = &f;
    }
    const int64_t *g = s->conv;
    int64_t N = g[0], C = g[1], H = g[2], W = g[3], OC = g[4], KH = g[5], KW = g[6], OH = g[7], OW = g[8];
    int64_t st = g[9], pad = g[10], dil = g[11], G = g[12];
    dnnl_memory_desc_t x, w, y, b, xa, wa, ya;
    dnnl_format_tag_t any = dnnl_format_tag_any;
    int wn = G > 1 ? 5 : 4;
    int64_t wd5[5] = {G, OC / G, C / G, KH, KW}, *wd = G > 1 ? wd5 : wd5 + 1;
    /* plain: NCHW, or NHWC for a channels-last convolution, whose weights ctrain hands over as oneDNN
       wants them (a reorder per call in the step, once here) */
    dnnl_format_tag_t at = s->cl ? dnnl_nhwc : dnnl_nchw, wt = G > 1 ? dnnl_goihw : dnnl_oihw;
    DN(dnnl_memory_desc_init_by_tag(&x, 4, (int64_t[]){N, C, H, W}, dt_of(s->adt), at));
    DN(dnnl_memory_desc_init_by_tag(&y, 4, (int64_t[]){N, OC, OH, OW}, dt_of(s->cdt), at));
    DN(dnnl_memory_desc_init_by_tag(&w, wn, wd, dt_of(s->bdt), wt));
    DN(dnnl_memory_desc_init_by_tag(&xa, 4, (int64_t[]){N, C, H, W}, dt_of(s->adt), packed ? any : at));
    DN(dnnl_memory_desc_init_by_tag(&ya, 4, (int64_t[]){N, OC, OH, OW}, dt_of(s->cdt), packed ? any : at));
    DN(dnnl_memory_desc_init_by_tag(&wa, wn, wd, dt_of(s->bdt), packed || s->cl ? any : wt));
    DN(dnnl_memory_desc_init_by_tag(&b, 1, (int64_t[]){OC}, dnnl_f32, dnnl_x));
    int64_t sd[2] = {st, st}, pd2[2] = {pad, pad}, dd[2] = {dil - 1, dil - 1};
    int64_t pr[2] = {(OH - 1) * st + (KH - 1) * dil + 1 - H - pad, (OW - 1) * st + (KW - 1) * dil + 1 - W - pad};
    dnnl_convolution_desc_t fd, bd;
    DN(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &xa, &wa,
                                                   s->bias ? &b : NULL, &ya, sd, dd, pd2, pr));
    dnnl_primitive_desc_t fpd, pd;
    DN(dnnl_primitive_desc_create(&fpd, &fd, NULL, d->eng, NULL));
    if (s->kind == K_CONV_FWD) {
        pd = fpd, fpd = NULL;
    } else if (s->kind == K_CONV_BWD_DATA) {
        DN(dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &xa, &wa, &ya, sd, dd, pd2, pr));
        DN(dnnl_primitive_desc_create(&pd, &bd, NULL, d->eng, fpd));
    } else {
        DN(dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &xa, &wa, NULL, &ya, sd,
                                                                dd, pd2, pr));
        DN(dnnl_primitive_desc_create(&pd, &bd, NULL, d->eng, fpd));
    }
    DN(dnnl_primitive_create(&j->prim, pd));
    job_impl(j, pd);
#define Q(q) (packed || s->cl ? dnnl_primitive_desc_query_md(pd, q, 0) : NULL)
    const dnnl_memory_desc_t *qx = Q(dnnl_query_src_md), *qy = Q(dnnl_query_dst_md), *qdx = Q(dnnl_query_diff_src_md),
                             *qdy = Q(dnnl_query_diff_dst_md), *qdw = Q(dnnl_query_diff_weights_md);
#undef Q
    int r;
    if (s->kind == K_CONV_FWD)
        r = job_arg(d, j, DNNL_ARG_SRC, packed ? qx : &x) || job_arg(d, j, DNNL_ARG_DST, packed ? qy : &y) ||
            (s->bias && job_arg(d, j, DNNL_ARG_BIAS, &b)) ||
            (packed || s->cl ? job_weights(d, j, DNNL_ARG_WEIGHTS, &w, pd, dnnl_query_weights_md)
                    : job_arg(d, j, DNNL_ARG_WEIGHTS, &w));
    else if (s->kind == K_CONV_BWD_DATA)
        r = job_arg(d, j, DNNL_ARG_DIFF_DST, packed ? qdy : &y) || job_arg(d, j, DNNL_ARG_DIFF_SRC, packed ? qdx : &x) ||
            (packed || s->cl ? job_weights(d, j, DNNL_ARG_WEIGHTS, &w, pd, dnnl_query_weights_md)
                    : job_arg(d, j, DNNL_ARG_WEIGHTS, &w));
    else
        r = job_arg(d, j, DNNL_ARG_DIFF_DST, packed ? qdy : &y) || job_arg(d, j, DNNL_ARG_SRC, packed ? qx : &x) ||
            job_arg(d, j, DNNL_ARG_DIFF_WEIGHTS, packed || s->cl ? qdw : &w);
    dnnl_primitive_desc_destroy(pd);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    return r ? -1 : 0;
}

/* reps calls of shape s in one variant (0 plain, 1 packed, 2 cold, 3 repack: B reordered into the
 * packed layout on every call, the reorder timed with the GEMM; matmul only); ms per call into s->alone. */
static int time_alone(dnn *d, shape *s, int variant, int reps) {
    job j;
    memset(&j, 0, sizeof j);
    if (variant == 3 && s->kind != K_MM) return 0;
    int packed = variant == 1 || variant == 3;
    j.keep_reorder = variant == 3;
    if ((s->kind == K_MM ? build_mm(d, s, packed, &j) : build_conv(d, s, packed, &j)) != 0) {
        job_free(&j);
        return -1;
    }
    if (variant < 2) snprintf(s->impl[variant], sizeof s->impl[variant], "%s", j.impl);
    /* the scratchpad: oneDNN's own (library mode) */
    for (int r = -1; r < reps; r++) { /* r == -1: first call, not timed */
        if (variant == 2) flush_caches(d);
        double t0 = now_ms();
        if (j.reorder) DN(dnnl_primitive_execute(j.reorder, d->str, 2, j.rargs));
        DN(dnnl_primitive_execute(j.prim, d->str, j.nargs, j.args));
        DN(dnnl_stream_wait(d->str));
        double ms = now_ms() - t0;
        if (r >= 0 && s->n_alone[variant] < MAX_SAMPLES) s->alone[variant][s->n_alone[variant]++] = ms;
    }
    job_free(&j);
    return 0;
}

/* reps calls of shape s on ctrain's GEMM on AMX tiles (simd/amx.c, what the node ran in the step), B packed in
 * every call as in the step: warm (the same buffers call after call; ms per call into s->alone[4]) or, with
 * cold, the caches flushed before each call (s->alone[5]). */
static int time_ctrain(dnn *d, shape *s, int reps, int threads, int cold) {
    if (!s->amx || s->kind != K_MM || s->bb > 1) return 0;
    const int64_t M = s->M, N = s->N, K = s->K;
    ct_amx_mm p;
    memset(&p, 0, sizeof p);
    p.M = M, p.N = N, p.K = K, p.ta = s->ta, p.tb = s->tb, p.nthreads = threads;
    p.lda = s->ta ? M : K, p.ldb = s->tb ? K : N, p.ldc = N, p.c_dt = s->cdt, p.bias_dt = CT_F32;
    const size_t es = s->cdt == CT_F32 ? 4 : 2, sb = ct_amx_matmul_scratch(&p);
#define CT_ALLOC64(bytes) aligned_alloc(64, ((size_t)(bytes) + 63) / 64 * 64)
    uint16_t *a = CT_ALLOC64(M * K * 2), *b = CT_ALLOC64(K * N * 2);
    float *bias = CT_ALLOC64(N * 4);
    void *c = CT_ALLOC64((size_t)(M * N) * es), *scratch = CT_ALLOC64(sb);
#undef CT_ALLOC64
    int rc = -1;
    if (a && b && bias && c && scratch) {
        for (int64_t i = 0; i < M * K; i++) a[i] = (uint16_t)(0x3c00 + i % 251); /* small positive BF16 values */
        for (int64_t i = 0; i < K * N; i++) b[i] = (uint16_t)(0xbc00 + i % 241);
        for (int64_t i = 0; i < N; i++) bias[i] = 0.01f * (float)(i % 7);
        p.a = a, p.b = b, p.c = c, p.bias = s->bias ? bias : NULL;
        for (int r = -1; r < reps; r++) { /* r == -1: first call, not timed */
            if (cold) flush_caches(d);
            double t0 = now_ms();
            ct_amx_matmul_bf16(&p, scratch);
            double ms = now_ms() - t0;
            const int v = cold ? 5 : 4;
            if (r >= 0 && s->n_alone[v] < MAX_SAMPLES) s->alone[v][s->n_alone[v]++] = ms;
        }
        rc = 0;
    }
    free(a);
    free(b);
    free(bias);
    free(c);
    free(scratch);
    return rc;
}

/* ---- the workloads (bench_step.c's graphs, batch and optimizer) ----------------------------- */

typedef struct {
    ct_graph *g;
    ct_plan *p;
    ct_optimizer *opt;
} workload;

static void build_workload(ct_context *ctx, const char *name, ct_precision prec, int fusion_level, int cl,
                           workload *w) {
    if (!bench_workload_known(name)) {
        fprintf(stderr, "bench_gemm: unknown workload '%s' (mlp, cnn, gptchar, gpt2, resnet50)\n", name);
        exit(1);
    }
    const int is_cnn = !strcmp(name, "cnn"), is_r50 = !strcmp(name, "resnet50"), is_gpt = !strncmp(name, "gpt", 3);
    DIE_IF(ctx, ct_graph_create(ctx, &w->g));
    ct_graph *g = w->g;
    ct_node x, y, logits, loss;
    bench_workload wl;
    bench_workload_graph(ctx, g, name, cl, 0.0f, &x, &y, &logits, &wl);
    DIE_IF(ctx, ct_cross_entropy(g, logits, y, 0.0f, -100, &loss));
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    co.precision = prec;
    co.fusion_level = fusion_level;
    DIE_IF(ctx, ct_compile(g, loss, 0, NULL, &co, &w->p));
    ct_optim_opts oo;
    ct_optim_opts_default(&oo, is_cnn || is_r50 ? CT_OPTIM_SGD : CT_OPTIM_ADAMW);
    oo.lr = 1e-3f;
    if (is_cnn || is_r50) oo.momentum = 0.9f, oo.weight_decay = 0.0f;
    else oo.weight_decay = is_gpt ? 0.1f : 0.01f, oo.no_decay_bias_norm = is_gpt;
    DIE_IF(ctx, ct_optimizer_create(w->p, &oo, &w->opt));
    /* inputs: small valid ids / labels, uniform values; fixed for every step */
    ct_tensor tx, ty;
    DIE_IF(ctx, ct_plan_tensor(w->p, x, &tx));
    DIE_IF(ctx, ct_plan_tensor(w->p, y, &ty));
    int64_t nx = ct_tensor_numel(&tx), ny = ct_tensor_numel(&ty);
    for (int64_t i = 0; i < nx; i++) {
        if (tx.dtype == CT_I32) ((int32_t *)tx.data)[i] = (int32_t)((i * 2654435761u) % 61);
        else ((float *)tx.data)[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    }
    for (int64_t i = 0; i < ny; i++) ((int32_t *)ty.data)[i] = (int32_t)((i * 40503u + 7) % 10);
}

static void step(ct_context *ctx, workload *w) {
    DIE_IF(ctx, ct_plan_forward(w->p, 1));
    DIE_IF(ctx, ct_plan_backward(w->p));
    DIE_IF(ctx, ct_optimizer_step(w->opt));
}

static void workload_free(workload *w) {
    ct_optimizer_free(w->opt);
    ct_plan_free(w->p);
    ct_graph_free(w->g);
}

/* ---- main ----------------------------------------------------------------------------------- */

/* median (or min) of n samples */
static double stat(double *v, int n, int want_min) {
    double m = median(v, n); /* sorts */
    return want_min ? (n > 0 ? v[0] : NAN) : m;
}

/* s's figures (median, or min over calls) */
typedef struct {
    double in, pl, pk, cold, rp, ct, ctcold;
    double best;      /* the fastest warm figure: oneDNN plain or packed, or ctrain's own GEMM where the node ran it */
    double best_cold; /* the fastest cold one: oneDNN plain cold, or ctrain's GEMM cold */
} figs;

static figs figures(shape *s, int want_min) {
    figs f;
    f.in = stat(s->in, s->n_in, want_min), f.pl = stat(s->alone[0], s->n_alone[0], want_min);
    f.pk = stat(s->alone[1], s->n_alone[1], want_min), f.cold = stat(s->alone[2], s->n_alone[2], want_min);
    f.rp = stat(s->alone[3], s->n_alone[3], want_min), f.ct = stat(s->alone[4], s->n_alone[4], want_min);
    f.ctcold = stat(s->alone[5], s->n_alone[5], want_min);
    f.best = isnan(f.pk) || f.pl < f.pk ? f.pl : f.pk;
    if (!isnan(f.ct) && f.ct < f.best) f.best = f.ct;
    f.best_cold = !isnan(f.ctcold) && f.ctcold < f.cold ? f.ctcold : f.cold;
    return f;
}

static void print_rows(const char *wl, table *t) {
    static const char *dn[] = {[CT_F32] = "f32", [CT_BF16] = "bf16", [CT_F16] = "f16"};
    printf("%-8s %-3s %-24s %5s %5s %6s %6s %6s %2s %2s %4s %-5s | %9s %9s %9s %9s %9s %9s %9s %6s %7s | %9s %9s %9s "
           "%9s %9s %6s | %s\n",
           "workload", "ph", "op", "calls", "batch", "M", "N", "K", "ta", "tb", "bias", "dtype", "in-step", "plain",
           "packed", "repack", "cold", "ctrain", "ct-cold", "ratio", "c-ratio", "min:in", "plain", "packed", "repack",
           "ctrain", "ratio", "oneDNN impl plain / packed");
    for (int i = 0; i < t->n; i++) {
        shape *s = &t->s[i];
        const figs m = figures(s, 1), f = figures(s, 0);
        char dts[24];
        snprintf(dts, sizeof dts, "%s", s->adt == s->bdt && s->bdt == s->cdt ? dn[s->cdt] : "");
        if (!dts[0]) snprintf(dts, sizeof dts, "%sx%s>%s", dn[s->adt], dn[s->bdt], dn[s->cdt]);
        printf("%-8s %-3s %-24s %5d %5lld %6lld %6lld %6lld %2d %2d %4d %-5s | %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f "
               "%9.3f %6.2f %7.2f | %9.3f %9.3f %9.3f %9.3f %9.3f %6.2f | %s / %s%s\n",
               wl, s->backward ? "bwd" : "fwd", s->op, s->calls_per_step, (long long)s->batch, (long long)s->M,
               (long long)s->N, (long long)s->K, s->ta, s->tb, s->bias, dts, f.in, f.pl, f.pk, f.rp, f.cold, f.ct,
               f.ctcold, f.in / f.best, f.in / f.best_cold, m.in, m.pl, m.pk, m.rp, m.ct, m.in / m.best, s->impl[0],
               s->impl[1], s->amx ? " (in the step: ctrain:amx_tiles)" : "");
    }
    fflush(stdout);
}

static void run_workload(ct_context *ctx, dnn *d, const char *wl, ct_precision prec, int fl, int cl, int rounds,
                         int reps, int warmup) {
    workload w;
    build_workload(ctx, wl, prec, fl, cl, &w);
    for (int i = 0; i < warmup; i++) step(ctx, &w);
    table *t = calloc(1, sizeof *t);
    if (!t) exit(2);
    t->p = w.p;
    ct_plan_set_node_hook(w.p, hook, t);
    double tot[5] = {0, 0, 0, 0, 0}; /* in-step, best alone: medians; mins; best cold (medians) */
    for (int r = 0; r < rounds; r++) {
        t->recording = r == 0 ? 1 : 2; /* round 0 also counts the calls per step */
        dn_verbose = r == 0;
        step(ctx, &w);
        for (int i = 0; i < t->n; i++)
            for (int v = 0; v < 6; v++) {
                int rc = v < 4 ? time_alone(d, &t->s[i], v, reps)
                               : time_ctrain(d, &t->s[i], reps, ct_context_num_threads(ctx), v == 5);
                if (rc != 0 && r == 0) fprintf(stderr, "bench_gemm: %s %s variant %d: alone failed\n", wl, t->s[i].op, v);
            }
    }
    ct_plan_set_node_hook(w.p, NULL, NULL);
    print_rows(wl, t);
    for (int i = 0; i < t->n; i++)
        for (int m = 0; m < 2; m++) {
            const figs f = figures(&t->s[i], m);
            tot[2 * m] += f.in * t->s[i].calls_per_step;
            tot[2 * m + 1] += f.best * t->s[i].calls_per_step;
            if (!m) tot[4] += f.best_cold * t->s[i].calls_per_step;
        }
    printf("TOTAL workload=%s precision=%s gemm_instep_ms_per_step=%.2f gemm_alone_best_ms_per_step=%.2f ratio=%.2f "
           "instep_min_sum=%.2f alone_min_sum=%.2f ratio_min=%.2f gemm_cold_best_ms_per_step=%.2f ratio_cold=%.2f\n",
           wl, ct_precision_name(prec), tot[0], tot[1], tot[0] / tot[1], tot[2], tot[3], tot[2] / tot[3], tot[4],
           tot[0] / tot[4]);
    fflush(stdout);
    free(t);
    workload_free(&w);
}

int main(int argc, char **argv) {
    const char *wls = "mlp cnn gptchar gpt2 resnet50", *precs = "auto";
    int threads = 2, rounds = 5, reps = 3, warmup = 2, fl = 1, cl = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--workloads")) wls = v;
        else if (!strcmp(a, "--precision")) precs = v;
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--rounds")) rounds = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--fusion-level")) fl = atoi(v);
        else if (!strcmp(a, "--channels-last")) cl = atoi(v);
        else argc = 0;
    }
    if (argc % 2 == 0 || threads < 1 || rounds < 1 || reps < 1 || warmup < 0 || (cl != 0 && cl != 1)) {
        fprintf(stderr, "usage: bench_gemm [--workloads \"mlp cnn gptchar gpt2 resnet50\"] [--precision fp32|bf16|auto]\n"
                        "                  [--threads 2] [--rounds 5] [--reps 3] [--warmup 2] [--fusion-level 1]\n"
                        "                  [--channels-last 1]\n"
                        "  auto: fp32, and bf16 where the CPU runs BF16 natively (AVX512-BF16 / AMX)\n"
                        "  --channels-last: the cnn and resnet50 on NHWC activations (1, the recipes' default) or NCHW (0)\n");
        return 1;
    }
    ct_context_opts co;
    ct_context_opts_default(&co);
    co.num_threads = threads;
    ct_context *ctx = NULL;
    DIE_IF(ctx, ct_context_create(&co, &ctx));
    char how[384];
    int native = 0;
    DIE_IF(ctx, ct_context_lowp_native(ctx, CT_BF16, &native, how, sizeof how));
    printf("ENV threads=%d isa=%s onednn=%d rounds=%d reps=%d fusion_level=%d channels_last=%d\n", threads,
           ct_isa_name(ct_context_isa(ctx)), ct_context_use_onednn(ctx), rounds, reps, fl, cl);
    printf("LOWP bf16 matmul/conv: %s\n", how);
    dnn d;
    memset(&d, 0, sizeof d);
    d.flush_n = (64u << 20) / sizeof(float);
    d.flush = calloc(d.flush_n, sizeof(float));
    if (!d.flush || dnnl_engine_create(&d.eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&d.str, d.eng, dnnl_stream_default_flags) != dnnl_success) {
        fprintf(stderr, "bench_gemm: cannot set up oneDNN\n");
        return 2;
    }
    /* oneDNN alone runs on the OpenMP threads the step's kernels use */
    omp_set_num_threads(threads);
    int do_fp32 = !strcmp(precs, "fp32") || !strcmp(precs, "auto");
    int do_bf16 = !strcmp(precs, "bf16") || (!strcmp(precs, "auto") && native);
    if (!strcmp(precs, "auto") && !native) printf("NOTE bf16 skipped: this CPU has no native BF16 GEMM (see LOWP)\n");
    char buf[256];
    for (int pi = 0; pi < 2; pi++) {
        if (!(pi == 0 ? do_fp32 : do_bf16)) continue;
        snprintf(buf, sizeof buf, "%s", wls);
        for (char *save = NULL, *wl = strtok_r(buf, " ,", &save); wl; wl = strtok_r(NULL, " ,", &save))
            run_workload(ctx, &d, wl, pi == 0 ? CT_PRECISION_FP32 : CT_PRECISION_BF16, fl, cl, rounds, reps, warmup);
    }
    dnnl_stream_destroy(d.str);
    dnnl_engine_destroy(d.eng);
    free(d.flush);
    ct_context_free(ctx);
    return 0;
}
