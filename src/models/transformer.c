/* src/models/transformer.c - GPT (nanoGPT's architecture and parameter
 * names) and BERT with the masked-LM head, on the fused attention op, plus
 * their presets and parameter counts. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "model_def.h"

/* ---- building blocks ----------------------------------------------------------------------------- */

typedef struct {
    ct_graph *g;
    char prefix[48]; /* "transformer.h.3." */
} tb;

static const char *nm(const tb *b, char *buf, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const char *nm(const tb *b, char *buf, const char *fmt, ...) {
    int o = snprintf(buf, 128, "%s", b->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + o, (size_t)(128 - o), fmt, ap);
    va_end(ap);
    return buf;
}

/* <name>.weight (out, in) ~ N(0, std), <name>.bias (out) = 0 when bias */
static ct_status linear(tb *b, ct_node x, const char *name, int64_t in, int64_t out, int bias, float std, ct_node *y) {
    char buf[128];
    ct_node w, bb = CT_NONE;
    CT_TRY(ct_param_normal(b->g, nm(b, buf, "%s.weight", name), 2, (int64_t[]){out, in}, std, &w));
    if (bias) CT_TRY(ct_param(b->g, nm(b, buf, "%s.bias", name), 1, (int64_t[]){out}, CT_INIT_ZEROS, in, &bb));
    CT_TRY(ct_linear(b->g, x, w, bb, y));
    return ct_node_set_name(b->g, *y, nm(b, buf, "%s", name));
}

/* ---- tensor parallelism (Megatron-LM's layers; the graph's tensor group, docs/distributed.md) ----
 * With a tensor group of T > 1 ranks each rank builds its part: a column-parallel layer holds out / T
 * output features (groups > 1: a fused q|k|v weight, each of the groups split alike) and reads its input
 * through tp_copy (identity forward, the ranks' gradients summed backward); a row-parallel layer holds
 * in / T input features, sums the ranks' partial outputs with tp_reduce and then adds its bias (one copy
 * on every rank). Parameters are declared in the same order as with T = 1, so each shard starts with
 * one process's values at its positions. T = 1 builds exactly the plain layers. */

static int tp_size(const tb *b) { return ct_graph_tensor_size(b->g); }

static ct_status col_linear(tb *b, ct_node x, const char *name, int64_t in, int64_t out, int bias, float std,
                            int groups, ct_node *y) {
    const int T = tp_size(b);
    if (T == 1) return linear(b, x, name, in, out, bias, std, y);
    char buf[128];
    ct_node w, bb = CT_NONE;
    CT_TRY(ct_param_normal(b->g, nm(b, buf, "%s.weight", name), 2, (int64_t[]){out / T, in}, std, &w));
    CT_TRY(ct_param_set_shard(b->g, w, 0, groups, out));
    if (bias) {
        CT_TRY(ct_param(b->g, nm(b, buf, "%s.bias", name), 1, (int64_t[]){out / T}, CT_INIT_ZEROS, in, &bb));
        CT_TRY(ct_param_set_shard(b->g, bb, 0, groups, out));
    }
    CT_TRY(ct_tp_copy(b->g, x, &x));
    CT_TRY(ct_linear(b->g, x, w, bb, y));
    return ct_node_set_name(b->g, *y, nm(b, buf, "%s", name));
}

static ct_status row_linear(tb *b, ct_node x, const char *name, int64_t in, int64_t out, int bias, float std,
                            ct_node *y) {
    const int T = tp_size(b);
    if (T == 1) return linear(b, x, name, in, out, bias, std, y);
    char buf[128];
    ct_node w, bb = CT_NONE;
    CT_TRY(ct_param_normal(b->g, nm(b, buf, "%s.weight", name), 2, (int64_t[]){out, in / T}, std, &w));
    CT_TRY(ct_param_set_shard(b->g, w, 1, 1, in));
    if (bias) CT_TRY(ct_param(b->g, nm(b, buf, "%s.bias", name), 1, (int64_t[]){out}, CT_INIT_ZEROS, in, &bb));
    CT_TRY(ct_linear(b->g, x, w, CT_NONE, y));
    CT_TRY(ct_node_set_name(b->g, *y, nm(b, buf, "%s", name)));
    CT_TRY(ct_tp_reduce(b->g, *y, y));
    if (bias) CT_TRY(ct_add(b->g, *y, bb, y));
    return CT_OK;
}

/* The vocabulary's rows on this rank: V padded to a multiple of T (Megatron's make-vocab-size-divisible-by),
 * T equal slices; the padding rows are zeros, never looked up and masked out of the loss. */
static int64_t vocab_local(const tb *b, int64_t V) { return (V + tp_size(b) - 1) / tp_size(b); }

/* The embedding table (name, (V, D) ~ N(0, std)): this rank's rows of it. */
static ct_status vocab_table(tb *b, const char *name, int64_t V, int64_t D, float std, ct_node *table) {
    CT_TRY(ct_param_normal(b->g, name, 2, (int64_t[]){vocab_local(b, V), D}, std, table));
    return tp_size(b) > 1 ? ct_param_set_shard(b->g, *table, 0, 1, V) : CT_OK;
}

/* The rows of ids, summed over the tensor group (each id's row lives on one rank). */
static ct_status vocab_lookup(tb *b, ct_node table, ct_node ids, ct_node *x) {
    if (tp_size(b) == 1) return ct_embedding(b->g, table, ids, x);
    int nd;
    int64_t s[CT_MAX_DIMS];
    CT_TRY(ct_node_shape(b->g, table, &nd, s));
    CT_TRY(ct_embedding_rows(b->g, table, ids, (int64_t)ct_graph_tensor_rank(b->g) * s[0], x));
    return ct_tp_reduce(b->g, *x, x);
}

/* x (B, T, D) times this rank's rows of the (tied) table: its columns of the logits (B, T, V / T); with one
 * rank the whole logits. */
static ct_status vocab_logits(tb *b, ct_node x, ct_node table, ct_node *logits) {
    if (tp_size(b) > 1) CT_TRY(ct_tp_copy(b->g, x, &x));
    return ct_matmul(b->g, x, table, 0, 1, logits);
}

/* T divides the heads and the MLP's hidden units (the vocabulary is padded instead). */
static ct_status check_tp(ct_graph *g, const char *model, int n_head, int64_t d_ff) {
    const int T = ct_graph_tensor_size(g);
    if (n_head % T || d_ff % T)
        return ct_set_error(ct_graph_context(g), CT_E_CONFIG,
                            "%s: tensor_parallel %d must divide n_head %d and d_ff %lld (each rank takes whole heads "
                            "and an equal part of the MLP); use a tensor_parallel that divides both",
                            model, T, n_head, (long long)d_ff);
    return CT_OK;
}

/* <name>.weight = 1, <name>.bias = 0 (when bias) over the last dim */
static ct_status layernorm(tb *b, ct_node x, const char *name, int64_t D, int bias, float eps, ct_node *y) {
    char buf[128];
    ct_node w, bb = CT_NONE;
    CT_TRY(ct_param(b->g, nm(b, buf, "%s.weight", name), 1, (int64_t[]){D}, CT_INIT_ONES, D, &w));
    if (bias) CT_TRY(ct_param(b->g, nm(b, buf, "%s.bias", name), 1, (int64_t[]){D}, CT_INIT_ZEROS, D, &bb));
    CT_TRY(ct_layernorm(b->g, x, w, bb, eps, y));
    return ct_node_set_name(b->g, *y, nm(b, buf, "%s", name));
}

static ct_status dropout(tb *b, ct_node x, float p, ct_node *y) {
    if (p > 0.0f) return ct_dropout(b->g, x, p, y);
    *y = x;
    return CT_OK;
}

static int64_t lin_params(int64_t in, int64_t out, int bias) { return in * out + (bias ? out : 0); }

/* ids: I32 (B, T) with T <= context; *T_out = T */
static ct_status check_ids(ct_graph *g, const char *model, ct_node ids, int64_t context, int64_t *T_out) {
    ct_context *ctx = ct_graph_context(g);
    int nd;
    int64_t s[CT_MAX_DIMS];
    if (ct_node_shape(g, ids, &nd, s) != CT_OK)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: ids node %d does not exist in this graph", model, (int)ids);
    char buf[96];
    if (ct_node_dtype(g, ids) != CT_I32 || nd != 2)
        return ct_set_error(ctx, ct_node_dtype(g, ids) != CT_I32 ? CT_E_DTYPE : CT_E_SHAPE,
                            "%s: ids '%s' is %s %s but must be i32 token ids (B, T)", model, ct_node_name(g, ids),
                            ct_dtype_name(ct_node_dtype(g, ids)), ct_shape_str(nd, s, buf, sizeof buf));
    if (s[1] > context)
        return ct_set_error(ctx, CT_E_SHAPE,
                            "%s: sequence length T=%lld is longer than the model's context %lld (ids '%s' %s); "
                            "crop the input to at most %lld tokens or use a larger context",
                            model, (long long)s[1], (long long)context, ct_node_name(g, ids),
                            ct_shape_str(nd, s, buf, sizeof buf), (long long)context);
    *T_out = s[1];
    return CT_OK;
}

static ct_status check_dims(ct_context *ctx, const char *model, int64_t vocab, int64_t context, int n_layer,
                            int n_head, int64_t d_model, float dropout_p) {
    if (vocab < 1 || context < 1 || n_layer < 0 || n_head < 1 || d_model < 1)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "%s: vocab %lld, context %lld, n_layer %d, n_head %d, d_model %lld: need vocab, context, "
                            "n_head, d_model >= 1 and n_layer >= 0",
                            model, (long long)vocab, (long long)context, n_layer, n_head, (long long)d_model);
    if (d_model % n_head)
        return ct_set_error(ctx, CT_E_SHAPE, "%s: d_model %lld is not divisible by n_head %d", model,
                            (long long)d_model, n_head);
    if (!(dropout_p >= 0.0f && dropout_p < 1.0f))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: dropout %g must be in [0, 1)", model, (double)dropout_p);
    return CT_OK;
}

