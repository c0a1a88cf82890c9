/* tests/test_optim.c - the optimizers against PyTorch 1.13 (golden file
 * tests/golden/optim_pytorch.ctg from scripts/make_optim_golden.py), fast vs
 * reference for every kind, validation messages, no allocation per step, and
 * LAMB's reduce hook (ZeRO). */
#include <stdint.h>

#include "test.h"

/* ---- a minimal CTG1 reader (docs/golden-format.md) ------------------------------------- */
typedef struct {
    char name[256];
    uint32_t dtype, ndim;
    uint64_t dims[6];
    size_t numel;
    const void *data;
} grec;
typedef struct {
    unsigned char *buf;
    int n;
    grec *r;
} gfile;

static int gload(gfile *f) {
    const char *dirs[] = {getenv("CT_GOLDEN_DIR"), "tests/golden", "../../tests/golden"};
    FILE *fp = NULL;
    for (int d = 0; d < 3 && !fp; d++) {
        if (!dirs[d]) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/optim_pytorch.ctg", dirs[d]);
        fp = fopen(path, "rb");
        if (d == 0) break; /* only there when set */
    }
    if (!fp) return 0;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->buf = malloc((size_t)sz);
    if (fread(f->buf, 1, (size_t)sz, fp) != (size_t)sz) sz = -1;
    fclose(fp);
    if (sz < 8 || memcmp(f->buf, "CTG1", 4)) return 0;
    size_t o = 4, end = (size_t)sz;
    uint32_t n;
    memcpy(&n, f->buf + o, 4);
    o += 4;
    f->r = calloc(n, sizeof *f->r);
    for (uint32_t i = 0; i < n; i++) {
        grec *r = &f->r[i];
        uint32_t l;
        if (o + 4 > end) return 0;
        memcpy(&l, f->buf + o, 4);
        o += 4;
        if (l == 0 || l > 255 || o + l + 8 > end) return 0;
        memcpy(r->name, f->buf + o, l);
        o += l;
        memcpy(&r->dtype, f->buf + o, 4);
        memcpy(&r->ndim, f->buf + o + 4, 4);
        o += 8;
        if (r->ndim > 6 || r->dtype > 1 || o + 8 * r->ndim > end) return 0;
        r->numel = 1;
        for (uint32_t d = 0; d < r->ndim; d++) {
            memcpy(&r->dims[d], f->buf + o, 8);
            o += 8;
            r->numel *= r->dims[d];
        }
        if (o + 4 * r->numel > end) return 0;
        r->data = f->buf + o;
        o += 4 * r->numel;
    }
    f->n = (int)n;
    return o == end;
}

static const grec *gget(const gfile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->r[i].name, name)) return &f->r[i];
    return NULL;
}

static void opts_from_golden(const gfile *f, const char *cs, ct_optim_opts *o) {
    char key[256];
    snprintf(key, sizeof key, "case.%s.kind", cs);
    int32_t k32;
    memcpy(&k32, gget(f, key)->data, 4); /* records are packed: copy, never dereference */
    ct_optim_kind kind = (ct_optim_kind)k32;
    snprintf(key, sizeof key, "case.%s.hp", cs);
    float h[13];
    memcpy(h, gget(f, key)->data, sizeof h);
    ct_optim_opts_default(o, kind);
    o->lr = h[0];
    o->weight_decay = h[1];
    o->momentum = h[2];
    o->dampening = h[3];
    o->nesterov = h[4] != 0;
    o->beta1 = h[5];
    o->beta2 = h[6];
    o->eps = h[7];
    o->amsgrad = h[8] != 0;
    o->alpha = h[9];
    o->centered = h[10] != 0;
    o->lr_decay = h[11];
    o->initial_accumulator_value = h[12];
}

static const char *CASES[] = {"sgd",     "sgd_momentum", "sgd_nesterov",     "adam",    "adam_amsgrad", "adamw",
                              "adamw_amsgrad", "rmsprop", "rmsprop_centered", "adagrad", "lamb"};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

