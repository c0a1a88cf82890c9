/* tests/util.c - the test runner and helpers shared by the test binaries. */
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdlib.h>

#include "test.h"
#include "graph/ir.h"

int ct_test_failed_checks = 0;

int ct_test_main(const char *suite, const ct_test_case *cases, int n, int argc, char **argv) {
    int passed = 0, failed = 0;
    const char *only = argc > 1 ? argv[1] : NULL;
    for (int i = 0; i < n; i++) {
        if (only && !strstr(cases[i].name, only)) continue;
        int before = ct_test_failed_checks;
        cases[i].fn();
        if (ct_test_failed_checks == before) {
            passed++;
            printf("  ok   %s\n", cases[i].name);
        } else {
            failed++;
            printf("  FAIL %s\n", cases[i].name);
        }
        fflush(stdout);
    }
    printf("%s: %d passed, %d failed\n", suite, passed, failed);
    return failed ? 1 : 0;
}

ct_context *test_ctx(int isa, int use_onednn) {
    ct_context_opts o;
    ct_context_opts_default(&o);
    o.isa = isa;
    o.use_onednn = use_onednn;
    o.seed = 1234;
    ct_context *ctx = NULL;
    if (ct_context_create(&o, &ctx) != CT_OK) {
        fprintf(stderr, "cannot create context\n");
        exit(2);
    }
    return ctx;
}

double test_max_rel(const float *a, const float *b, size_t n, double floor) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), floor);
        if (d > m || d != d) m = d != d ? INFINITY : d;
    }
    return m;
}

double test_rel_to_max(const float *a, const float *b, size_t n) {
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        md = d > md || d != d ? (d != d ? INFINITY : d) : md;
        mb = fmax(mb, fabs((double)b[i]));
    }
    return mb > 0 ? md / mb : md;
}

void test_fill_uniform(float *x, size_t n, unsigned seed, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * ct_rand_uniform(seed, 77, i);
}

ct_status test_model_build(ct_context *ctx, int nd, const int64_t *xshape, int n_layers, const int64_t *sizes,
                           int64_t classes, float dropout, float smoothing, test_model *m) {
    return test_model_build_opts(ctx, nd, xshape, n_layers, sizes, classes, dropout, smoothing, NULL, m);
}

ct_status test_model_build_opts(ct_context *ctx, int nd, const int64_t *xshape, int n_layers, const int64_t *sizes,
                                int64_t classes, float dropout, float smoothing, const ct_compile_opts *opts,
                                test_model *m) {
    ct_graph *g;
    memset(m, 0, sizeof *m);
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    if (s == CT_OK) s = ct_input(g, "x", CT_F32, nd, xshape, &m->x);
    if (s == CT_OK) s = ct_input(g, "y", CT_I32, 1, xshape, &m->y);
    if (s == CT_OK)
        s = nd == 4 ? ct_model_cnn(g, m->x, n_layers, sizes, classes, &m->logits)
                    : ct_model_mlp(g, m->x, n_layers, sizes, classes, CT_ACT_RELU, dropout, &m->logits);
    if (s == CT_OK) s = ct_cross_entropy(g, m->logits, m->y, smoothing, -100, &m->loss);
    if (s == CT_OK) s = ct_compile(g, m->loss, 1, &m->logits, opts, &m->plan);
    ct_graph_free(g);
    if (s != CT_OK) return s;
    ct_tensor tx, ty;
    ct_plan_tensor(m->plan, m->x, &tx);
    ct_plan_tensor(m->plan, m->y, &ty);
    test_fill_uniform(tx.data, (size_t)ct_tensor_numel(&tx), 3, -1, 1);
    for (int64_t i = 0; i < xshape[0]; i++) ((int32_t *)ty.data)[i] = (int32_t)(i % classes);
    return CT_OK;
}

int test_fast_slots(const ct_context *ctx, int slots[2]) {
    const ct_cpu_features *f = ct_context_cpu(ctx);
    int n = 0;
    if (f->avx2 && f->fma && f->os_avx) slots[n++] = CT_KERNEL_AVX2;
    else printf("  (avx2 kernels skipped: the CPU lacks AVX2/FMA)\n");
    if (f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl && f->os_avx512) slots[n++] = CT_KERNEL_AVX512;
    else printf("  (avx512 kernels skipped: the CPU lacks AVX-512)\n");
    return n;
}