/* ---- GPT ------------------------------------------------------------------------------------------ */

/* The presets: names and descriptions (the model table's), then the configurations, in the same order. */
static const ct_model_preset k_gpt_presets[] = {
    {"gpt-char-small", "GPT, 6 layers, d_model 384, context 256, 65 characters"},
    {"gpt2-124m", "GPT-2 small, 12 layers, d_model 768, context 1024"},
    {"gpt2-medium", "GPT-2 medium (355M), 24 layers, d_model 1024, 16 heads, context 1024"},
    {"gpt2-large", "GPT-2 large (774M), 36 layers, d_model 1280, 20 heads, context 1024"},
    {NULL, NULL},
};
static const ct_gpt_config k_gpt_configs[] = {
    {.vocab = 65, .context = 256, .n_layer = 6, .n_head = 6, .d_model = 384, .dropout = 0.2f, .bias = 1, .gelu_tanh = 0},
    {.vocab = 50257, .context = 1024, .n_layer = 12, .n_head = 12, .d_model = 768, .dropout = 0.1f, .bias = 1,
     .gelu_tanh = 1},
    {.vocab = 50257, .context = 1024, .n_layer = 24, .n_head = 16, .d_model = 1024, .dropout = 0.1f, .bias = 1,
     .gelu_tanh = 1},
    {.vocab = 50257, .context = 1024, .n_layer = 36, .n_head = 20, .d_model = 1280, .dropout = 0.1f, .bias = 1,
     .gelu_tanh = 1},
};
_Static_assert(sizeof k_gpt_configs / sizeof k_gpt_configs[0] + 1 == sizeof k_gpt_presets / sizeof k_gpt_presets[0],
               "one configuration per GPT preset");

