/* tests/golden.c - the CTG1 golden-file reader (docs/golden-format.md) and the
 * comparison helpers shared by tests/test_golden.c and tests/test_transformer.c. */
#include <stdarg.h>
#include <stdint.h>
#include <unistd.h>

#include "golden.h"

/* ---- reader for the CTG1 format ------------------------------------------------------------ */

void gold_free(gold_file *f) {
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
 * set; else golden/ next to this source (__FILE__ is tests/golden.c when
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

/* Loads `file` from the golden folder (and its meta.base, if any). Returns
 * NULL with a message in err. */
gold_file *gold_load(const char *file, char *err, size_t errlen, int depth) {
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
        gold_err(err, errlen, "cannot open golden file %s (regenerate with /usr/bin/python3 scripts/make_golden.py "
                 "or scripts/make_transformer_golden.py, or set CT_GOLDEN_DIR)", path);
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
const gold_rec *gold_get(const gold_file *f, const char *name) {
    for (; f; f = f->base)
        for (int i = 0; i < f->n; i++)
            if (!strcmp(f->recs[i].name, name)) return &f->recs[i];
    return NULL;
}

/* Number of distinct record names starting with `prefix` (case file and base). */
int gold_count(const gold_file *f, const char *prefix) {
    int n = 0;
    for (const gold_file *g = f; g; g = g->base)
        for (int i = 0; i < g->n; i++)
            if (!strncmp(g->recs[i].name, prefix, strlen(prefix)) && gold_get(f, g->recs[i].name) == &g->recs[i]) n++;
    return n;
}

/* ---- the comparison ------------------------------------------------------------------------- */

void run_fail(run_state *s, const char *fmt, ...) {
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
int load_into(run_state *s, const gold_file *f, const char *name, const ct_tensor *t) {
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
int compare(run_state *s, const gold_file *f, const char *name, const ct_tensor *t) {
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

void print_kernels(run_state *s, ct_graph *g, ct_plan *p) {
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

int meta_i32(const gold_file *f, const char *name, int32_t *out, int max_n, int *n) {
    const gold_rec *r = gold_get(f, name);
    if (!r || r->dtype != GDT_I32 || r->numel > max_n) return 0;
    memcpy(out, r->data, (size_t)r->numel * 4);
    if (n) *n = (int)r->numel;
    return 1;
}

void run_end(const run_state *s, const char *file, int line) {
    if (s->completed) printf("  [%s] worst %.2e (%s)\n", s->label, s->worst, s->worst_name);
    if (s->failed) {
        fprintf(stderr, "  CHECK failed %s:%d: golden %s: %s\n", file, line, s->label, s->msg);
        ct_test_failed_checks++;
    }
}

void run_close(const run_state *s, const char *file, int line, ct_plan *p, ct_graph *g, ct_context *ctx, gold_file *f) {
    run_end(s, file, line);
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
    gold_free(f);
}

gold_file *run_begin(run_state *s, char label[64], const char *file, const char *ctx_name) {
    char err[512] = "";
    const char *dot = strchr(file, '.');
    snprintf(label, 64, "%.*s/%s", dot ? (int)(dot - file) : (int)strlen(file), file, ctx_name);
    memset(s, 0, sizeof *s);
    s->label = label;
    gold_file *f = gold_load(file, err, sizeof err, 0);
    if (!f) run_fail(s, "%s", err);
    return f;
}

int load_params(run_state *s, const gold_file *f, ct_plan *p) {
    char name[160];
    int np = ct_plan_num_params(p);
    if (np != gold_count(f, "param.")) {
        run_fail(s, "ctrain has %d parameters, the golden file %d", np, gold_count(f, "param."));
        return 0;
    }
    for (int i = 0; i < np; i++) {
        const char *pname;
        ct_tensor v;
        ct_status st = ct_plan_param_info(p, i, &pname, &v, NULL);
        if (st != CT_OK) {
            run_fail(s, "ct_plan_param_info(%d) -> %s", i, ct_status_name(st));
            return 0;
        }
        snprintf(name, sizeof name, "param.%s", pname);
        if (!load_into(s, f, name, &v)) return 0;
    }
    return 1;
}

int compare_grads(run_state *s, const gold_file *f, ct_plan *p) {
    char name[160];
    int np = ct_plan_num_params(p);
    if (np != gold_count(f, "grad.")) run_fail(s, "ctrain has %d gradients, the golden file %d", np, gold_count(f, "grad."));
    for (int i = 0; i < np; i++) {
        const char *pname;
        ct_tensor gr;
        ct_status st = ct_plan_param_info(p, i, &pname, NULL, &gr);
        if (st != CT_OK) {
            run_fail(s, "ct_plan_param_info(%d) -> %s", i, ct_status_name(st));
            return 0;
        }
        snprintf(name, sizeof name, "grad.%s", pname);
        compare(s, f, name, &gr);
    }
    return 1;
}

static double norm_rel(const gold_rec *r, const ct_tensor *t) {
    double num = 0, den = 0;
    const float *a = t->data, *b = r->data;
    for (int64_t i = 0; i < r->numel; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The tolerance of record `name`: tol, or LOWP_FACTOR x PyTorch's own error
 * ("bf16err.<name>") where the golden file has it and that is larger. */
#define LOWP_FACTOR 3.0
#define LOWP_MEDIAN_RATIO 1.25
static double lowp_tol(const gold_file *f, const char *name, double tol) {
    char k[192];
    snprintf(k, sizeof k, "bf16err.%s", name);
    const gold_rec *r = gold_get(f, k);
    if (!r || r->numel != 1 || r->dtype != GDT_F32) return tol;
    double t = LOWP_FACTOR * (double)*(const float *)r->data;
    return t > tol ? t : tol;
}

int compare_lowp(run_state *s, const gold_file *f, ct_plan *p, double tol) {
    char name[160];
    double worst_ratio = 0, *ratios = calloc((size_t)ct_plan_num_params(p) + 1, sizeof *ratios);
    int worst_ratio_at = -1, nr = 0;
    if (!ratios) {
        run_fail(s, "out of memory");
        return 0;
    }
    float lv;
    ct_status st = ct_plan_loss(p, &lv);
    const gold_rec *lr = gold_get(f, "loss");
    if (st != CT_OK || !lr || lr->numel != 1 || lr->dtype != GDT_F32) {
        run_fail(s, "no loss to compare (ct_plan_loss -> %s, golden loss %s)", ct_status_name(st), lr ? "of another size" : "missing");
        return 0;
    }
    double gl = *(const float *)lr->data, rel = fabs((double)lv - gl) / fabs(gl);
    double tl = lowp_tol(f, "loss", tol);
    printf("  [%s] loss %.6f vs golden %.6f: rel %.2e\n", s->label, (double)lv, gl, rel);
    if (!(rel <= tl)) run_fail(s, "loss %.6f vs golden %.6f: rel %.2e > %.2e", (double)lv, gl, rel, tl);
    s->worst = rel;
    snprintf(s->worst_name, sizeof s->worst_name, "loss");
    int np = ct_plan_num_params(p);
    if (np != gold_count(f, "grad.")) run_fail(s, "ctrain has %d gradients, the golden file %d", np, gold_count(f, "grad."));
    for (int i = 0; i < np; i++) {
        const char *pname;
        ct_tensor gr;
        if ((st = ct_plan_param_info(p, i, &pname, NULL, &gr)) != CT_OK) {
            run_fail(s, "ct_plan_param_info(%d) -> %s", i, ct_status_name(st));
            free(ratios);
            return 0;
        }
        snprintf(name, sizeof name, "grad.%s", pname);
        const gold_rec *gg = gold_get(f, name);
        if (!gg || gg->numel != ct_tensor_numel(&gr) || gr.dtype != CT_F32 || gg->dtype != GDT_F32) {
            run_fail(s, "%s: missing in the golden file or another size/dtype", name);
            continue;
        }
        double e = norm_rel(gg, &gr), te = lowp_tol(f, name, tol), pt = lowp_tol(f, name, 0) / LOWP_FACTOR;
        if (!(e <= s->worst)) {
            s->worst = e;
            snprintf(s->worst_name, sizeof s->worst_name, "%.95s", name);
        }
        if (pt > 0 && e / pt > worst_ratio) worst_ratio = e / pt, worst_ratio_at = i;
        if (pt > 0) ratios[nr++] = e / pt;
        if (pt > 0 && getenv("CT_LOWP_RATIOS")) printf("    ratio %s %.3f (%.2e vs %.2e)\n", name, e / pt, e, pt);
        if (!(e <= te))
            run_fail(s, "%s: ||g_lowp - g_golden|| / ||g_golden|| = %.2e > %.2e%s", name, e, te,
                     pt > 0 ? " (PyTorch's own BF16 autocast: see bf16err)" : "");
    }
    printf("  [%s] worst norm-relative error %.2e (%s)", s->label, s->worst, s->worst_name);
    if (nr) {
        /* on the whole as close to FP32 as PyTorch's own BF16 (single tensors vary: other rounding points) */
        qsort(ratios, (size_t)nr, sizeof *ratios, cmp_double);
        double med = ratios[nr / 2];
        printf("; against PyTorch's own BF16 autocast: median %.2fx, worst %.2fx (parameter %d)", med, worst_ratio,
               worst_ratio_at);
        if (!(med <= LOWP_MEDIAN_RATIO))
            run_fail(s, "the gradients' median error is %.2fx PyTorch's own BF16 autocast error (at most %.2fx)", med,
                     LOWP_MEDIAN_RATIO);
    }
    printf("\n");
    free(ratios);
    if (!(s->worst > 1e-4)) run_fail(s, "the low-precision run is within %.1e of FP32 everywhere: did it run in FP32?", s->worst);
    return 1;
}