/* A plan whose params have the given shapes (every param gets a gradient):
 * loss = sum_i sum(x_i @ reshape(w_i, (numel, 1))). Param i is named w<i>. */
ct_status test_params_plan(ct_context *ctx, int np, const int *nd, const int64_t (*shapes)[4], ct_plan **out) {
    ct_graph *g;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    ct_node total = 0;
    for (int i = 0; i < np && s == CT_OK; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        int64_t numel = 1;
        for (int d = 0; d < nd[i]; d++) numel *= shapes[i][d];
        ct_node w, wf, x, y, l;
        s = ct_param(g, name, nd[i], shapes[i], CT_INIT_ONES, 1, &w);
        if (s == CT_OK) s = ct_reshape(g, w, 2, (int64_t[]){numel, 1}, &wf);
        snprintf(name, sizeof name, "x%d", i);
        if (s == CT_OK) s = ct_input(g, name, CT_F32, 2, (int64_t[]){1, numel}, &x);
        if (s == CT_OK) s = ct_matmul(g, x, wf, 0, 0, &y);
        if (s == CT_OK) s = ct_sum(g, y, 3u, 0, &l);
        if (s == CT_OK && i) s = ct_add(g, total, l, &l);
        total = l;
    }
    if (s == CT_OK) s = ct_compile(g, total, 0, NULL, NULL, out);
    ct_graph_free(g);
    return s;
}

/* ---- temporary directory ---------------------------------------------------------- */

static char tmpdir_[256];

void test_tmp_remove(void) {
    if (!tmpdir_[0]) return;
    DIR *d = opendir(tmpdir_);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", tmpdir_, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(tmpdir_);
    tmpdir_[0] = 0;
}

const char *test_tmp_make(const char *tag) {
    static int registered = 0;
    if (!registered) atexit(test_tmp_remove);
    registered = 1;
    test_tmp_remove();
    snprintf(tmpdir_, sizeof tmpdir_, "/tmp/ct_test_%s_XXXXXX", tag);
    if (!mkdtemp(tmpdir_)) {
        perror("mkdtemp");
        exit(2);
    }
    return tmpdir_;
}

const char *test_tmp_dir(void) { return tmpdir_; }

const char *test_tmp_path(const char *name) {
    static char p[4][512];
    static int k = 0;
    k = (k + 1) & 3;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir_, name);
    return p[k];
}