TEST(optimizers_match_pytorch) {
    gfile f = {0};
    CHECK_MSG(gload(&f), "cannot load or parse optim_pytorch.ctg");
    int nd[3];
    int64_t shapes[3][4];
    for (int i = 0; i < 3; i++) {
        char key[32];
        snprintf(key, sizeof key, "param.%d", i);
        const grec *r = gget(&f, key);
        CHECK(r && r->dtype == 0);
        nd[i] = (int)r->ndim;
        for (int d = 0; d < nd[i]; d++) shapes[i][d] = (int64_t)r->dims[d];
    }
    double worst_all = 0;
    for (int use_ref = 0; use_ref < 2; use_ref++) {
        ct_context *ctx = test_ctx(-1, 1);
        ct_plan *plan;
        CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &plan));
        CHECK(ct_plan_num_params(plan) == 3);
        float *pa, *ga;
        size_t n;
        ct_plan_param_arena(plan, &pa, &ga, &n);
        size_t off[3], len[3];
        int idx[3]; /* golden index of plan param i (by name w<k>) */
        for (int i = 0; i < 3; i++) {
            const char *name;
            ct_tensor v;
            CHECK_OK(ctx, ct_plan_param_info(plan, i, &name, &v, NULL));
            idx[i] = name[1] - '0';
            off[i] = (size_t)((float *)v.data - pa);
            len[i] = (size_t)ct_tensor_numel(&v);
        }
        for (int c = 0; c < N_CASES; c++) {
            ct_optim_opts o;
            opts_from_golden(&f, CASES[c], &o);
            memset(ga, 0, n * sizeof *ga);
            for (int i = 0; i < 3; i++) {
                char key[32];
                snprintf(key, sizeof key, "param.%d", idx[i]);
                memcpy(pa + off[i], gget(&f, key)->data, len[i] * sizeof(float));
            }
            ct_optimizer *opt;
            CHECK_OK(ctx, ct_optimizer_create(plan, &o, &opt));
            double worst = 0;
            for (int t = 1; t <= 50; t++) {
                for (int i = 0; i < 3; i++) {
                    char key[32];
                    snprintf(key, sizeof key, "grad.%d", idx[i]);
                    const float *gg = gget(&f, key)->data;
                    memcpy(ga + off[i], gg + (size_t)(t - 1) * len[i], len[i] * sizeof(float));
                }
                CHECK_OK(ctx, use_ref ? ct_optimizer_step_ref(opt) : ct_optimizer_step(opt)); /* at opts.lr */
                for (int i = 0; i < 3; i++) {
                    char key[64];
                    snprintf(key, sizeof key, "case.%s.step%d.%d", CASES[c], t, idx[i]);
                    const grec *r = gget(&f, key);
                    if (!r) continue;
                    float b[4096];
                    CHECK(r->numel == len[i] && len[i] <= 4096);
                    memcpy(b, r->data, len[i] * sizeof(float));
                    double mx = 0, md = 0;
                    for (size_t k = 0; k < len[i]; k++) {
                        mx = fmax(mx, fabs((double)b[k]));
                        double d = fabs((double)pa[off[i] + k] - b[k]);
                        md = d != d ? INFINITY : fmax(md, d);
                    }
                    double e = md / mx;
                    if (e > worst) worst = e;
                }
            }
            printf("    %-5s %-17s worst rel error vs PyTorch %.3g\n", use_ref ? "ref" : "fast", CASES[c], worst);
            CHECK_MSG(worst <= 1e-6, "%s (%s): %g", CASES[c], use_ref ? "ref" : "fast", worst);
            if (worst > worst_all) worst_all = worst;
            ct_optimizer_free(opt);
        }
        ct_plan_free(plan);
        ct_context_free(ctx);
    }
    free(f.r);
    free(f.buf);
}