/* The index of preset `name` in ps, or -1; "valid presets: a, b" into list. */
static int find_preset(const ct_model_preset *ps, const char *name, char *list, size_t len) {
    size_t o = 0;
    list[0] = 0;
    for (int i = 0; ps[i].name; i++) {
        if (!strcmp(ps[i].name, name)) return i;
        if (o < len) o += (size_t)snprintf(list + o, len - o, "%s%s", i ? ", " : "", ps[i].name);
    }
    return -1;
}

ct_status ct_gpt_preset(ct_context *ctx, const char *name, ct_gpt_config *out) {
    if (!name || !out) return ct_set_error(ctx, CT_E_INVALID_ARG, "gpt preset: name and out must not be NULL");
    char list[128];
    int i = find_preset(k_gpt_presets, name, list, sizeof list);
    if (i < 0) return ct_set_error(ctx, CT_E_INVALID_ARG, "gpt preset '%s' is unknown; valid presets: %s", name, list);
    *out = k_gpt_configs[i];
    return CT_OK;
}

int64_t ct_gpt_num_params(const ct_gpt_config *c) {
    int64_t D = c->d_model, b = c->bias ? 1 : 0;
    int64_t ln = D * (1 + b);
    int64_t block = 2 * ln + lin_params(D, 3 * D, b) + lin_params(D, D, b) + lin_params(D, 4 * D, b) +
                    lin_params(4 * D, D, b);
    return c->vocab * D + c->context * D + c->n_layer * block + ln;
}