void test_write_file(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

/* ---- single-op cases (test_onednn, test_bf16_native) ------------------------------------- */

ct_status test_mm_op(ct_graph *g, const test_mm_cfg *c, ct_node *y) {
    int64_t as[4], bs[4];
    int nb = c->nd_a - 2;
    for (int i = 0; i < nb; i++) as[i] = bs[i] = c->batch[i];
    as[nb] = c->ta ? c->K : c->M;
    as[nb + 1] = c->ta ? c->M : c->K;
    int bo = c->nd_b > 2 ? nb : 0;
    bs[bo] = c->tb ? c->N : c->K;
    bs[bo + 1] = c->tb ? c->K : c->N;
    ct_node a, b;
    CT_TRY(ct_param(g, "a", c->nd_a, as, CT_INIT_ZEROS, 1, &a));
    CT_TRY(ct_param(g, "b", c->nd_b, bs, CT_INIT_ZEROS, 1, &b));
    return ct_matmul(g, a, b, c->ta, c->tb, y);
}

ct_status test_linear_op(ct_graph *g, const test_lin_cfg *c, ct_node *y) {
    int64_t xs[3];
    for (int i = 0; i < c->nd - 1; i++) xs[i] = c->lead[i];
    xs[c->nd - 1] = c->I;
    ct_node x, w, bias = CT_NONE;
    CT_TRY(ct_param(g, "x", c->nd, xs, CT_INIT_ZEROS, 1, &x));
    CT_TRY(ct_param(g, "w", 2, (int64_t[]){c->O, c->I}, CT_INIT_ZEROS, 1, &w));
    if (c->bias) CT_TRY(ct_param(g, "bias", 1, (int64_t[]){c->O}, CT_INIT_ZEROS, 1, &bias));
    return ct_linear(g, x, w, bias, y);
}

ct_status test_conv_op(ct_graph *g, const test_conv_cfg *c, ct_node *y) {
    ct_node x, w, bias = CT_NONE;
    CT_TRY(ct_param(g, "x", 4, (int64_t[]){c->N, c->C, c->H, c->W}, CT_INIT_ZEROS, 1, &x));
    CT_TRY(ct_param(g, "w", 4, (int64_t[]){c->OC, c->C / c->groups, c->KH, c->KW}, CT_INIT_ZEROS, 1, &w));
    if (c->bias) CT_TRY(ct_param(g, "bias", 1, (int64_t[]){c->OC}, CT_INIT_ZEROS, 1, &bias));
    return ct_conv2d(g, x, w, bias, c->stride, c->pad, c->dil, c->groups, y);
}

void test_conv_label(const test_conv_cfg *c, char *buf, size_t len) {
    snprintf(buf, len, "conv2d x[%lld,%lld,%lld,%lld] oc=%lld k=%lldx%lld stride=%d pad=%d dil=%d groups=%d bias=%d",
             (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->OC, (long long)c->KH,
             (long long)c->KW, c->stride, c->pad, c->dil, c->groups, c->bias);
}

ct_status test_weighted_sum(ct_graph *g, ct_node y, ct_node *r, ct_node *loss) {
    int nd;
    int64_t shape[CT_MAX_DIMS];
    CT_TRY(ct_node_shape(g, y, &nd, shape));
    ct_node t;
    CT_TRY(ct_input(g, "r", CT_F32, nd, shape, r));
    CT_TRY(ct_mul(g, y, *r, &t));
    return ct_sum(g, t, (1u << nd) - 1, 0, loss);
}

int test_mpi_start(const char *suite, ct_context **ctx, ct_comm **world) {
    *ctx = test_ctx(-1, 1);
    if (ct_comm_world_create(*ctx, world) == CT_OK) return 0;
    fprintf(stderr, "%s: %s\n", suite, ct_context_last_error(*ctx));
    printf("%s: 0 passed, 1 failed\n", suite);
    return 1;
}

int test_mpi_finish(ct_context *ctx, ct_comm *world, int rc) {
    ct_comm_free(world);
    ct_context_free(ctx);
    return rc;
}

ct_status test_ce_plan(ct_context *ctx, ct_comm *group, int vp, int64_t rows, int64_t cols, int64_t vocab, float eps,
                       int ignore, const float *logits, const int32_t *labels, test_ce_run *o) {
    ct_graph *g;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    o->p = NULL;
    if (vp && group) s = ct_graph_set_tensor_group(g, group);
    if (s == CT_OK) s = ct_param(g, "x", 2, (int64_t[]){rows, cols}, CT_INIT_ZEROS, 1, &o->x);
    if (s == CT_OK) s = ct_input(g, "y", CT_I32, 1, (int64_t[]){rows}, &o->y);
    if (s == CT_OK && vp) s = ct_cross_entropy_vp(g, o->x, o->y, eps, ignore, vocab, &o->loss);
    if (s == CT_OK && !vp) s = ct_cross_entropy(g, o->x, o->y, eps, ignore, &o->loss);
    if (s == CT_OK) s = ct_compile(g, o->loss, 0, NULL, NULL, &o->p);
    ct_graph_free(g);
    ct_tensor tx, ty;
    if (s == CT_OK) s = ct_plan_tensor(o->p, o->x, &tx);
    if (s == CT_OK) s = ct_plan_tensor(o->p, o->y, &ty);
    if (s != CT_OK) return s;
    memcpy(tx.data, logits, (size_t)(rows * cols) * sizeof(float));
    memcpy(ty.data, labels, (size_t)rows * sizeof(int32_t));
    s = ct_plan_forward(o->p, 1);
    if (s == CT_OK) s = ct_plan_backward(o->p);
    if (s == CT_OK) s = ct_plan_loss(o->p, &o->l);
    return s;
}

unsigned char *test_read_file(const char *path, size_t *n) {
    if (n) *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) { /* a short read: nothing */
        free(b);
        b = NULL;
    }
    fclose(f);
    if (!b) return NULL;
    b[sz] = 0; /* text files read as C strings */
    if (n) *n = (size_t)sz;
    return b;
}
