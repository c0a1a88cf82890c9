/* tests/test_golden.c - golden tests against PyTorch.
 *
 * scripts/make_golden.py defines in PyTorch the models that ct_model_mlp and
 * ct_model_cnn build, runs one training-mode forward + backward and stores
 * weights, buffers, batch, labels, loss, logits, every parameter gradient and
 * the updated batchnorm running statistics in tests/golden/ (CTG1 format,
 * docs/golden-format.md). Here we build the same graph with ctrain, load the
 * same weights, buffers and batch by name, run forward(training=1) +
 * backward, and require for every tensor
 *
 *     max|ctrain - golden| / max|golden| <= 1e-5      (FP32)
 *
 * in three contexts: the default one (oneDNN + best SIMD), AVX2 without
 * oneDNN, and the reference kernels. A missing or malformed golden file is a
 * failure, not a skip. Where the files are looked for: see golden_dir(). */
#include <stdarg.h>
#include <stdint.h>
#include <unistd.h>

#include "test.h"

#define GOLDEN_TOL 1e-5

/* ---- reader for the CTG1 format ------------------------------------------------------------ */

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

static void gold_free(gold_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) {
        free(f->recs[i].name);
        free(f->recs[i].data);
    }
    free(f->recs);
    gold_free(f->base);
    free(f);
}


/* Candidate folders for the golden files, in order: CT_GOLDEN_DIR alone when
 * set; else golden/ next to this source (__FILE__ is tests/test_golden.c when
 * built by make, so this is relative to the repository root), then
 * ../../tests/golden relative to the test binary (BUILD/tests/test_golden), so
 * that the test also runs from another directory. */
static int golden_dir(int i, char *out, size_t len) {
    const char *env = getenv("CT_GOLDEN_DIR");
    if (env && env[0]) return i == 0 ? (snprintf(out, len, "%s", env), 1) : 0;
    if (i == 0) {
        const char *src = __FILE__, *slash = strrchr(src, '/');
        if (slash) snprintf(out, len, "%.*s/golden", (int)(slash - src), src);
        else snprintf(out, len, "golden");
        return 1;
    }
    if (i == 1) {
        char exe[900];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return 0;
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (!slash) return 0;
        *slash = 0;
        snprintf(out, len, "%s/../../tests/golden", exe);
        return 1;
    }
    return 0;
}

/* Opens `file` in the first candidate folder that has it; path gets the
 * path tried first when none has it. */
static FILE *golden_open(const char *file, char *path, size_t len) { /* len <= 1200 */
    char dir[1024], first[1200] = "";
    for (int i = 0; golden_dir(i, dir, sizeof dir); i++) {
        snprintf(path, len, "%s/%s", dir, file);
        if (!first[0]) snprintf(first, sizeof first, "%s", path);
        FILE *fp = fopen(path, "rb");
        if (fp) return fp;
    }
    snprintf(path, len, "%s", first);
    return NULL;
}

/* Bounded cursor over the file's bytes. */
typedef struct {
    const unsigned char *p;
    size_t left;
} cursor;

static int take(cursor *c, void *dst, size_t n) {
    if (n > c->left) return 0;
    memcpy(dst, c->p, n);
    c->p += n;
    c->left -= n;
    return 1;
}

static int take_u32(cursor *c, uint32_t *v) {
    unsigned char b[4];
    if (!take(c, b, 4)) return 0;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 1;
}

static int take_u64(cursor *c, uint64_t *v) {
    uint32_t lo, hi;
    if (!take_u32(c, &lo) || !take_u32(c, &hi)) return 0;
    *v = (uint64_t)hi << 32 | lo;
    return 1;
}