ct_status ct_model_gpt(ct_graph *g, ct_node ids, const ct_gpt_config *c, ct_node *logits) {
    if (!g || !c || !logits) return CT_E_INVALID_ARG;
    ct_context *ctx = ct_graph_context(g);
    CT_TRY(check_dims(ctx, "gpt", c->vocab, c->context, c->n_layer, c->n_head, c->d_model, c->dropout));
    int64_t T, D = c->d_model;
    CT_TRY(check_ids(g, "gpt", ids, c->context, &T));
    CT_TRY(check_tp(g, "gpt", c->n_head, 4 * D));
    const float eps = 1e-5f, std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)(c->n_layer ? c->n_layer : 1));
    const int H = c->n_head / ct_graph_tensor_size(g); /* this rank's heads */
    tb b = {g, "transformer."};
    char buf[128];
    ct_node wte, wpe, x, pos, h, a;
    CT_TRY(vocab_table(&b, "transformer.wte.weight", c->vocab, D, std, &wte));
    CT_TRY(ct_param_normal(g, "transformer.wpe.weight", 2, (int64_t[]){c->context, D}, std, &wpe));
    CT_TRY(vocab_lookup(&b, wte, ids, &x));
    CT_TRY(ct_node_set_name(g, x, "transformer.wte"));
    /* positions 0..T-1, a slice also when T = context: a plan compiled for
     * the maximum T runs shorter sequences (ct_plan_add_shape) only if every
     * T builds the same nodes */
    CT_TRY(ct_slice(g, wpe, 0, 0, T, &pos));
    CT_TRY(ct_add(g, x, pos, &x));
    CT_TRY(dropout(&b, x, c->dropout, &x));
    for (int i = 0; i < c->n_layer; i++) {
        snprintf(b.prefix, sizeof b.prefix, "transformer.h.%d.", i);
        CT_TRY(ct_graph_mark_block(g, x)); /* recompute_blocks' unit */
        CT_TRY(layernorm(&b, x, "ln_1", D, c->bias, eps, &h));
        CT_TRY(col_linear(&b, h, "attn.c_attn", D, 3 * D, c->bias, std, 3, &h));
        CT_TRY(ct_attention(g, h, H, 1, CT_NONE, &a));
        CT_TRY(ct_node_set_name(g, a, nm(&b, buf, "attn")));
        CT_TRY(row_linear(&b, a, "attn.c_proj", D, D, c->bias, proj_std, &a));
        CT_TRY(dropout(&b, a, c->dropout, &a));
        CT_TRY(ct_add(g, x, a, &x));
        CT_TRY(layernorm(&b, x, "ln_2", D, c->bias, eps, &h));
        CT_TRY(col_linear(&b, h, "mlp.c_fc", D, 4 * D, c->bias, std, 1, &h));
        CT_TRY(ct_gelu(g, h, c->gelu_tanh, &h));
        CT_TRY(row_linear(&b, h, "mlp.c_proj", 4 * D, D, c->bias, proj_std, &h));
        CT_TRY(dropout(&b, h, c->dropout, &h));
        CT_TRY(ct_add(g, x, h, &x));
    }
    snprintf(b.prefix, sizeof b.prefix, "transformer.");
    CT_TRY(layernorm(&b, x, "ln_f", D, c->bias, eps, &x));
    CT_TRY(vocab_logits(&b, x, wte, logits)); /* lm_head tied to wte */
    return ct_node_set_name(g, *logits, "lm_head");
}

