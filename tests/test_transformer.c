/* tests/test_transformer.c - the GPT and BERT builders (src/models/transformer.c).
 *
 * Golden: scripts/make_transformer_golden.py defines the same models in
 * PyTorch (same parameter names and layouts) and stores weights, batch,
 * labels, loss, logits and every gradient (tests/golden/gpt2l.ctg,
 * bert2l.ctg). Here the ctrain model loads them by name, runs one
 * forward(training) + backward with loss = cross_entropy(logits (B*T, V),
 * labels (B*T), ignore_index -100), and every tensor must be within
 *     max|ctrain - golden| / max|golden| <= 1e-5
 * in the reference, AVX2 (no oneDNN) and default (oneDNN + best SIMD)
 * contexts. Also: presets and parameter counts (GPT-2 124M, BERT base and
 * large as Hugging Face counts them), init, and errors for bad inputs. */
#include <stdint.h>

#include "golden.h"

/* ---- golden runs ------------------------------------------------------------------------------ */

static int meta1(const gold_file *f, const char *name, int64_t *out) {
    int32_t v;
    if (!meta_i32(f, name, &v, 1, NULL)) return 0;
    *out = v;
    return 1;
}

static void run_tf(const char *file, int bert, const char *ctx_name, int isa, int use_onednn, int bf16) {
    char label[64];
    run_state s;
    ct_context *ctx = NULL;
    ct_graph *g = NULL;
    ct_plan *p = NULL;
    gold_file *f = run_begin(&s, label, file, ctx_name);
    if (!f) goto done;
    ctx = test_ctx(isa, use_onednn);
    const gold_rec *ids_rec = gold_get(f, "ids"), *eps_rec = gold_get(f, "meta.ln_eps");
    int64_t V, C, L, H, D, FF = 0, TV = 0, bias = 1, tanh_ = 0, ignore;
    int ok = ids_rec && ids_rec->ndim == 2 && meta1(f, "meta.vocab", &V) && meta1(f, "meta.context", &C) &&
             meta1(f, "meta.n_layer", &L) && meta1(f, "meta.n_head", &H) && meta1(f, "meta.d_model", &D) &&
             meta1(f, "meta.ignore_index", &ignore);
    if (bert) ok = ok && meta1(f, "meta.d_ff", &FF) && meta1(f, "meta.type_vocab", &TV) && eps_rec && eps_rec->numel == 1;
    else ok = ok && meta1(f, "meta.bias", &bias) && meta1(f, "meta.gelu_tanh", &tanh_);
    if (!ok) {
        run_fail(&s, "golden file %s lacks meta records or ids", file);
        goto done;
    }
    int64_t B = ids_rec->dims[0], T = ids_rec->dims[1];
    ct_node ids, labels, kv = CT_NONE, logits, flat, lab1, loss;
    ct_status st;
    GOLD_TRY(ct_graph_create(ctx, &g));
    GOLD_TRY(ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, T}, &ids));
    GOLD_TRY(ct_input(g, "labels", CT_I32, 2, (int64_t[]){B, T}, &labels));
    if (bert) {
        GOLD_TRY(ct_input(g, "key_valid", CT_I32, 2, (int64_t[]){B, T}, &kv));
        ct_bert_config c = {V, C, (int)L, (int)H, D, FF, TV, 0.0f, *(const float *)eps_rec->data};
        GOLD_TRY(ct_model_bert(g, ids, kv, CT_NONE, CT_NONE, &c, &logits));
    } else {
        ct_gpt_config c = {V, C, (int)L, (int)H, D, 0.0f, (int)bias, (int)tanh_};
        GOLD_TRY(ct_model_gpt(g, ids, &c, &logits));
    }
    GOLD_TRY(ct_reshape(g, logits, 2, (int64_t[]){B * T, V}, &flat));
    GOLD_TRY(ct_reshape(g, labels, 1, (int64_t[]){B * T}, &lab1));
    GOLD_TRY(ct_cross_entropy(g, flat, lab1, 0.0f, (int)ignore, &loss));
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    if (bf16) co.precision = CT_PRECISION_BF16;
    GOLD_TRY(ct_compile(g, loss, 1, &logits, &co, &p));

    if (!load_params(&s, f, p)) goto done;
    ct_tensor t;
    GOLD_TRY(ct_plan_tensor(p, ids, &t));
    if (!load_into(&s, f, "ids", &t)) goto done;
    GOLD_TRY(ct_plan_tensor(p, labels, &t));
    if (!load_into(&s, f, "labels", &t)) goto done;
    if (bert) {
        GOLD_TRY(ct_plan_tensor(p, kv, &t));
        if (!load_into(&s, f, "key_valid", &t)) goto done;
    }
    float *grads;
    size_t ng;
    GOLD_TRY(ct_plan_param_arena(p, NULL, &grads, &ng));
    for (size_t i = 0; i < ng; i++) grads[i] = NAN; /* a gradient never written shows up */
    GOLD_TRY(ct_plan_forward(p, 1));
    GOLD_TRY(ct_plan_backward(p));
    print_kernels(&s, g, p);

    if (bf16) {
        compare_lowp(&s, f, p, GOLDEN_BF16_TOL); /* golden.h */
        goto done;
    }
    float lv;
    GOLD_TRY(ct_plan_loss(p, &lv));
    ct_tensor tl = ct_tensor_make(&lv, CT_F32, 0, NULL);
    compare(&s, f, "loss", &tl);
    GOLD_TRY(ct_plan_tensor(p, logits, &t));
    compare(&s, f, "logits", &t);
    if (!compare_grads(&s, f, p)) goto done;
    s.completed = 1;