/* Every kind: the fused SIMD update (threads) equals the reference loop. */
TEST(optimizers_fast_match_reference) {
    int nd[3] = {2, 1, 4};
    int64_t shapes[3][4] = {{301, 257}, {37}, {17, 9, 5, 5}};
    for (int c = 0; c < N_CASES; c++) {
        ct_context *ctx = test_ctx(-1, 1);
        ct_plan *p1, *p2;
        CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &p1));
        CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &p2));
        static const ct_optim_kind kinds[] = {CT_OPTIM_SGD,    CT_OPTIM_SGD,     CT_OPTIM_SGD,     CT_OPTIM_ADAM,
                                              CT_OPTIM_ADAM,   CT_OPTIM_ADAMW,   CT_OPTIM_ADAMW,   CT_OPTIM_RMSPROP,
                                              CT_OPTIM_RMSPROP, CT_OPTIM_ADAGRAD, CT_OPTIM_LAMB};
        ct_optim_opts o;
        ct_optim_opts_default(&o, kinds[c]);
        o.weight_decay = 0.01f;
        if (c == 1 || c == 8) o.momentum = 0.9f;
        if (c == 2) o.momentum = 0.9f, o.nesterov = 1;
        if (c == 4 || c == 6) o.amsgrad = 1;
        if (c == 8) o.centered = 1;
        if (c == 9) o.lr_decay = 0.01f, o.initial_accumulator_value = 0.1f;
        ct_optimizer *a, *b;
        CHECK_OK(ctx, ct_optimizer_create(p1, &o, &a));
        CHECK_OK(ctx, ct_optimizer_create(p2, &o, &b));
        float *w1, *g1, *w2, *g2;
        size_t n;
        ct_plan_param_arena(p1, &w1, &g1, &n);
        ct_plan_param_arena(p2, &w2, &g2, &n);
        test_fill_uniform(w1, n, 7, -1, 1);
        memcpy(w2, w1, n * sizeof *w1);
        for (int it = 0; it < 5; it++) {
            test_fill_uniform(g1, n, 100 + (unsigned)it, -1, 1);
            memcpy(g2, g1, n * sizeof *g1);
            CHECK_OK(ctx, ct_optimizer_set_lr(a, 0.01f));
            CHECK_OK(ctx, ct_optimizer_step(a));
            CHECK_OK(ctx, ct_optimizer_set_lr(b, 0.01f));
            CHECK_OK(ctx, ct_optimizer_step_ref(b));
        }
        double md = 0, mx = 0; /* max|a-b| / max|b| over the arena */
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)w1[i] - w2[i]);
            md = d != d ? INFINITY : fmax(md, d);
            mx = fmax(mx, fabs((double)w2[i]));
        }
        double e = md / mx;
        printf("    %-17s fast vs reference (n %zu, %d threads): %.3g\n", CASES[c], n, ct_context_num_threads(ctx), e);
        CHECK_MSG(e < 1e-6, "%s fast vs reference: %g", CASES[c], e);
        ct_optimizer_free(a);
        ct_optimizer_free(b);
        ct_plan_free(p1);
        ct_plan_free(p2);
        ct_context_free(ctx);
    }
}