/* ---- BERT ----------------------------------------------------------------------------------------- */

static const ct_model_preset k_bert_presets[] = {
    {"bert-base", "BERT-base, 12 layers, d_model 768, MLM head"},
    {"bert-large", "BERT-large, 24 layers, d_model 1024, MLM head"},
    {NULL, NULL},
};
static const ct_bert_config k_bert_configs[] = {
    {.vocab = 30522, .context = 512, .n_layer = 12, .n_head = 12, .d_model = 768, .d_ff = 3072, .type_vocab = 2,
     .dropout = 0.1f, .ln_eps = 1e-12f},
    {.vocab = 30522, .context = 512, .n_layer = 24, .n_head = 16, .d_model = 1024, .d_ff = 4096, .type_vocab = 2,
     .dropout = 0.1f, .ln_eps = 1e-12f},
};
_Static_assert(sizeof k_bert_configs / sizeof k_bert_configs[0] + 1 == sizeof k_bert_presets / sizeof k_bert_presets[0],
               "one configuration per BERT preset");

ct_status ct_bert_preset(ct_context *ctx, const char *name, ct_bert_config *out) {
    if (!name || !out) return ct_set_error(ctx, CT_E_INVALID_ARG, "bert preset: name and out must not be NULL");
    char list[128];
    int i = find_preset(k_bert_presets, name, list, sizeof list);
    if (i < 0) return ct_set_error(ctx, CT_E_INVALID_ARG, "bert preset '%s' is unknown; valid presets: %s", name, list);
    *out = k_bert_configs[i];
    return CT_OK;
}

int64_t ct_bert_num_params(const ct_bert_config *c) {
    int64_t D = c->d_model, F = c->d_ff;
    int64_t block = lin_params(D, 3 * D, 1) + lin_params(D, D, 1) + 2 * D + lin_params(D, F, 1) +
                    lin_params(F, D, 1) + 2 * D;
    return (c->vocab + c->context + c->type_vocab) * D + 2 * D + c->n_layer * block + lin_params(D, D, 1) + 2 * D +
           c->vocab;
}

/* An optional I32 id input of BERT (token_type_ids, position_ids): CT_NONE,
 * or (B, T) like ids; position_ids may also be (1, T) or (T) (shared by the
 * batch). */
static ct_status check_opt_ids(ct_graph *g, const char *what, ct_node n, ct_node ids, int allow_shared) {
    if (n == CT_NONE) return CT_OK;
    ct_context *ctx = ct_graph_context(g);
    int nd, ndi;
    int64_t s[CT_MAX_DIMS], si[CT_MAX_DIMS];
    if (ct_node_shape(g, n, &nd, s) != CT_OK)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "bert: %s node %d does not exist in this graph", what, (int)n);
    CT_TRY(ct_node_shape(g, ids, &ndi, si));
    char b1[96], b2[96];
    int ok = (nd == 2 && s[0] == si[0] && s[1] == si[1]) ||
             (allow_shared && ((nd == 2 && s[0] == 1 && s[1] == si[1]) || (nd == 1 && s[0] == si[1])));
    if (ct_node_dtype(g, n) != CT_I32 || !ok)
        return ct_set_error(ctx, ct_node_dtype(g, n) != CT_I32 ? CT_E_DTYPE : CT_E_SHAPE,
                            "bert: %s '%s' is %s %s but must be i32 %s like ids '%s' %s", what, ct_node_name(g, n),
                            ct_dtype_name(ct_node_dtype(g, n)), ct_shape_str(nd, s, b1, sizeof b1),
                            allow_shared ? "(B, T), (1, T) or (T)" : "(B, T)", ct_node_name(g, ids),
                            ct_shape_str(ndi, si, b2, sizeof b2));
    return CT_OK;
}