done:
    run_close(&s, __FILE__, __LINE__, p, g, ctx, f);
}

#define CASE(fn, file, bert, ctxname, isa, dnnl) \
    TEST(fn) { run_tf(file, bert, ctxname, isa, dnnl, 0); }
TEST(gpt_golden_bf16) { run_tf("gpt2l.ctg", 0, "bf16", -1, 1, 1); }
TEST(bert_golden_bf16) { run_tf("bert2l.ctg", 1, "bf16", -1, 1, 1); }

CASE(gpt_golden_ref, "gpt2l.ctg", 0, "ref", CT_ISA_REF, 0)
CASE(gpt_golden_avx2, "gpt2l.ctg", 0, "avx2", CT_ISA_AVX2, 0)
CASE(gpt_golden_default, "gpt2l.ctg", 0, "default", -1, 1)
CASE(bert_golden_ref, "bert2l.ctg", 1, "ref", CT_ISA_REF, 0)
CASE(bert_golden_avx2, "bert2l.ctg", 1, "avx2", CT_ISA_AVX2, 0)
CASE(bert_golden_default, "bert2l.ctg", 1, "default", -1, 1)

/* ---- presets and parameter counts --------------------------------------------------------------- */

/* sum of the parameter nodes' sizes; *has_bias: some param name ends in ".bias" */
static int64_t graph_params(ct_graph *g, int *has_bias) {
    int64_t n = 0;
    if (has_bias) *has_bias = 0;
    for (int i = 0; i < ct_graph_num_nodes(g); i++) {
        if (strcmp(ct_node_op_name(g, i), "param")) continue;
        int nd;
        int64_t s[CT_MAX_DIMS], e = 1;
        ct_node_shape(g, i, &nd, s);
        for (int d = 0; d < nd; d++) e *= s[d];
        n += e;
        const char *nm = ct_node_name(g, i);
        if (has_bias && strlen(nm) > 5 && !strcmp(nm + strlen(nm) - 5, ".bias")) *has_bias = 1;
    }
    return n;
}

static int has_param(ct_graph *g, const char *name) {
    for (int i = 0; i < ct_graph_num_nodes(g); i++)
        if (!strcmp(ct_node_op_name(g, i), "param") && !strcmp(ct_node_name(g, i), name)) return 1;
    return 0;
}