static int contains(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

TEST(optimizers_validate_with_field_names) {
    ct_context *ctx = test_ctx(-1, 1);
    int nd[1] = {2};
    int64_t shapes[1][4] = {{3, 3}};
    ct_plan *p;
    CHECK_OK(ctx, test_params_plan(ctx, 1, nd, (const int64_t(*)[4])shapes, &p));
    struct {
        ct_optim_kind kind;
        int field;
        float value;
        const char *msg;
    } cases[] = {
        {CT_OPTIM_RMSPROP, 0, 1.5f, "rmsprop: alpha 1.5 must be in [0, 1)"},
        {CT_OPTIM_RMSPROP, 1, -0.5f, "rmsprop: momentum"},
        {CT_OPTIM_RMSPROP, 2, 0.0f, "rmsprop: eps"},
        {CT_OPTIM_ADAM, 3, 1.0f, "adam: betas"},
        {CT_OPTIM_ADAM, 4, -1.0f, "adam: weight_decay"},
        {CT_OPTIM_ADAGRAD, 5, -0.1f, "adagrad: lr_decay"},
        {CT_OPTIM_ADAGRAD, 6, -1.0f, "adagrad: initial_accumulator_value"},
        {CT_OPTIM_LAMB, 7, -1.0f, "lamb: lr"},
        {CT_OPTIM_LAMB, 3, 1.0f, "lamb: betas"},
        {(ct_optim_kind)42, 7, 0.1f, "unknown kind"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_optim_opts o;
        ct_optim_opts_default(&o, cases[i].kind);
        float v = cases[i].value;
        switch (cases[i].field) {
        case 0: o.alpha = v; break;
        case 1: o.momentum = v; break;
        case 2: o.eps = v; break;
        case 3: o.beta1 = v; break;
        case 4: o.weight_decay = v; break;
        case 5: o.lr_decay = v; break;
        case 6: o.initial_accumulator_value = v; break;
        case 7: o.lr = v; break;
        }
        ct_optimizer *opt = (ct_optimizer *)1;
        CHECK(ct_optimizer_create(p, &o, &opt) == CT_E_INVALID_ARG && !opt);
        CHECK_MSG(contains(ct_context_last_error(ctx), cases[i].msg), "want '%s', got '%s'", cases[i].msg,
                  ct_context_last_error(ctx));
    }
    ct_optim_opts o;
    ct_optim_opts_default(&o, CT_OPTIM_LAMB);
    CHECK(o.lr == 1e-3f && o.beta1 == 0.9f && o.beta2 == 0.999f && o.eps == 1e-6f && o.weight_decay == 0.01f);
    ct_optim_opts_default(&o, CT_OPTIM_RMSPROP);
    CHECK(o.lr == 0.01f && o.alpha == 0.99f && o.eps == 1e-8f && o.momentum == 0 && !o.centered);
    ct_optim_opts_default(&o, CT_OPTIM_ADAGRAD);
    CHECK(o.lr == 0.01f && o.eps == 1e-10f && o.lr_decay == 0 && o.initial_accumulator_value == 0);
    ct_optim_opts_default(&o, CT_OPTIM_ADAM);
    CHECK(o.lr == 1e-3f && o.weight_decay == 0 && o.eps == 1e-8f && !o.amsgrad);
    ct_plan_free(p);
    ct_context_free(ctx);
}

TEST(optimizer_step_allocates_nothing) {
    int nd[2] = {2, 1};
    int64_t shapes[2][4] = {{40, 30}, {30}};
    for (int c = 0; c < N_CASES; c++) {
        ct_context *ctx = test_ctx(-1, 1);
        ct_plan *p;
        CHECK_OK(ctx, test_params_plan(ctx, 2, nd, (const int64_t(*)[4])shapes, &p));
        static const ct_optim_kind kinds[] = {CT_OPTIM_SGD,    CT_OPTIM_SGD,     CT_OPTIM_SGD,     CT_OPTIM_ADAM,
                                              CT_OPTIM_ADAM,   CT_OPTIM_ADAMW,   CT_OPTIM_ADAMW,   CT_OPTIM_RMSPROP,
                                              CT_OPTIM_RMSPROP, CT_OPTIM_ADAGRAD, CT_OPTIM_LAMB};
        ct_optim_opts o;
        ct_optim_opts_default(&o, kinds[c]);
        o.momentum = 0.9f;
        o.amsgrad = 1;
        o.centered = 1;
        ct_optimizer *opt;
        CHECK_OK(ctx, ct_optimizer_create(p, &o, &opt));
        ct_mem_stats before, after;
        ct_context_mem_stats(ctx, &before);
        for (int it = 0; it < 3; it++) {
            CHECK_OK(ctx, ct_optimizer_set_lr(opt, 1e-3f));
            CHECK_OK(ctx, ct_optimizer_step(opt));
            CHECK_OK(ctx, ct_optimizer_step_ref(opt));
        }
        ct_context_mem_stats(ctx, &after);
        CHECK_MSG(after.n_allocs == before.n_allocs, "%s: %llu allocations in steps", CASES[c],
                  (unsigned long long)(after.n_allocs - before.n_allocs));
        ct_optimizer_free(opt);
        ct_plan_free(p);
        ct_mem_stats end;
        ct_context_mem_stats(ctx, &end);
        CHECK_MSG(end.bytes_in_use == 0, "%s: %zu bytes leaked", CASES[c], end.bytes_in_use);
        ct_context_free(ctx);
    }
}

/* ---- parameter groups ------------------------------------------------------------------ */

/* max|a-b| / max|b| over one tensor */
static double tensor_rel(const float *a, const float *b, size_t n) {
    double md = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        md = d != d ? INFINITY : fmax(md, d);
        mx = fmax(mx, fabs((double)b[i]));
    }
    return mx > 0 ? md / mx : md;
}

/* no_decay_bias_norm: the 1-D parameter (w1) is updated exactly as by an
 * optimizer without weight decay, the others as by one with it (copies of
 * the same params and grads), for every kind, fast and reference. */
TEST(param_groups_no_decay_bias_norm) {
    int nd[3] = {2, 1, 4};
    int64_t shapes[3][4] = {{301, 257}, {37}, {17, 9, 5, 5}};
    static const ct_optim_kind kinds[] = {CT_OPTIM_SGD, CT_OPTIM_ADAM, CT_OPTIM_ADAMW, CT_OPTIM_RMSPROP,
                                          CT_OPTIM_ADAGRAD, CT_OPTIM_LAMB};
    for (size_t c = 0; c < sizeof kinds / sizeof kinds[0]; c++)
        for (int use_ref = 0; use_ref < 2; use_ref++) {
            ct_context *ctx = test_ctx(-1, 1);
            ct_plan *pl[3]; /* switch + decay, no decay, decay */
            ct_optimizer *op[3];
            float *w[3], *g[3];
            size_t n;
            for (int k = 0; k < 3; k++) {
                CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &pl[k]));
                ct_optim_opts o;
                ct_optim_opts_default(&o, kinds[c]);
                o.momentum = kinds[c] == CT_OPTIM_SGD ? 0.9f : 0.0f;
                o.weight_decay = k == 1 ? 0.0f : 0.1f;
                o.no_decay_bias_norm = k == 0;
                CHECK_OK(ctx, ct_optimizer_create(pl[k], &o, &op[k]));
                ct_plan_param_arena(pl[k], &w[k], &g[k], &n);
                test_fill_uniform(w[k], n, 7, -1, 1);
            }
            float lrs, wd;
            CHECK_OK(ctx, ct_optimizer_param_hp(op[0], 1, &lrs, &wd));
            CHECK(lrs == 1.0f && wd == 0.0f);
            CHECK_OK(ctx, ct_optimizer_param_hp(op[0], 0, &lrs, &wd));
            CHECK(lrs == 1.0f && wd == 0.1f);
            for (int it = 0; it < 5; it++)
                for (int k = 0; k < 3; k++) {
                    test_fill_uniform(g[k], n, 100 + (unsigned)it, -1, 1);
                    CHECK_OK(ctx, ct_optimizer_set_lr(op[k], 0.01f));
                    CHECK_OK(ctx, use_ref ? ct_optimizer_step_ref(op[k]) : ct_optimizer_step(op[k]));
                }
            double worst = 0, apart = 0;
            for (int i = 0; i < 3; i++) {
                ct_tensor v0, vr;
                const char *name;
                CHECK_OK(ctx, ct_plan_param_info(pl[0], i, &name, &v0, NULL));
                int ref = v0.ndim == 1 ? 1 : 2; /* the plan to match */
                CHECK_OK(ctx, ct_plan_param_info(pl[ref], i, NULL, &vr, NULL));
                size_t len = (size_t)ct_tensor_numel(&v0);
                worst = fmax(worst, tensor_rel(v0.data, vr.data, len));
                ct_tensor vo; /* and it differs from the other plan */
                CHECK_OK(ctx, ct_plan_param_info(pl[3 - ref], i, NULL, &vo, NULL));
                apart = fmax(apart, tensor_rel(v0.data, vo.data, len));
            }
            CHECK_MSG(worst <= 1e-6, "%s (%s): %g", ct_optim_kind_name(kinds[c]), use_ref ? "ref" : "fast", worst);
            CHECK_MSG(apart > 1e-5, "%s: weight decay made no difference (%g)", ct_optim_kind_name(kinds[c]), apart);
            if (!use_ref)
                printf("    %-8s no_decay_bias_norm vs separate optimizers: %.3g (decay changes %.3g)\n",
                       ct_optim_kind_name(kinds[c]), worst, apart);
            for (int k = 0; k < 3; k++) {
                ct_optimizer_free(op[k]);
                ct_plan_free(pl[k]);
            }
            ct_context_free(ctx);
        }
}