ct_status ct_model_bert(ct_graph *g, ct_node ids, ct_node key_valid, ct_node token_type_ids, ct_node position_ids,
                        const ct_bert_config *c, ct_node *mlm_logits) {
    if (!g || !c || !mlm_logits) return CT_E_INVALID_ARG;
    ct_context *ctx = ct_graph_context(g);
    CT_TRY(check_dims(ctx, "bert", c->vocab, c->context, c->n_layer, c->n_head, c->d_model, c->dropout));
    if (c->d_ff < 1 || c->type_vocab < 1 || !(c->ln_eps > 0.0f))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "bert: d_ff %lld, type_vocab %lld, ln_eps %g: need d_ff, type_vocab >= 1 and ln_eps > 0",
                            (long long)c->d_ff, (long long)c->type_vocab, (double)c->ln_eps);
    int64_t T, D = c->d_model;
    CT_TRY(check_ids(g, "bert", ids, c->context, &T));
    CT_TRY(check_opt_ids(g, "token_type_ids", token_type_ids, ids, 0));
    CT_TRY(check_opt_ids(g, "position_ids", position_ids, ids, 1));
    CT_TRY(check_tp(g, "bert", c->n_head, c->d_ff));
    const float std = 0.02f, eps = c->ln_eps;
    const int H = c->n_head / ct_graph_tensor_size(g); /* this rank's heads */
    tb b = {g, "bert.embeddings."};
    char buf[128];
    ct_node word, pos, type, x, p, t, h, a;
    CT_TRY(vocab_table(&b, "bert.embeddings.word_embeddings.weight", c->vocab, D, std, &word));
    CT_TRY(ct_param_normal(g, "bert.embeddings.position_embeddings.weight", 2, (int64_t[]){c->context, D}, std, &pos));
    CT_TRY(ct_param_normal(g, "bert.embeddings.token_type_embeddings.weight", 2, (int64_t[]){c->type_vocab, D}, std,
                           &type));
    CT_TRY(vocab_lookup(&b, word, ids, &x));
    CT_TRY(ct_node_set_name(g, x, "bert.embeddings.word_embeddings"));
    p = pos;
    if (position_ids != CT_NONE) CT_TRY(ct_embedding(g, pos, position_ids, &p)); /* rows looked up */
    else CT_TRY(ct_slice(g, pos, 0, 0, T, &p)); /* positions 0..T-1 (also T = context: see ct_model_gpt) */
    CT_TRY(ct_add(g, x, p, &x));
    t = type;
    if (token_type_ids != CT_NONE) CT_TRY(ct_embedding(g, type, token_type_ids, &t));
    else if (c->type_vocab > 1) CT_TRY(ct_slice(g, type, 0, 0, 1, &t)); /* every token has type 0 */
    CT_TRY(ct_add(g, x, t, &x));
    CT_TRY(layernorm(&b, x, "LayerNorm", D, 1, eps, &x));
    CT_TRY(dropout(&b, x, c->dropout, &x));
    for (int i = 0; i < c->n_layer; i++) {
        snprintf(b.prefix, sizeof b.prefix, "bert.encoder.layer.%d.", i);
        CT_TRY(ct_graph_mark_block(g, x)); /* recompute_blocks' unit */
        CT_TRY(col_linear(&b, x, "attention.qkv", D, 3 * D, 1, std, 3, &h));
        CT_TRY(ct_attention(g, h, H, 0, key_valid, &a));
        CT_TRY(ct_node_set_name(g, a, nm(&b, buf, "attention")));
        CT_TRY(row_linear(&b, a, "attention.output.dense", D, D, 1, std, &a));
        CT_TRY(dropout(&b, a, c->dropout, &a));
        CT_TRY(ct_add(g, a, x, &a));
        CT_TRY(layernorm(&b, a, "attention.output.LayerNorm", D, 1, eps, &x));
        CT_TRY(col_linear(&b, x, "intermediate.dense", D, c->d_ff, 1, std, 1, &h));
        CT_TRY(ct_gelu(g, h, 0, &h));
        CT_TRY(row_linear(&b, h, "output.dense", c->d_ff, D, 1, std, &h));
        CT_TRY(dropout(&b, h, c->dropout, &h));
        CT_TRY(ct_add(g, h, x, &h));
        CT_TRY(layernorm(&b, h, "output.LayerNorm", D, 1, eps, &x));
    }
    snprintf(b.prefix, sizeof b.prefix, "cls.predictions.");
    ct_node bias;
    CT_TRY(linear(&b, x, "transform.dense", D, D, 1, std, &h));
    CT_TRY(ct_gelu(g, h, 0, &h));
    CT_TRY(layernorm(&b, h, "transform.LayerNorm", D, 1, eps, &h));
    CT_TRY(vocab_logits(&b, h, word, &h)); /* decoder tied to the word embeddings */
    CT_TRY(ct_node_set_name(g, h, "cls.predictions.decoder"));
    CT_TRY(ct_param(g, "cls.predictions.bias", 1, (int64_t[]){vocab_local(&b, c->vocab)}, CT_INIT_ZEROS, D, &bias));
    if (tp_size(&b) > 1) CT_TRY(ct_param_set_shard(g, bias, 0, 1, c->vocab));
    return ct_add(g, h, bias, mlm_logits);
}