static int host_is_little_endian(void) {
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static int gold_err(char *err, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return 0;
}

static const gold_rec *gold_get(const gold_file *f, const char *name);

/* Loads `file` from the golden folder (and its meta.base, if any). Returns
 * NULL with a message in err. */
static gold_file *gold_load(const char *file, char *err, size_t errlen, int depth) {
    char path[1200];
    gold_file *f = calloc(1, sizeof *f);
    unsigned char *buf = NULL;
    FILE *fp = NULL;
    int ok = 0;
    if (!f) {
        gold_err(err, errlen, "out of memory");
        goto done;
    }
    if (!host_is_little_endian()) {
        gold_err(err, errlen, "the golden reader assumes a little-endian host");
        goto done;
    }
    fp = golden_open(file, path, sizeof path);
    if (!fp) {
        gold_err(err, errlen, "cannot open golden file %s (run /usr/bin/python3 scripts/make_golden.py, or set "
                 "CT_GOLDEN_DIR)", path);
        goto done;
    }
    if (fseek(fp, 0, SEEK_END) != 0) {
        gold_err(err, errlen, "%s: cannot seek", path);
        goto done;
    }
    long size = ftell(fp);
    rewind(fp);
    if (size < 8 || !(buf = malloc((size_t)size)) || fread(buf, 1, (size_t)size, fp) != (size_t)size) {
        gold_err(err, errlen, "%s: cannot read (%ld bytes)", path, size);
        goto done;
    }
    cursor c = {buf, (size_t)size};
    char magic[4];
    uint32_t nrec;
    take(&c, magic, 4);
    if (memcmp(magic, "CTG1", 4) != 0) {
        gold_err(err, errlen, "%s: bad magic (not a CTG1 file)", path);
        goto done;
    }
    if (!take_u32(&c, &nrec) || nrec > 100000 || !(f->recs = calloc(nrec ? nrec : 1, sizeof *f->recs))) {
        gold_err(err, errlen, "%s: bad record count", path);
        goto done;
    }
    for (uint32_t i = 0; i < nrec; i++) {
        gold_rec *r = &f->recs[i];
        uint32_t nlen, nd;
        if (!take_u32(&c, &nlen) || nlen == 0 || nlen > 255 || nlen > c.left) {
            gold_err(err, errlen, "%s: record %u: bad name length or truncated file", path, i);
            goto done;
        }
        r->name = calloc(nlen + 1, 1);
        f->n = (int)i + 1;
        if (!r->name || !take(&c, r->name, nlen) || !take_u32(&c, &r->dtype) || !take_u32(&c, &nd) ||
            nd > CT_MAX_DIMS || r->dtype > GDT_U8) {
            gold_err(err, errlen, "%s: record %u ('%s'): bad header", path, i, r->name ? r->name : "?");
            goto done;
        }
        r->ndim = (int)nd;
        r->numel = 1;
        for (int d = 0; d < r->ndim; d++) {
            uint64_t v;
            if (!take_u64(&c, &v) || v > ((uint64_t)1 << 31) || r->numel * (int64_t)v > ((int64_t)1 << 31)) {
                gold_err(err, errlen, "%s: record '%s': bad dims", path, r->name);
                goto done;
            }
            r->dims[d] = (int64_t)v;
            r->numel *= (int64_t)v;
        }
        size_t esz = r->dtype == GDT_U8 ? 1 : 4;
        size_t nbytes = (size_t)r->numel * esz;
        if (nbytes > c.left) {
            gold_err(err, errlen, "%s: record '%s': truncated data", path, r->name);
            goto done;
        }
        r->data = malloc(nbytes + 1); /* +1: u8 strings get a terminating NUL */
        if (!r->data) {
            gold_err(err, errlen, "out of memory");
            goto done;
        }
        take(&c, r->data, nbytes);
        ((char *)r->data)[nbytes] = 0;
    }
    if (c.left) {
        gold_err(err, errlen, "%s: %zu trailing bytes", path, c.left);
        goto done;
    }
    const gold_rec *base = gold_get(f, "meta.base");
    if (base) {
        if (base->dtype != GDT_U8 || base->numel == 0 || strchr((const char *)base->data, '/') || depth > 4) {
            gold_err(err, errlen, "%s: bad meta.base", path);
            goto done;
        }
        if (!(f->base = gold_load((const char *)base->data, err, errlen, depth + 1))) goto done;
    }
    ok = 1;
done:
    if (fp) fclose(fp);
    free(buf);
    if (!ok) {
        gold_free(f);
        return NULL;
    }
    return f;
}

/* Record by name; the case file first, then its base. */
static const gold_rec *gold_get(const gold_file *f, const char *name) {
    for (; f; f = f->base)
        for (int i = 0; i < f->n; i++)
            if (!strcmp(f->recs[i].name, name)) return &f->recs[i];
    return NULL;
}

/* Number of distinct record names starting with `prefix` (case file and base). */
static int gold_count(const gold_file *f, const char *prefix) {
    int n = 0;
    for (const gold_file *g = f; g; g = g->base)
        for (int i = 0; i < g->n; i++)
            if (!strncmp(g->recs[i].name, prefix, strlen(prefix)) && gold_get(f, g->recs[i].name) == &g->recs[i]) n++;
    return n;
}

/* ---- the comparison ------------------------------------------------------------------------- */

typedef struct {
    const char *label; /* "mlp/ref" */
    int failed;
    double worst;
    char worst_name[96];
    char msg[512];
} run_state;

static void run_fail(run_state *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "  [%s] FAIL: %s\n", s->label, s->msg);
    s->failed = 1;
}