/* Prefix groups: per-group lr multiplier and weight decay. SGD against the
 * closed form; AdamW against separate optimizers with lr * scale. */
TEST(param_groups_by_prefix) {
    int nd[3] = {2, 1, 2};
    int64_t shapes[3][4] = {{40, 30}, {30}, {20, 9}};
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p;
    CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &p));
    ct_optim_opts o;
    ct_optim_opts_default(&o, CT_OPTIM_SGD);
    o.lr = 0.1f;
    o.weight_decay = 0.01f;
    ct_optimizer *opt;
    CHECK_OK(ctx, ct_optimizer_create(p, &o, &opt));
    ct_mem_stats m0, m1;
    ct_context_mem_stats(ctx, &m0);
    CHECK_OK(ctx, ct_optimizer_set_group(opt, "w", 1.0f, 0.02f)); /* all */
    CHECK_OK(ctx, ct_optimizer_set_group(opt, "w0", 2.0f, -1.0f)); /* keeps 0.02 */
    CHECK_OK(ctx, ct_optimizer_set_group(opt, "w2", 0.5f, 0.0f));
    ct_context_mem_stats(ctx, &m1);
    CHECK(m1.n_allocs == m0.n_allocs);
    const float want_lr[3] = {2.0f, 1.0f, 0.5f}, want_wd[3] = {0.02f, 0.02f, 0.0f};
    for (int i = 0; i < 3; i++) {
        float l, w;
        const char *name;
        CHECK_OK(ctx, ct_plan_param_info(p, i, &name, NULL, NULL));
        CHECK_OK(ctx, ct_optimizer_param_hp(opt, i, &l, &w));
        int k = name[1] - '0';
        CHECK_MSG(l == want_lr[k] && w == want_wd[k], "%s: lr_scale %g wd %g", name, (double)l, (double)w);
    }
    float *w, *g;
    size_t n;
    ct_plan_param_arena(p, &w, &g, &n);
    test_fill_uniform(w, n, 3, -1, 1);
    test_fill_uniform(g, n, 4, -1, 1);
    float *before = malloc(n * sizeof *before);
    memcpy(before, w, n * sizeof *w);
    CHECK_OK(ctx, ct_optimizer_set_lr(opt, 0.1f));
    CHECK_OK(ctx, ct_optimizer_step(opt));
    for (int i = 0; i < 3; i++) {
        const char *name;
        ct_tensor v, gt;
        CHECK_OK(ctx, ct_plan_param_info(p, i, &name, &v, &gt));
        int k = name[1] - '0';
        size_t off = (size_t)((float *)v.data - w);
        const float *gg = gt.data, *pv = v.data;
        float lr = 0.1f * want_lr[k];
        for (int64_t j = 0; j < ct_tensor_numel(&v); j++) {
            float p0 = before[off + (size_t)j];
            float want = p0 - lr * (gg[j] + want_wd[k] * p0);
            CHECK_MSG(fabsf(pv[j] - want) <= 1e-6f * fmaxf(fabsf(want), 1.0f), "%s[%lld]: %.9g vs %.9g", name,
                      (long long)j, (double)pv[j], (double)want);
        }
    }
    /* errors: a typo, bad values */
    CHECK(ct_optimizer_set_group(opt, "fc.", 1.0f, 0.0f) == CT_E_INVALID_ARG);
    CHECK_MSG(contains(ct_context_last_error(ctx), "no parameter name starts with 'fc.'"), "%s",
              ct_context_last_error(ctx));
    CHECK(ct_optimizer_set_group(opt, "w", -1.0f, 0.0f) == CT_E_INVALID_ARG);
    CHECK(contains(ct_context_last_error(ctx), "lr_scale"));
    CHECK(ct_optimizer_set_group(opt, "w", 1.0f, NAN) == CT_E_INVALID_ARG);
    CHECK(ct_optimizer_param_hp(opt, 3, NULL, NULL) == CT_E_INVALID_ARG);
    free(before);
    ct_optimizer_free(opt);
    ct_plan_free(p);

    /* AdamW: a group with lr_scale 0.5 and wd 0.3 on w0 equals an optimizer
     * with lr * 0.5 and wd 0.3 (w0), the rest equals the base optimizer. */
    ct_plan *pa, *pb, *pc;
    CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &pa));
    CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &pb));
    CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &pc));
    ct_optimizer *oa, *ob, *oc;
    ct_optim_opts_default(&o, CT_OPTIM_ADAMW);
    CHECK_OK(ctx, ct_optimizer_create(pa, &o, &oa));
    CHECK_OK(ctx, ct_optimizer_create(pb, &o, &ob));
    CHECK_OK(ctx, ct_optimizer_set_group(oa, "w0", 0.5f, 0.3f));
    o.weight_decay = 0.3f;
    CHECK_OK(ctx, ct_optimizer_create(pc, &o, &oc));
    float *wa, *ga, *wb, *gb, *wc, *gc;
    ct_plan_param_arena(pa, &wa, &ga, &n);
    ct_plan_param_arena(pb, &wb, &gb, &n);
    ct_plan_param_arena(pc, &wc, &gc, &n);
    test_fill_uniform(wa, n, 5, -1, 1);
    memcpy(wb, wa, n * sizeof *wa);
    memcpy(wc, wa, n * sizeof *wa);
    for (int it = 0; it < 4; it++) {
        test_fill_uniform(ga, n, 60 + (unsigned)it, -1, 1);
        memcpy(gb, ga, n * sizeof *ga);
        memcpy(gc, ga, n * sizeof *ga);
        CHECK_OK(ctx, ct_optimizer_set_lr(oa, 1e-2f));
        CHECK_OK(ctx, ct_optimizer_step(oa));
        CHECK_OK(ctx, ct_optimizer_set_lr(ob, 1e-2f));
        CHECK_OK(ctx, ct_optimizer_step(ob));
        CHECK_OK(ctx, ct_optimizer_set_lr(oc, 0.5f * 1e-2f));
        CHECK_OK(ctx, ct_optimizer_step(oc));
    }
    for (int i = 0; i < 3; i++) {
        const char *name;
        ct_tensor va, vr;
        CHECK_OK(ctx, ct_plan_param_info(pa, i, &name, &va, NULL));
        CHECK_OK(ctx, ct_plan_param_info(!strcmp(name, "w0") ? pc : pb, i, NULL, &vr, NULL));
        double e = tensor_rel(va.data, vr.data, (size_t)ct_tensor_numel(&va));
        CHECK_MSG(e <= 1e-6, "adamw group %s: %g", name, e);
    }
    ct_optimizer_free(oa);
    ct_optimizer_free(ob);
    ct_optimizer_free(oc);
    ct_plan_free(pa);
    ct_plan_free(pb);
    ct_plan_free(pc);
    ct_context_free(ctx);
}