TEST(param_counts) {
    ct_context *ctx = test_ctx(CT_ISA_REF, 0);
    static const struct {
        const char *preset;
        int bert;
        int64_t want;
    } k[] = {{"gpt2-124m", 0, 124439808}, {"gpt-char-small", 0, -1}, {"bert-base", 1, 109514298}, {"bert-large", 1, 335174458}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        ct_graph *g;
        ct_node ids, kv, out;
        int64_t counted;
        CHECK_OK(ctx, ct_graph_create(ctx, &g));
        CHECK_OK(ctx, ct_input(g, "ids", CT_I32, 2, (int64_t[]){2, 16}, &ids));
        if (k[i].bert) {
            ct_bert_config c;
            CHECK_OK(ctx, ct_bert_preset(ctx, k[i].preset, &c));
            CHECK_OK(ctx, ct_input(g, "key_valid", CT_I32, 2, (int64_t[]){2, 16}, &kv));
            CHECK_OK(ctx, ct_model_bert(g, ids, kv, CT_NONE, CT_NONE, &c, &out));
            counted = ct_bert_num_params(&c);
            CHECK(has_param(g, "bert.encoder.layer.0.attention.qkv.weight") && has_param(g, "cls.predictions.bias") &&
                  has_param(g, "cls.predictions.transform.LayerNorm.weight"));
        } else {
            ct_gpt_config c;
            CHECK_OK(ctx, ct_gpt_preset(ctx, k[i].preset, &c));
            CHECK_OK(ctx, ct_model_gpt(g, ids, &c, &out));
            counted = ct_gpt_num_params(&c);
            char nm[64];
            snprintf(nm, sizeof nm, "transformer.h.%d.mlp.c_proj.weight", c.n_layer - 1);
            CHECK(has_param(g, "transformer.wte.weight") && has_param(g, nm) && !has_param(g, "lm_head.weight"));
        }
        int64_t in_graph = graph_params(g, NULL);
        int nd;
        int64_t s[CT_MAX_DIMS];
        CHECK_OK(ctx, ct_node_shape(g, out, &nd, s));
        printf("    %-15s %lld parameters (graph), %lld (formula), logits (%lld, %lld, %lld)\n", k[i].preset,
               (long long)in_graph, (long long)counted, (long long)s[0], (long long)s[1], (long long)s[2]);
        CHECK(in_graph == counted);
        CHECK(k[i].want < 0 || in_graph == k[i].want);
        ct_graph_free(g);
    }
    ct_context_free(ctx);
}