static int same_shape(const gold_rec *r, const ct_tensor *t) {
    if (r->ndim != t->ndim) return 0;
    for (int i = 0; i < r->ndim; i++)
        if (r->dims[i] != t->shape[i]) return 0;
    return 1;
}

static char *rec_shape(const gold_rec *r, char *buf, size_t len) { return ct_shape_str(r->ndim, r->dims, buf, len); }

/* Copies golden record `name` into the plan tensor t (dtype and shape must match). */
static int load_into(run_state *s, const gold_file *f, const char *name, const ct_tensor *t) {
    const gold_rec *r = gold_get(f, name);
    char b1[96], b2[96];
    if (!r) {
        run_fail(s, "golden file has no record '%s'", name);
        return 0;
    }
    uint32_t want = t->dtype == CT_F32 ? GDT_F32 : t->dtype == CT_I32 ? GDT_I32 : 99;
    if (r->dtype != want || !same_shape(r, t)) {
        run_fail(s, "record '%s' is dtype %u shape %s, ctrain wants %s %s", name, r->dtype, rec_shape(r, b1, sizeof b1),
                 ct_dtype_name(t->dtype), ct_shape_str(t->ndim, t->shape, b2, sizeof b2));
        return 0;
    }
    memcpy(t->data, r->data, (size_t)r->numel * 4);
    return 1;
}

/* Compares an f32 plan tensor with golden record `name`: max|a-b| / max|b|
 * (max|a-b| alone when the golden tensor is all zeros; NaN counts as inf). */
static int compare(run_state *s, const gold_file *f, const char *name, const ct_tensor *t) {
    const gold_rec *r = gold_get(f, name);
    char b1[96], b2[96];
    if (!r) {
        run_fail(s, "golden file has no record '%s'", name);
        return 0;
    }
    if (r->dtype != GDT_F32 || t->dtype != CT_F32 || !same_shape(r, t)) {
        run_fail(s, "record '%s' has shape %s, ctrain's tensor %s", name, rec_shape(r, b1, sizeof b1),
                 ct_shape_str(t->ndim, t->shape, b2, sizeof b2));
        return 0;
    }
    const float *a = t->data, *b = r->data;
    double num = 0, den = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < r->numel; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d) d = INFINITY;
        if (d > num) {
            num = d;
            at = i;
        }
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    double rel = den > 0 ? num / den : num;
    int ok = rel <= GOLDEN_TOL;
    printf("  [%s] %-30s rel %.2e  (max|golden| %.3e, worst at [%lld]: %.8e vs %.8e)%s\n", s->label, name, rel, den,
           (long long)at, (double)a[at], (double)b[at], ok ? "" : "  > 1e-5");
    int worst = !(rel <= s->worst);
    if (worst) {
        s->worst = rel;
        snprintf(s->worst_name, sizeof s->worst_name, "%s", name);
    }
    if (!ok && (worst || !s->failed)) { /* report the worst failing tensor */
        snprintf(s->msg, sizeof s->msg, "%s off by %.2e relative (tolerance %.0e)", name, rel, GOLDEN_TOL);
        s->failed = 1;
    }
    return ok;
}