/* The optimizer owns its learning rate: it starts at opts.lr, set_lr
 * changes it (bad values rejected, rate unchanged), step uses it. SGD
 * without momentum: p -= lr * g exactly. */
TEST(optimizer_owns_its_learning_rate) {
    int nd[1] = {1};
    int64_t shapes[1][4] = {{37}};
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p;
    CHECK_OK(ctx, test_params_plan(ctx, 1, nd, (const int64_t(*)[4])shapes, &p));
    ct_optim_opts o;
    ct_optim_opts_default(&o, CT_OPTIM_SGD);
    o.lr = 0.25f;
    ct_optimizer *opt;
    CHECK_OK(ctx, ct_optimizer_create(p, &o, &opt));
    CHECK(ct_optimizer_lr(opt) == 0.25f);
    float *w, *g;
    size_t n;
    ct_plan_param_arena(p, &w, &g, &n);
    test_fill_uniform(w, n, 7, -1, 1);
    test_fill_uniform(g, n, 8, -1, 1);
    float *before = malloc(n * sizeof *before);
    memcpy(before, w, n * sizeof *w);
    CHECK_OK(ctx, ct_optimizer_step(opt)); /* at opts.lr */
    int ok = 1;
    for (size_t i = 0; i < 37; i++) ok &= w[i] == before[i] - 0.25f * g[i];
    CHECK(ok);
    CHECK_OK(ctx, ct_optimizer_set_lr(opt, 0.125f));
    CHECK(ct_optimizer_lr(opt) == 0.125f);
    ct_optim_opts got;
    CHECK_OK(ctx, ct_optimizer_get_opts(opt, &got));
    CHECK(got.lr == 0.125f && got.kind == CT_OPTIM_SGD);
    memcpy(before, w, n * sizeof *w);
    CHECK_OK(ctx, ct_optimizer_step_ref(opt));
    for (size_t i = 0; i < 37; i++) ok &= w[i] == before[i] - 0.125f * g[i];
    CHECK(ok);
    /* bad rates are rejected with a message and leave the rate as it was */
    CHECK(ct_optimizer_set_lr(opt, -1.0f) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "lr"));
    CHECK(ct_optimizer_set_lr(opt, NAN) == CT_E_INVALID_ARG);
    CHECK(ct_optimizer_set_lr(opt, INFINITY) == CT_E_INVALID_ARG);
    CHECK(ct_optimizer_lr(opt) == 0.125f);
    /* lr 0: a step that changes nothing (SGD without weight decay) */
    CHECK_OK(ctx, ct_optimizer_set_lr(opt, 0.0f));
    memcpy(before, w, n * sizeof *w);
    CHECK_OK(ctx, ct_optimizer_step(opt));
    CHECK(!memcmp(before, w, 37 * sizeof *w));
    CHECK(ct_optimizer_steps(opt) == 3);
    CHECK(ct_optimizer_step(NULL) == CT_E_INVALID_ARG && ct_optimizer_set_lr(NULL, 1.0f) == CT_E_INVALID_ARG);
    free(before);
    ct_optimizer_free(opt);
    ct_plan_free(p);
    ct_context_free(ctx);
}