TEST(presets_and_no_bias) {
    ct_context *ctx = test_ctx(CT_ISA_REF, 0);
    ct_gpt_config c;
    CHECK_OK(ctx, ct_gpt_preset(ctx, "gpt-char-small", &c));
    CHECK(c.n_layer == 6 && c.n_head == 6 && c.d_model == 384 && c.context == 256 && c.vocab == 65 &&
          c.dropout == 0.2f && c.bias == 1 && c.gelu_tanh == 0);
    CHECK_OK(ctx, ct_gpt_preset(ctx, "gpt2-124m", &c));
    CHECK(c.gelu_tanh == 1 && c.context == 1024 && c.vocab == 50257);
    ct_bert_config bc;
    CHECK_OK(ctx, ct_bert_preset(ctx, "bert-large", &bc));
    CHECK(bc.n_layer == 24 && bc.n_head == 16 && bc.d_model == 1024 && bc.d_ff == 4096 && bc.ln_eps == 1e-12f);
    /* bias = 0: no bias anywhere (LayerNorm without bias), the count still matches */
    ct_graph *g;
    ct_node ids, out;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    CHECK_OK(ctx, ct_input(g, "ids", CT_I32, 2, (int64_t[]){2, 8}, &ids));
    ct_gpt_config nb = {50, 8, 2, 2, 16, 0.1f, 0, 1};
    CHECK_OK(ctx, ct_model_gpt(g, ids, &nb, &out));
    int has_bias;
    CHECK(graph_params(g, &has_bias) == ct_gpt_num_params(&nb));
    CHECK(!has_bias);
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* N(0, 0.02) weights, N(0, 0.02/sqrt(2 n_layer)) for c_proj, zero biases, LayerNorm ones */
TEST(gpt_init) {
    ct_context *ctx = test_ctx(-1, 0);
    ct_graph *g;
    ct_node ids, out;
    ct_plan *p;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    CHECK_OK(ctx, ct_input(g, "ids", CT_I32, 2, (int64_t[]){1, 8}, &ids));
    ct_gpt_config c = {100, 16, 4, 4, 128, 0.0f, 1, 0};
    CHECK_OK(ctx, ct_model_gpt(g, ids, &c, &out));
    CHECK_OK(ctx, ct_compile(g, CT_NONE, 1, &out, NULL, &p));
    ct_graph_free(g);
    for (int i = 0; i < ct_plan_num_params(p); i++) {
        const char *nm;
        ct_tensor v;
        CHECK_OK(ctx, ct_plan_param_info(p, i, &nm, &v, NULL));
        int64_t n = ct_tensor_numel(&v);
        double s = 0, s2 = 0;
        for (int64_t j = 0; j < n; j++) {
            s += ((float *)v.data)[j];
            s2 += (double)((float *)v.data)[j] * ((float *)v.data)[j];
        }
        double mean = s / (double)n, sd = sqrt(s2 / (double)n - mean * mean);
        double want = strstr(nm, "ln_") && strstr(nm, ".weight") ? -1.0
                      : strstr(nm, ".bias")                       ? 0.0
                      : strstr(nm, "c_proj")                      ? 0.02 / sqrt(8.0)
                                                                  : 0.02;
        if (want < 0) CHECK(mean == 1.0 && sd == 0.0);
        else if (want == 0) CHECK(mean == 0.0 && sd == 0.0);
        else CHECK_MSG(fabs(sd - want) < 0.06 * want && fabs(mean) < 0.1 * want, "%s: mean %g sd %g, want sd %g", nm,
                       mean, sd, want);
        if (i < 3 || strstr(nm, "h.0.attn.c_proj.weight")) printf("    %-36s mean %+.5f sd %.5f\n", nm, mean, sd);
    }
    ct_plan_free(p);
    ct_context_free(ctx);
}

/* recompute_every = 1 (attention recomputed in backward) gives bit-identical gradients */
static ct_status gpt_plan(ct_context *ctx, int recompute, ct_plan **p, ct_node *ids, ct_node *lab) {
    ct_graph *g;
    ct_node logits, flat, loss;
    ct_gpt_config c = {50, 16, 3, 4, 32, 0.1f, 1, 1};
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    s = ct_input(g, "ids", CT_I32, 2, (int64_t[]){2, 12}, ids);
    if (s == CT_OK) s = ct_input(g, "labels", CT_I32, 1, (int64_t[]){24}, lab);
    if (s == CT_OK) s = ct_model_gpt(g, *ids, &c, &logits);
    if (s == CT_OK) s = ct_reshape(g, logits, 2, (int64_t[]){24, 50}, &flat);
    if (s == CT_OK) s = ct_cross_entropy(g, flat, *lab, 0.0f, -100, &loss);
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.recompute_every = recompute;
    if (s == CT_OK) s = ct_compile(g, loss, 0, NULL, &o, p);
    ct_graph_free(g);
    if (s != CT_OK) return s;
    ct_tensor t;
    ct_plan_tensor(*p, *ids, &t);
    for (int i = 0; i < 24; i++) ((int32_t *)t.data)[i] = (i * 7 + 3) % 50;
    ct_plan_tensor(*p, *lab, &t);
    for (int i = 0; i < 24; i++) ((int32_t *)t.data)[i] = (i * 11 + 5) % 50;
    s = ct_plan_forward(*p, 1);
    return s == CT_OK ? ct_plan_backward(*p) : s;
}

TEST(gpt_recompute_bit_exact) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_plan *p0 = NULL, *p1 = NULL;
    ct_node ids, lab;
    CHECK_OK(ctx, gpt_plan(ctx, 0, &p0, &ids, &lab));
    CHECK_OK(ctx, gpt_plan(ctx, 1, &p1, &ids, &lab));
    float *g0, *g1;
    size_t n0, n1;
    CHECK_OK(ctx, ct_plan_param_arena(p0, NULL, &g0, &n0));
    CHECK_OK(ctx, ct_plan_param_arena(p1, NULL, &g1, &n1));
    CHECK(n0 == n1 && !memcmp(g0, g1, n0 * sizeof *g0));
    ct_plan_stats s0, s1;
    ct_plan_get_stats(p0, &s0);
    ct_plan_get_stats(p1, &s1);
    printf("    activations %zu bytes -> %zu with recompute_every=1, gradients identical\n", s0.activation_bytes,
           s1.activation_bytes);
    ct_plan_free(p0);
    ct_plan_free(p1);
    ct_context_free(ctx);
}