static void print_kernels(run_state *s, ct_graph *g, ct_plan *p) {
    char line[1024] = "";
    size_t len = 0;
    for (int n = 0; n < ct_graph_num_nodes(g); n++) {
        const char *op = ct_node_op_name(g, n), *k = ct_plan_kernel_name(p, n);
        if (!strcmp(k, "none")) continue;
        char item[96];
        snprintf(item, sizeof item, " %s=%s", op, k);
        if (strstr(line, item)) continue;
        len += (size_t)snprintf(line + len, sizeof line - len, "%s", item);
        if (len >= sizeof line) break;
    }
    printf("  [%s] forward kernels:%s\n", s->label, line);
}

static int meta_i32(const gold_file *f, const char *name, int32_t *out, int max_n, int *n) {
    const gold_rec *r = gold_get(f, name);
    if (!r || r->dtype != GDT_I32 || r->numel > max_n) return 0;
    memcpy(out, r->data, (size_t)r->numel * 4);
    if (n) *n = (int)r->numel;
    return 1;
}

/* Runs one golden case (file) under one context. */
static void run_golden(const char *file, int is_cnn, const char *ctx_name, int isa, int use_onednn) {
    char label[64], err[512] = "", name[160];
    snprintf(label, sizeof label, "%.*s/%s", (int)(strchr(file, '.') - file), file, ctx_name);
    run_state s = {label, 0, 0.0, "", ""};
    ct_context *ctx = NULL;
    ct_graph *g = NULL;
    ct_plan *p = NULL;
    gold_file *f = gold_load(file, err, sizeof err, 0);
    if (!f) {
        run_fail(&s, "%s", err);
        goto done;
    }
    ctx = test_ctx(isa, use_onednn);

    /* configuration from the file */
    int32_t arch[8], ncls, ignore;
    int narch = 0;
    const gold_rec *ls = gold_get(f, "meta.label_smoothing");
    const gold_rec *in_rec = gold_get(f, "input"), *lab_rec = gold_get(f, "labels");
    if (!meta_i32(f, is_cnn ? "meta.channels" : "meta.hidden", arch, 8, &narch) ||
        !meta_i32(f, "meta.n_classes", &ncls, 1, NULL) || !meta_i32(f, "meta.ignore_index", &ignore, 1, NULL) || !ls ||
        ls->dtype != GDT_F32 || ls->numel != 1 || !in_rec || !lab_rec) {
        run_fail(&s, "golden file %s lacks meta records, input or labels", file);
        goto done;
    }
    float smoothing = *(const float *)ls->data;
    int64_t arch64[8];
    for (int i = 0; i < narch; i++) arch64[i] = arch[i];

    /* the graph: input, model, cross entropy */
    ct_node x, y, logits, loss;
    ct_status st;
#define TRY(expr)                                                                                          \
    do {                                                                                                   \
        if ((st = (expr)) != CT_OK) {                                                                      \
            run_fail(&s, "%s -> %s: %s", #expr, ct_status_name(st), ct_context_last_error(ctx));          \
            goto done;                                                                                     \
        }                                                                                                  \
    } while (0)
    TRY(ct_graph_create(ctx, &g));
    TRY(ct_input(g, "x", CT_F32, in_rec->ndim, in_rec->dims, &x));
    TRY(ct_input(g, "y", CT_I32, lab_rec->ndim, lab_rec->dims, &y));
    if (is_cnn) TRY(ct_model_cnn(g, x, narch, arch64, ncls, &logits));
    else TRY(ct_model_mlp(g, x, narch, arch64, ncls, 0.0f, &logits));
    TRY(ct_cross_entropy(g, logits, y, smoothing, ignore, &loss));
    TRY(ct_compile(g, loss, 1, &logits, NULL, &p));

    /* parameters by name, buffers by graph node name, the batch */
    int np = ct_plan_num_params(p);
    if (np != gold_count(f, "param.")) {
        run_fail(&s, "ctrain has %d parameters, the golden file %d", np, gold_count(f, "param."));
        goto done;
    }
    for (int i = 0; i < np; i++) {
        const char *pname;
        ct_tensor v;
        TRY(ct_plan_param_info(p, i, &pname, &v, NULL));
        snprintf(name, sizeof name, "param.%s", pname);
        if (!load_into(&s, f, name, &v)) goto done;
    }
    int nbuf = 0;
    for (int n = 0; n < ct_graph_num_nodes(g); n++) {
        if (strcmp(ct_node_op_name(g, n), "buffer")) continue;
        ct_tensor v;
        TRY(ct_plan_tensor(p, n, &v));
        snprintf(name, sizeof name, "buffer.%s", ct_node_name(g, n));
        if (!load_into(&s, f, name, &v)) goto done;
        nbuf++;
    }
    if (nbuf != gold_count(f, "buffer.")) {
        run_fail(&s, "ctrain has %d buffers, the golden file %d", nbuf, gold_count(f, "buffer."));
        goto done;
    }
    ct_tensor tx, ty;
    TRY(ct_plan_tensor(p, x, &tx));
    TRY(ct_plan_tensor(p, y, &ty));
    if (!load_into(&s, f, "input", &tx) || !load_into(&s, f, "labels", &ty)) goto done;

    /* poison the gradients so that one never written shows up as NaN */
    float *grads;
    size_t ng;
    TRY(ct_plan_param_arena(p, NULL, &grads, &ng));
    for (size_t i = 0; i < ng; i++) grads[i] = NAN;

    TRY(ct_plan_forward(p, 1));
    TRY(ct_plan_backward(p));
    print_kernels(&s, g, p);

    /* loss, logits, every gradient, running statistics after the step */
    float lv;
    TRY(ct_plan_loss(p, &lv));
    ct_tensor tl = ct_tensor_make(&lv, CT_F32, 0, NULL), tlog;
    compare(&s, f, "loss", &tl);
    TRY(ct_plan_tensor(p, logits, &tlog));
    compare(&s, f, "logits", &tlog);
    if (np != gold_count(f, "grad.")) run_fail(&s, "ctrain has %d gradients, the golden file %d", np, gold_count(f, "grad."));
    for (int i = 0; i < np; i++) {
        const char *pname;
        ct_tensor gr;
        TRY(ct_plan_param_info(p, i, &pname, NULL, &gr));
        snprintf(name, sizeof name, "grad.%s", pname);
        compare(&s, f, name, &gr);
    }
    if (nbuf != gold_count(f, "buffer_after."))
        run_fail(&s, "ctrain has %d buffers, the golden file %d updated ones", nbuf, gold_count(f, "buffer_after."));
    for (int n = 0; n < ct_graph_num_nodes(g); n++) {
        if (strcmp(ct_node_op_name(g, n), "buffer")) continue;
        ct_tensor v;
        TRY(ct_plan_tensor(p, n, &v));
        snprintf(name, sizeof name, "buffer_after.%s", ct_node_name(g, n));
        compare(&s, f, name, &v);
    }
#undef TRY
    printf("  [%s] worst %.2e (%s)\n", s.label, s.worst, s.worst_name);
done:
    if (s.failed) {
        fprintf(stderr, "  CHECK failed %s:%d: golden %s: %s\n", __FILE__, __LINE__, s.label, s.msg);
        ct_test_failed_checks++;
    }
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
    gold_free(f);
}

/* ---- the tests --------------------------------------------------------------------------------- */

#define CASE(fn, file, cnn, ctxname, isa, dnnl) \
    TEST(fn) { run_golden(file, cnn, ctxname, isa, dnnl); }

CASE(mlp_ref, "mlp.ctg", 0, "ref", CT_ISA_REF, 0)
CASE(mlp_avx2, "mlp.ctg", 0, "avx2", CT_ISA_AVX2, 0)
CASE(mlp_default, "mlp.ctg", 0, "default", -1, 1)
CASE(mlp_smooth_ref, "mlp_smooth.ctg", 0, "ref", CT_ISA_REF, 0)
CASE(mlp_smooth_avx2, "mlp_smooth.ctg", 0, "avx2", CT_ISA_AVX2, 0)
CASE(mlp_smooth_default, "mlp_smooth.ctg", 0, "default", -1, 1)
CASE(cnn_ref, "cnn.ctg", 1, "ref", CT_ISA_REF, 0)
CASE(cnn_avx2, "cnn.ctg", 1, "avx2", CT_ISA_AVX2, 0)
CASE(cnn_default, "cnn.ctg", 1, "default", -1, 1)

TEST_MAIN(T(mlp_ref), T(mlp_avx2), T(mlp_default), T(mlp_smooth_ref), T(mlp_smooth_avx2), T(mlp_smooth_default),
          T(cnn_ref), T(cnn_avx2), T(cnn_default))