/* LAMB's reduce hook (ct_optimizer_set_reduce, ZeRO): on the whole arena it gets each tensor's sums of w^2 (checked
 * against the weights before the step) and u^2, once per step, and a hook that returns them unchanged leaves the
 * step bit for bit as without one; its error ends the step; a shard without a hook is CT_E_STATE. */
typedef struct {
    int calls;
    size_t n;
    const float *w_before;
    const size_t *off, *len;
    int wrong_ww, nonpositive_uu;
    ct_status ret;
} reduce_probe;

static ct_status probe_reduce(void *user, double *x, size_t n) {
    reduce_probe *r = user;
    r->calls++;
    r->n = n;
    for (size_t i = 0; i < n / 2 && i < 3; i++) {
        double ww = 0;
        for (size_t k = 0; k < r->len[i]; k++) ww += (double)r->w_before[r->off[i] + k] * r->w_before[r->off[i] + k];
        r->wrong_ww += fabs(x[2 * i] - ww) > 1e-5 * ww; /* the SIMD kernels sum in float lanes */
        r->nonpositive_uu += !(x[2 * i + 1] > 0);
    }
    return r->ret;
}

TEST(lamb_reduce_hook) {
    int nd[3] = {2, 1, 2};
    int64_t shapes[3][4] = {{90, 70}, {30}, {20, 9}}; /* w0: 6300 floats, two LAMB blocks */
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p1, *p2;
    CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &p1));
    CHECK_OK(ctx, test_params_plan(ctx, 3, nd, (const int64_t(*)[4])shapes, &p2));
    ct_optim_opts o;
    ct_optim_opts_default(&o, CT_OPTIM_LAMB);
    o.lr = 0.01f;
    o.weight_decay = 0.05f;
    o.no_decay_bias_norm = 1;
    ct_optimizer *plain, *hooked;
    CHECK_OK(ctx, ct_optimizer_create(p1, &o, &plain));
    CHECK_OK(ctx, ct_optimizer_create(p2, &o, &hooked));
    CHECK_OK(ctx, ct_optimizer_set_group(plain, "w2", 0.5f, 0.2f));
    CHECK_OK(ctx, ct_optimizer_set_group(hooked, "w2", 0.5f, 0.2f));
    float *w1, *g1, *w2, *g2;
    size_t n, off[3], len[3];
    ct_plan_param_arena(p1, &w1, &g1, &n);
    ct_plan_param_arena(p2, &w2, &g2, &n);
    for (int i = 0; i < 3; i++) {
        ct_tensor v;
        CHECK_OK(ctx, ct_plan_param_info(p2, i, NULL, &v, NULL));
        off[i] = (size_t)((float *)v.data - w2);
        len[i] = (size_t)ct_tensor_numel(&v);
    }
    float *before = malloc(n * sizeof *before);
    CHECK(before);
    reduce_probe r = {0, 0, before, off, len, 0, 0, CT_OK};
    CHECK_OK(ctx, ct_optimizer_set_reduce(hooked, probe_reduce, &r));
    test_fill_uniform(w1, n, 3, -1, 1);
    memcpy(w2, w1, n * sizeof *w1);
    for (int it = 0; it < 3; it++) {
        test_fill_uniform(g1, n, 50 + (unsigned)it, -1, 1);
        memcpy(g2, g1, n * sizeof *g1);
        memcpy(before, w2, n * sizeof *w2);
        CHECK_OK(ctx, ct_optimizer_step(plain));
        CHECK_OK(ctx, ct_optimizer_step(hooked));
    }
    int same = !memcmp(w1, w2, n * sizeof *w1), moved = memcmp(w2, before, n * sizeof *w2) != 0;
    CHECK_MSG(r.calls == 3 && r.n == 6, "the hook: %d calls with n %zu (want 3, 6)", r.calls, r.n);
    CHECK_MSG(!r.wrong_ww && !r.nonpositive_uu, "the sums handed to the hook: %d wrong w^2, %d u^2 <= 0", r.wrong_ww,
              r.nonpositive_uu);
    CHECK_MSG(same && moved, "a hook that sums over one rank changes the step (same %d, moved %d)", same, moved);
    /* the hook's error ends the step with it */
    r.ret = CT_E_IO;
    CHECK(ct_optimizer_step(hooked) == CT_E_IO && r.calls == 4);
    /* other optimizers never call it */
    ct_optimizer *sgd;
    ct_optim_opts so;
    ct_optim_opts_default(&so, CT_OPTIM_SGD);
    CHECK_OK(ctx, ct_optimizer_create(p1, &so, &sgd));
    CHECK_OK(ctx, ct_optimizer_set_reduce(sgd, probe_reduce, &r));
    CHECK_OK(ctx, ct_optimizer_step(sgd));
    CHECK(r.calls == 4);
    ct_optimizer_free(sgd);
    /* a sharded LAMB without a hook: CT_E_STATE naming the call; with one removed (NULL) the same */
    ct_optimizer *sh;
    CHECK_OK(ctx, ct_optimizer_create_shard(p2, &o, 64, 4096 + 64, &sh));
    ct_status s = ct_optimizer_step(sh);
    CHECK_MSG(s == CT_E_STATE && strstr(ct_context_last_error(ctx), "ct_optimizer_set_reduce"), "got %s: %s",
              ct_status_name(s), ct_context_last_error(ctx));
    CHECK(ct_optimizer_steps(sh) == 0);
    CHECK_OK(ctx, ct_optimizer_set_shard(hooked, 64, 128));
    CHECK_OK(ctx, ct_optimizer_set_reduce(hooked, NULL, NULL));
    CHECK(ct_optimizer_step(hooked) == CT_E_STATE);
    CHECK(ct_optimizer_set_reduce(NULL, probe_reduce, &r) == CT_E_INVALID_ARG);
    free(before);
    ct_optimizer_free(sh);
    ct_optimizer_free(plain);
    ct_optimizer_free(hooked);
    ct_plan_free(p1);
    ct_plan_free(p2);
    ct_context_free(ctx);
}

TEST_MAIN(T(optimizers_match_pytorch), T(optimizers_fast_match_reference), T(optimizers_validate_with_field_names),
          T(optimizer_step_allocates_nothing), T(param_groups_no_decay_bias_norm), T(param_groups_by_prefix),
          T(optimizer_owns_its_learning_rate),
          T(lamb_reduce_hook))