/* ---- bad inputs ---------------------------------------------------------------------------------- */

static void expect_error(ct_context *ctx, ct_status s, ct_status want, const char *needle) {
    const char *msg = ct_context_last_error(ctx);
    printf("    %s: %s\n", ct_status_name(s), msg);
    if (s != want || !strstr(msg, needle)) {
        fprintf(stderr, "  expected %s with '%s', got %s: %s\n", ct_status_name(want), needle, ct_status_name(s), msg);
        ct_test_failed_checks++;
    }
}

TEST(bad_inputs) {
    ct_context *ctx = test_ctx(CT_ISA_REF, 0);
    ct_graph *g;
    ct_node ids, long_ids, fids, kv_bad, out;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    CHECK_OK(ctx, ct_input(g, "ids", CT_I32, 2, (int64_t[]){2, 8}, &ids));
    CHECK_OK(ctx, ct_input(g, "long_ids", CT_I32, 2, (int64_t[]){2, 33}, &long_ids));
    CHECK_OK(ctx, ct_input(g, "float_ids", CT_F32, 2, (int64_t[]){2, 8}, &fids));
    CHECK_OK(ctx, ct_input(g, "kv_bad", CT_I32, 2, (int64_t[]){2, 7}, &kv_bad));
    ct_gpt_config c = {67, 32, 2, 4, 48, 0.0f, 1, 0};
    expect_error(ctx, ct_model_gpt(g, long_ids, &c, &out), CT_E_SHAPE,
                 "sequence length T=33 is longer than the model's context 32");
    expect_error(ctx, ct_model_gpt(g, fids, &c, &out), CT_E_DTYPE, "must be i32 token ids (B, T)");
    c.d_model = 50;
    expect_error(ctx, ct_model_gpt(g, ids, &c, &out), CT_E_SHAPE, "d_model 50 is not divisible by n_head 4");
    c.d_model = 48;
    c.dropout = 1.0f;
    expect_error(ctx, ct_model_gpt(g, ids, &c, &out), CT_E_INVALID_ARG, "dropout 1 must be in [0, 1)");
    ct_gpt_config pc;
    expect_error(ctx, ct_gpt_preset(ctx, "gpt3", &pc), CT_E_INVALID_ARG, "valid presets: gpt-char-small, gpt2-124m");
    ct_bert_config bc;
    expect_error(ctx, ct_bert_preset(ctx, "bert-huge", &bc), CT_E_INVALID_ARG, "valid presets: bert-base, bert-large");
    bc = (ct_bert_config){71, 40, 2, 4, 48, 96, 2, 0.0f, 1e-12f};
    expect_error(ctx, ct_model_bert(g, ids, kv_bad, CT_NONE, CT_NONE, &bc, &out), CT_E_SHAPE, "key_valid 'kv_bad'");
    bc.context = 7;
    expect_error(ctx, ct_model_bert(g, ids, CT_NONE, CT_NONE, CT_NONE, &bc, &out), CT_E_SHAPE, "T=8 is longer than the model's context 7");
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* BERT's optional token_type_ids / position_ids: explicit zeros and
 * arange(T) give the CT_NONE logits bit for bit (and the same gradients up
 * to summation order: the tables' gradients come from embedding_bwd instead
 * of a broadcast sum), and another token type changes the output. */
typedef struct {
    ct_plan *plan;
    ct_node ids, tt, pos, logits;
} bert_rig;

static ct_status bert_rig_build(ct_context *ctx, int with_tt, int pos_kind, bert_rig *r) {
    /* pos_kind: 0 none, 1 (B, T), 2 (T) */
    ct_graph *g;
    ct_status s = ct_graph_create(ctx, &g);
    if (s != CT_OK) return s;
    const ct_bert_config bc = {53, 12, 2, 2, 16, 32, 2, 0.0f, 1e-12f};
    ct_node y, loss;
    r->tt = r->pos = CT_NONE;
    s = ct_input(g, "ids", CT_I32, 2, (int64_t[]){2, 9}, &r->ids);
    if (s == CT_OK && with_tt) s = ct_input(g, "token_type_ids", CT_I32, 2, (int64_t[]){2, 9}, &r->tt);
    if (s == CT_OK && pos_kind == 1) s = ct_input(g, "position_ids", CT_I32, 2, (int64_t[]){2, 9}, &r->pos);
    if (s == CT_OK && pos_kind == 2) s = ct_input(g, "position_ids", CT_I32, 1, (int64_t[]){9}, &r->pos);
    if (s == CT_OK) s = ct_input(g, "y", CT_I32, 2, (int64_t[]){2, 9}, &y);
    if (s == CT_OK) s = ct_model_bert(g, r->ids, CT_NONE, r->tt, r->pos, &bc, &r->logits);
    if (s == CT_OK) s = ct_cross_entropy(g, r->logits, y, 0.0f, -100, &loss);
    if (s == CT_OK) s = ct_compile(g, loss, 1, &r->logits, NULL, &r->plan);
    if (s == CT_OK) {
        ct_tensor t;
        ct_plan_tensor(r->plan, r->ids, &t);
        for (int i = 0; i < 18; i++) ((int32_t *)t.data)[i] = (i * 7 + 1) % 53;
        ct_plan_tensor(r->plan, y, &t);
        for (int i = 0; i < 18; i++) ((int32_t *)t.data)[i] = (i * 5 + 2) % 53;
        if (r->pos != CT_NONE) {
            ct_plan_tensor(r->plan, r->pos, &t);
            for (int64_t i = 0; i < ct_tensor_numel(&t); i++) ((int32_t *)t.data)[i] = (int32_t)(i % 9);
        }
        /* token types: zeros (the plan's inputs start zeroed; written anyway) */
        if (r->tt != CT_NONE) {
            ct_plan_tensor(r->plan, r->tt, &t);
            memset(t.data, 0, ct_tensor_nbytes(&t));
        }
    }
    ct_graph_free(g);
    return s;
}

TEST(bert_token_type_and_position_ids) {
    ct_context *ctx = test_ctx(-1, 1);
    bert_rig base, rigs[3];
    CHECK_OK(ctx, bert_rig_build(ctx, 0, 0, &base));
    CHECK_OK(ctx, bert_rig_build(ctx, 1, 0, &rigs[0]));
    CHECK_OK(ctx, bert_rig_build(ctx, 1, 1, &rigs[1]));
    CHECK_OK(ctx, bert_rig_build(ctx, 0, 2, &rigs[2]));
    float *w0;
    size_t n0;
    CHECK_OK(ctx, ct_plan_param_arena(base.plan, &w0, NULL, &n0));
    CHECK_OK(ctx, ct_plan_forward(base.plan, 1));
    CHECK_OK(ctx, ct_plan_backward(base.plan));
    ct_tensor l0;
    CHECK_OK(ctx, ct_plan_tensor(base.plan, base.logits, &l0));
    float *g0;
    CHECK_OK(ctx, ct_plan_param_arena(base.plan, NULL, &g0, NULL));
    for (int k = 0; k < 3; k++) {
        float *w, *gr;
        size_t n;
        CHECK_OK(ctx, ct_plan_param_arena(rigs[k].plan, &w, &gr, &n));
        CHECK(n == n0 && ct_plan_num_params(rigs[k].plan) == ct_plan_num_params(base.plan));
        memcpy(w, w0, n * sizeof(float));
        CHECK_OK(ctx, ct_plan_forward(rigs[k].plan, 1));
        CHECK_OK(ctx, ct_plan_backward(rigs[k].plan));
        ct_tensor l;
        CHECK_OK(ctx, ct_plan_tensor(rigs[k].plan, rigs[k].logits, &l));
        CHECK_MSG(!memcmp(l.data, l0.data, ct_tensor_nbytes(&l0)), "variant %d: logits differ from CT_NONE's", k);
        double e = test_max_rel(gr, g0, n, 1e-3);
        CHECK_MSG(e < 1e-4, "variant %d: gradients differ by %.3g", k, e);
    }
    /* token type 1 for one token changes that token's logits (and only
     * through attention the others') */
    ct_tensor t, l;
    CHECK_OK(ctx, ct_plan_tensor(rigs[0].plan, rigs[0].tt, &t));
    ((int32_t *)t.data)[4] = 1;
    CHECK_OK(ctx, ct_plan_forward(rigs[0].plan, 0));
    CHECK_OK(ctx, ct_plan_tensor(rigs[0].plan, rigs[0].logits, &l));
    CHECK(memcmp((float *)l.data + 4 * 53, (float *)l0.data + 4 * 53, 53 * sizeof(float)) != 0);
    /* a shifted position changes the output too */
    CHECK_OK(ctx, ct_plan_tensor(rigs[2].plan, rigs[2].pos, &t));
    ((int32_t *)t.data)[0] = 11;
    CHECK_OK(ctx, ct_plan_forward(rigs[2].plan, 0));
    CHECK_OK(ctx, ct_plan_tensor(rigs[2].plan, rigs[2].logits, &l));
    CHECK(memcmp(l.data, l0.data, 53 * sizeof(float)) != 0);
    /* out of range ids fail at run time with a message */
    ((int32_t *)t.data)[0] = 12;
    CHECK(ct_plan_forward(rigs[2].plan, 0) != CT_OK);
    CHECK(ct_context_last_error(ctx)[0]);
    ct_plan_free(base.plan);
    for (int k = 0; k < 3; k++) ct_plan_free(rigs[k].plan);
    /* shape / dtype errors */
    ct_graph *g;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    ct_node ids, tt_bad, pos_bad, pos_f, out;
    CHECK_OK(ctx, ct_input(g, "ids", CT_I32, 2, (int64_t[]){2, 9}, &ids));
    CHECK_OK(ctx, ct_input(g, "tt_bad", CT_I32, 1, (int64_t[]){9}, &tt_bad));
    CHECK_OK(ctx, ct_input(g, "pos_bad", CT_I32, 2, (int64_t[]){2, 8}, &pos_bad));
    CHECK_OK(ctx, ct_input(g, "pos_f", CT_F32, 2, (int64_t[]){2, 9}, &pos_f));
    const ct_bert_config bc = {53, 12, 2, 2, 16, 32, 2, 0.0f, 1e-12f};
    expect_error(ctx, ct_model_bert(g, ids, CT_NONE, tt_bad, CT_NONE, &bc, &out), CT_E_SHAPE, "token_type_ids 'tt_bad'");
    expect_error(ctx, ct_model_bert(g, ids, CT_NONE, CT_NONE, pos_bad, &bc, &out), CT_E_SHAPE, "position_ids 'pos_bad'");
    expect_error(ctx, ct_model_bert(g, ids, CT_NONE, CT_NONE, pos_f, &bc, &out), CT_E_DTYPE, "position_ids 'pos_f'");
    ct_graph_free(g);
    ct_context_free(ctx);
}

TEST_MAIN(T(bert_token_type_and_position_ids), T(gpt_golden_ref), T(gpt_golden_avx2), T(gpt_golden_default), T(bert_golden_ref), T(bert_golden_avx2),
          T(bert_golden_default), T(gpt_golden_bf16), T(bert_golden_bf16), T(param_counts), T(presets_and_no_bias), T(gpt_init), T(gpt_recompute_bit_exact), T(bad_inputs))