/* ---- their rows of the model table ------------------------------------------------------------
 * By name and for ct_model_build: the preset (the recipe's, or the first) on
 * ids (batch, context), with n_classes (> 0) as the vocabulary. The text
 * task (src/train/task_text.c) applies the recipe's sizes itself. */

static ct_status gpt_on(ct_graph *g, ct_node ids, const char *preset, int64_t vocab, ct_node *out) {
    ct_gpt_config c;
    CT_TRY(ct_gpt_preset(ct_graph_context(g), preset && preset[0] ? preset : k_gpt_presets[0].name, &c));
    if (vocab > 0) c.vocab = vocab;
    return ct_model_gpt(g, ids, &c, out);
}
static ct_status gpt_default(ct_graph *g, const ct_model_row *m, const char *preset, int64_t batch, int64_t vocab,
                             ct_node *out) {
    (void)m;
    ct_gpt_config c;
    CT_TRY(ct_gpt_preset(ct_graph_context(g), preset ? preset : k_gpt_presets[0].name, &c));
    ct_node ids;
    CT_TRY(ct_input(g, "ids", CT_I32, 2, (int64_t[]){batch, c.context}, &ids));
    return gpt_on(g, ids, preset, vocab, out);
}
static ct_status gpt_build(ct_graph *g, const ct_model_row *m, ct_node x, const ct_recipe *r, int64_t vocab,
                           ct_node *out) {
    (void)m;
    return gpt_on(g, x, r->preset, vocab, out);
}
static int64_t gpt_params(const char *preset) {
    ct_gpt_config c;
    return ct_gpt_preset(NULL, preset ? preset : k_gpt_presets[0].name, &c) == CT_OK ? ct_gpt_num_params(&c) : 0;
}
const ct_model_def ct_model_def_gpt = {.build_default = gpt_default, .build = gpt_build, .num_params = gpt_params,
                                       .presets = k_gpt_presets};

static ct_status bert_on(ct_graph *g, ct_node ids, const char *preset, int64_t vocab, ct_node *out) {
    ct_bert_config c;
    CT_TRY(ct_bert_preset(ct_graph_context(g), preset && preset[0] ? preset : k_bert_presets[0].name, &c));
    if (vocab > 0) c.vocab = vocab;
    return ct_model_bert(g, ids, CT_NONE, CT_NONE, CT_NONE, &c, out);
}
static ct_status bert_default(ct_graph *g, const ct_model_row *m, const char *preset, int64_t batch, int64_t vocab,
                              ct_node *out) {
    (void)m;
    ct_bert_config c;
    CT_TRY(ct_bert_preset(ct_graph_context(g), preset ? preset : k_bert_presets[0].name, &c));
    ct_node ids;
    CT_TRY(ct_input(g, "ids", CT_I32, 2, (int64_t[]){batch, c.context}, &ids));
    return bert_on(g, ids, preset, vocab, out);
}
static ct_status bert_build(ct_graph *g, const ct_model_row *m, ct_node x, const ct_recipe *r, int64_t vocab,
                            ct_node *out) {
    (void)m;
    return bert_on(g, x, r->preset, vocab, out);
}
static int64_t bert_params(const char *preset) {
    ct_bert_config c;
    return ct_bert_preset(NULL, preset ? preset : k_bert_presets[0].name, &c) == CT_OK ? ct_bert_num_params(&c) : 0;
}
const ct_model_def ct_model_def_bert = {.build_default = bert_default, .build = bert_build, .num_params = bert_params,
                                        .presets = k_bert_presets};
