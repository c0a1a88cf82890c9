/* src/graph/fusion.c - the fusion pass (after autodiff and recompute, before
 * liveness), its pattern registry and fusion rules from JSON.
 *
 * A pattern matches at an anchor node of the forward graph and rewrites the
 * nodes in place: the consumer becomes the fused node (same id, so users'
 * node ids stay valid), the producer it absorbs loses its readers (the
 * liveness pass then drops it), and the backward nodes that read the
 * producer are pointed at the fused node or replaced by a fused backward
 * op. A pattern applies only when every reader of the absorbed value is one
 * the rewrite knows (otherwise the value is needed elsewhere and stays).
 *
 *   level 1  conv2d+bias_add     conv2d without bias + add of a per-channel
 *                                vector -> conv2d with bias (oneDNN's bias)
 *            linear+bias_add     linear without bias + add of a [O] vector
 *            batchnorm+relu      one node; relu's backward reads one mask bit
 *                                per element (RELU_MASK_BWD), so the output
 *                                is not kept for backward
 *   level 2  gelu+linear         the activation computed inside the next
 *                                linear (LINEAR_PRO): its output is never
 *                                stored; its backward keeps it for the weight
 *                                gradient (UNARY_BWD_KEEP + MATMUL_AUX, see
 *                                keep_activation), else the weight gradient
 *                                recomputes it (MATMUL_PRO)
 *            layernorm+linear    the same for a layernorm in front of a linear
 *            dropout+add         r + dropout(a) in one pass (DROPOUT_ADD), the
 *                                dropout's mask exactly
 *            add+relu            relu(a + b) in one pass (residual tails)
 *            eltwise_chain       the elementwise runs left over (unary, scale,
 *                                binary, dropout; forward or backward), each
 *                                value read only by the next: one blocked loop
 *                                (fusion_chain.c)
 *   level 1  conv2d+relu,        relu on the GEMM's output in place (GEMM_RELU):
 *            linear+relu         no buffer for the pre-activation
 *   level 1  layernorm_bwd+add   backward: a layernorm's dx plus the residual
 *                                gradient it is added to, in the layernorm
 *                                backward's row pass (LAYERNORM_BWD_DATA with
 *                                a 5th input); any float dtype, bit-identical
 *   level 1  add+layernorm       forward: layernorm(x + r), the sum x + r read
 *                                later too (the next residual add, the
 *                                layernorm's backward): one ADD_LAYERNORM
 *                                node writes each row of the sum into the
 *                                add's buffer (the add becomes ADD_LN_SUM,
 *                                which runs nothing) and normalizes it from
 *                                L1; any float dtype, bit-identical
 *   level 1  layernorm_bwd+colsum backward: the column sums that re-read a
 *                                layernorm backward's tensors (dgamma, dbeta,
 *                                and the bias gradient of the linear its
 *                                output, the residual gradient, feeds) made
 *                                in its row pass (ia[7], partials in its aux);
 *                                those nodes become COLSUM nodes adding the
 *                                pieces' partials; any float dtype,
 *                                bit-identical (the same pieces and order)
 *            unary_bwd+colsum    the same for an activation's backward and the
 *                                bias gradient of the linear in front of it
 *   level 1  embedding_bwd+add   backward: a tied table's two gradients (the
 *                                LM head's weight gradient a, the embedding's
 *                                scatter) summed by the embedding backward
 *                                itself: dW = a + the scatter (in[2] = a), the
 *                                V x D zeroing, the scatter's own buffer and the
 *                                add's pass gone; each touched row's sum is made
 *                                from zero first, bit-identical. In place (ia[3])
 *                                where the add is the parameter's gradient and a
 *                                a matmul: a is planned in the gradient's slot
 *                                and only the touched rows are written
 *            batchnorm_bwd+colsum the same for a batchnorm on (M, C) (the
 *                                channels-last CNNs' (N*H*W, C) views): its
 *                                dgamma (COLSUM times invstd) and dbeta; after
 *                                batchnorm+relu its dy also reads the relu
 *                                mask bits itself (ia[5]: relu_mask_bwd goes)
 *
 * Only nodes outside recompute copies fuse, FP32 ones except batchnorm+relu
 * (any float dtype: BF16 I/O in its fast kernels), layernorm_bwd+add and
 * add+layernorm. Rules (ct_fusion_rules) name
 * a pattern by its ops (seeds' names "Conv2D", "BiasAdd", ... or ctrain's)
 * with constraints; a pattern named by some rule applies exactly where one
 * of its rules holds, whatever the level. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "plan.h"

/* ---- the registry --------------------------------------------------------------------------------- */

enum { PAT_CONV_BIAS = 0, PAT_LINEAR_BIAS, PAT_BN_RELU, PAT_ACT_LINEAR, PAT_LN_LINEAR, PAT_DROPOUT_ADD, PAT_CONV_RELU, PAT_LINEAR_RELU,
       PAT_ADD_RELU, PAT_CHAIN, PAT_CAST_FOLD, PAT_LN_BWD_ADD, PAT_ADD_LN, PAT_LN_BWD_COLSUM, PAT_ACT_BWD_COLSUM,
       PAT_BN_BWD_COLSUM, PAT_ATT_BWD_COLSUM, PAT_LN_BWD_CAST, PAT_EMB_BWD_ADD, PAT_COUNT };

static const struct {
    const char *name;
    int level;
    int conv; /* conv2d constraints apply */
    const char *ops[3];
} k_patterns[PAT_COUNT] = {
    [PAT_CONV_BIAS] = {"conv2d+bias_add", 1, 1, {"conv2d", "bias_add", NULL}},
    [PAT_LINEAR_BIAS] = {"linear+bias_add", 1, 0, {"linear", "bias_add", NULL}},
    [PAT_BN_RELU] = {"batchnorm+relu", 1, 0, {"batchnorm", "relu", NULL}},
    [PAT_ACT_LINEAR] = {"gelu+linear", 2, 0, {"gelu", "linear", NULL}},
    [PAT_LN_LINEAR] = {"layernorm+linear", 2, 0, {"layernorm", "linear", NULL}},
    [PAT_DROPOUT_ADD] = {"dropout+add", 2, 0, {"dropout", "add", NULL}},
    [PAT_CONV_RELU] = {"conv2d+relu", 1, 1, {"conv2d", "relu", NULL}},
    [PAT_LINEAR_RELU] = {"linear+relu", 1, 0, {"linear", "relu", NULL}},
    [PAT_ADD_RELU] = {"add+relu", 2, 0, {"add", "relu", NULL}},
    [PAT_CHAIN] = {"eltwise_chain", 2, 0, {"eltwise_chain", NULL, NULL}},
    [PAT_CAST_FOLD] = {"cast_fold", 1, 0, {"cast", NULL, NULL}},
    [PAT_LN_BWD_ADD] = {"layernorm_bwd+add", 1, 0, {"layernorm_bwd", "add", NULL}},
    [PAT_ADD_LN] = {"add+layernorm", 1, 0, {"add", "layernorm", NULL}},
    [PAT_LN_BWD_COLSUM] = {"layernorm_bwd+colsum", 1, 0, {"layernorm_bwd", "sum", NULL}},
    [PAT_ACT_BWD_COLSUM] = {"unary_bwd+colsum", 1, 0, {"unary_bwd", "sum", NULL}},
    [PAT_BN_BWD_COLSUM] = {"batchnorm_bwd+colsum", 1, 0, {"batchnorm_bwd", "sum", NULL}},
    [PAT_ATT_BWD_COLSUM] = {"attention_bwd+colsum", 1, 0, {"attention_bwd", "sum", NULL}},
    [PAT_LN_BWD_CAST] = {"layernorm_bwd+cast", 1, 0, {"layernorm_bwd", "cast", NULL}},
    [PAT_EMB_BWD_ADD] = {"embedding_bwd+add", 1, 0, {"embedding_bwd", "add", NULL}},
};

int ct_fusion_num_patterns(void) { return PAT_COUNT; }
const char *ct_fusion_pattern_name(int i) { return i >= 0 && i < PAT_COUNT ? k_patterns[i].name : NULL; }
int ct_fusion_pattern_level(int i) { return i >= 0 && i < PAT_COUNT ? k_patterns[i].level : 0; }
const char *ct_fusion_pattern_op(int i, int j) {
    return i >= 0 && i < PAT_COUNT && j >= 0 && j < 3 ? k_patterns[i].ops[j] : NULL;
}

/* Rule op names: the seeds' (TensorFlow's) and ctrain's, to the registry's. */
static const char *canonical_op(const char *s) {
    static const struct {
        const char *alias, *op;
    } k[] = {
        {"Conv2D", "conv2d"}, {"conv2d", "conv2d"}, {"BiasAdd", "bias_add"}, {"bias_add", "bias_add"},
        {"Add", "add"}, {"AddV2", "add"}, {"add", "add"}, {"Dropout", "dropout"}, {"dropout", "dropout"}, {"Relu", "relu"}, {"relu", "relu"},
        {"FusedBatchNorm", "batchnorm"}, {"FusedBatchNormV3", "batchnorm"}, {"BatchNorm", "batchnorm"},
        {"batchnorm", "batchnorm"}, {"MatMul", "linear"}, {"Dense", "linear"}, {"linear", "linear"},
        {"eltwise_chain", "eltwise_chain"}, {"EltwiseChain", "eltwise_chain"}, {"Gelu", "gelu"}, {"gelu", "gelu"}, {"LayerNorm", "layernorm"}, {"layernorm", "layernorm"},
        {"Cast", "cast"}, {"cast", "cast"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(k[i].alias, s)) return k[i].op;
    return NULL;
}

/* ---- rules -------------------------------------------------------------------------------------------- */

enum { PAD_ANY = 0, PAD_SAME, PAD_VALID, PAD_EXPLICIT };

typedef struct {
    int pattern;
    int64_t stride, dilation, groups, pad, max_elements; /* -1: any */
    int padding;                                         /* PAD_* */
    int dtype;                                           /* -1: any, else ct_dtype */
    char desc[160];
} fusion_rule;

struct ct_fusion_rules {
    int n;
    fusion_rule *r;
};

void ct_fusion_rules_free(ct_fusion_rules *r) {
    if (!r) return;
    free(r->r);
    free(r);
}

int ct_fusion_rules_count(const ct_fusion_rules *r) { return r ? r->n : 0; }

ct_fusion_rules *ct_fusion_rules_clone(const ct_fusion_rules *r) {
    if (!r) return NULL;
    ct_fusion_rules *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (r->n > 0 && !(c->r = malloc((size_t)r->n * sizeof *c->r))) {
        free(c);
        return NULL;
    }
    if (r->n > 0) memcpy(c->r, r->r, (size_t)r->n * sizeof *c->r);
    c->n = r->n;
    return c;
}

const char *ct_fusion_rule_desc(const ct_fusion_rules *r, int i) {
    return r && i >= 0 && i < r->n ? r->r[i].desc : NULL;
}

static void supported_list(char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < PAT_COUNT && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", k_patterns[i].name);
}

/* An int or a list of equal ints ([s, s], or TensorFlow's [1, s, s, 1]). */
static ct_status int_or_pair(ct_context *ctx, const char *src, int ri, const char *key, const cJSON *v, int64_t *out) {
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble == (double)(int64_t)v->valuedouble) {
        *out = (int64_t)v->valuedouble;
        return CT_OK;
    }
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (n == 2 || n == 4) {
        const cJSON *a = cJSON_GetArrayItem(v, n == 4 ? 1 : 0), *b = cJSON_GetArrayItem(v, n == 4 ? 2 : 1);
        if (cJSON_IsNumber(a) && cJSON_IsNumber(b) && a->valuedouble == b->valuedouble && a->valuedouble >= 0) {
            *out = (int64_t)a->valuedouble;
            return CT_OK;
        }
        if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
            return ct_set_error(ctx, CT_E_UNSUPPORTED,
                                "%s: rule %d: %s %g and %g differ; ctrain's conv2d has one %s for both dimensions", src,
                                ri + 1, key, a->valuedouble, b->valuedouble, key);
    }
    return ct_set_error(ctx, CT_E_CONFIG, "%s: rule %d: constraint '%s' must be a number >= 0 or a list [h, w]", src,
                        ri + 1, key);
}

static ct_status parse_rule(ct_context *ctx, const char *src, int ri, const cJSON *it, fusion_rule *r) {
    char sup[256];
    supported_list(sup, sizeof sup);
    *r = (fusion_rule){.pattern = -1, .stride = -1, .dilation = -1, .groups = -1, .pad = -1, .max_elements = -1,
                       .padding = PAD_ANY, .dtype = -1};
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(it, "ops");
    int n = cJSON_IsArray(ops) ? cJSON_GetArraySize(ops) : 0;
    if (!cJSON_IsObject(it) || n < 1)
        return ct_set_error(ctx, CT_E_CONFIG, "%s: rule %d must be an object with \"ops\": [\"Conv2D\", \"BiasAdd\"]",
                            src, ri + 1);
    const char *canon[3] = {0};
    char seq[128] = "";
    size_t o = 0;
    for (int j = 0; j < n; j++) {
        const cJSON *s = cJSON_GetArrayItem(ops, j);
        if (!cJSON_IsString(s)) return ct_set_error(ctx, CT_E_CONFIG, "%s: rule %d: ops must be strings", src, ri + 1);
        const char *c = canonical_op(s->valuestring);
        if (!c)
            return ct_set_error(ctx, CT_E_UNSUPPORTED,
                                "%s: rule %d names op '%s', which no fused kernel covers; supported patterns: %s", src,
                                ri + 1, s->valuestring, sup);
        if (j < 3) canon[j] = c;
        if (o < sizeof seq) o += (size_t)snprintf(seq + o, sizeof seq - o, "%s%s", j ? ", " : "", s->valuestring);
    }
    for (int p = 0; p < PAT_COUNT && n <= 3; p++) {
        int ok = 1;
        for (int j = 0; j < 3 && ok; j++) {
            const char *a = j < n ? canon[j] : NULL, *b = k_patterns[p].ops[j];
            /* an add after conv2d / linear is their bias add */
            ok = (!a && !b) || (a && b && (!strcmp(a, b) || (!strcmp(a, "add") && !strcmp(b, "bias_add"))));
        }
        if (ok) r->pattern = p;
    }
    if (r->pattern < 0)
        return ct_set_error(ctx, CT_E_UNSUPPORTED, "%s: rule %d: no fused kernel for the ops [%s]; supported patterns: %s",
                            src, ri + 1, seq, sup);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "constraints");
    if (c && !cJSON_IsObject(c))
        return ct_set_error(ctx, CT_E_CONFIG, "%s: rule %d: \"constraints\" must be an object", src, ri + 1);
    o = (size_t)snprintf(r->desc, sizeof r->desc, "%s", k_patterns[r->pattern].name);
    const char *sep = " (";
    for (const cJSON *e = c ? c->child : NULL; e; e = e->next) {
        const char *k = e->string;
        int conv_only = 1;
        if (!strcmp(k, "strides")) CT_TRY(int_or_pair(ctx, src, ri, k, e, &r->stride));
        else if (!strcmp(k, "dilation") || !strcmp(k, "dilations")) CT_TRY(int_or_pair(ctx, src, ri, k, e, &r->dilation));
        else if (!strcmp(k, "groups")) CT_TRY(int_or_pair(ctx, src, ri, k, e, &r->groups));
        else if (!strcmp(k, "padding")) {
            if (cJSON_IsString(e) && !strcmp(e->valuestring, "SAME")) r->padding = PAD_SAME;
            else if (cJSON_IsString(e) && !strcmp(e->valuestring, "VALID")) r->padding = PAD_VALID;
            else if (cJSON_IsString(e))
                return ct_set_error(ctx, CT_E_CONFIG, "%s: rule %d: padding '%s' must be \"SAME\", \"VALID\" or a number",
                                    src, ri + 1, e->valuestring);
            else {
                CT_TRY(int_or_pair(ctx, src, ri, k, e, &r->pad));
                r->padding = PAD_EXPLICIT;
            }
        } else if (!strcmp(k, "dtype")) {
            conv_only = 0;
            if (cJSON_IsString(e) && (!strcmp(e->valuestring, "float32") || !strcmp(e->valuestring, "f32") ||
                                      !strcmp(e->valuestring, "DT_FLOAT")))
                r->dtype = CT_F32;
            else
                return ct_set_error(ctx, CT_E_UNSUPPORTED,
                                    "%s: rule %d: dtype must be \"float32\": the fused kernels are FP32 only", src, ri + 1);
        } else if (!strcmp(k, "max_elements")) {
            conv_only = 0;
            if (!cJSON_IsNumber(e) || e->valuedouble < 1)
                return ct_set_error(ctx, CT_E_CONFIG, "%s: rule %d: max_elements must be a number >= 1", src, ri + 1);
            r->max_elements = (int64_t)e->valuedouble;
        } else {
            return ct_set_error(ctx, CT_E_CONFIG,
                                "%s: rule %d: unknown constraint '%s' (strides, padding, dilation, groups, dtype, "
                                "max_elements)",
                                src, ri + 1, k);
        }
        if (conv_only && !k_patterns[r->pattern].conv)
            return ct_set_error(ctx, CT_E_CONFIG, "%s: rule %d: constraint '%s' applies to conv2d patterns, not %s", src,
                                ri + 1, k, k_patterns[r->pattern].name);
        char v[48];
        if (!strcmp(k, "padding") && r->padding != PAD_EXPLICIT) snprintf(v, sizeof v, "%s", e->valuestring);
        else if (!strcmp(k, "dtype")) snprintf(v, sizeof v, "float32");
        else {
            int64_t x = !strcmp(k, "strides") ? r->stride : !strcmp(k, "padding") ? r->pad
                        : !strcmp(k, "groups") ? r->groups : !strcmp(k, "max_elements") ? r->max_elements : r->dilation;
            snprintf(v, sizeof v, "%lld", (long long)x);
        }
        if (o < sizeof r->desc) o += (size_t)snprintf(r->desc + o, sizeof r->desc - o, "%s%s %s", sep, k, v);
        sep = ", ";
    }
    if (c && c->child && o < sizeof r->desc) snprintf(r->desc + o, sizeof r->desc - o, ")");
    return CT_OK;
}

ct_status ct_fusion_rules_parse(ct_context *ctx, const char *json, const char *source, ct_fusion_rules **out) {
    if (!json || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    const char *src = source ? source : "fusion rules";
    const char *endp = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &endp, 1);
    if (!root) {
        int line = 1, col = 1;
        for (const char *c = json; endp && c < endp && *c; c++) {
            if (*c == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        return ct_set_error(ctx, CT_E_CONFIG, "%s: not valid JSON: syntax error at line %d, column %d", src, line, col);
    }
    ct_status s = CT_OK;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "fusion_patterns");
    if (!cJSON_IsArray(list))
        s = ct_set_error(ctx, CT_E_CONFIG, "%s: expected {\"fusion_patterns\": [{\"ops\": [...], \"constraints\": {...}}]}",
                         src);
    ct_fusion_rules *r = NULL;
    if (s == CT_OK) {
        r = calloc(1, sizeof *r);
        int n = cJSON_GetArraySize(list);
        if (r) r->r = calloc((size_t)(n ? n : 1), sizeof *r->r);
        if (!r || !r->r) s = ct_set_error(ctx, CT_E_OOM, "%s: out of memory", src);
        for (int i = 0; s == CT_OK && i < n; i++) {
            s = parse_rule(ctx, src, i, cJSON_GetArrayItem(list, i), &r->r[i]);
            if (s == CT_OK) r->n++;
        }
    }
    cJSON_Delete(root);
    if (s != CT_OK) {
        ct_fusion_rules_free(r);
        return s;
    }
    *out = r;
    return CT_OK;
}

ct_status ct_fusion_rules_load(ct_context *ctx, const char *path, ct_fusion_rules **out) {
    if (!path || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ct_set_error(ctx, CT_E_IO, "fusion rules '%s': cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    ct_status s = CT_OK;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t nc = cap ? 2 * cap : 8192;
            if (nc > ((size_t)64 << 20)) {
                s = ct_set_error(ctx, CT_E_CONFIG, "fusion rules '%s': larger than 64 MiB", path);
                break;
            }
            char *nb = realloc(buf, nc);
            if (!nb) {
                s = ct_set_error(ctx, CT_E_OOM, "fusion rules '%s': out of memory", path);
                break;
            }
            buf = nb;
            cap = nc;
        }
        size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    if (s == CT_OK && ferror(f)) s = ct_set_error(ctx, CT_E_IO, "fusion rules '%s': read error", path);
    fclose(f);
    if (s == CT_OK) {
        buf[len] = 0;
        s = ct_fusion_rules_parse(ctx, buf, path, out);
    }
    free(buf);
    return s;
}

/* ---- matching ------------------------------------------------------------------------------------------- */

typedef struct {
    ct_node node;
    int slot;
} reader;

#define MAX_READERS 16

/* Every (node, input slot) reading v; returns how many (more than max: max + 1). */
static int readers_of(const ct_graph *g, ct_node v, reader *r, int max) {
    int n = 0;
    for (int i = v + 1; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++)
            if (g->nodes[i].in[j] == v) {
                if (n == max) return max + 1;
                r[n++] = (reader){i, j};
            }
    return n;
}

static int plain_f32(const ct_node_def *d) { return d->dtype == CT_F32 && !(d->flags & CT_NODE_RECOMPUTE); }
/* batchnorm+relu also fuses in BF16 / FP16 plans (its fast kernels take BF16 I/O, FP16 runs on FP32 copies) */
static int plain_float(const ct_node_def *d) { return ct_dtype_is_float(d->dtype) && !(d->flags & CT_NODE_RECOMPUTE); }
static int forward(const ct_node_def *d) { return !(d->flags & CT_NODE_BACKWARD); }

/* v is the loss or an output kept for the user: it must stay. */
static int kept(const ct_plan *p, ct_node v) {
    if (v == p->loss) return 1;
    for (int i = 0; i < p->n_outputs; i++)
        if (p->outputs[i] == v) return 1;
    return 0;
}

static int usable(const ct_plan *p, ct_node v) {
    const ct_node_def *d = &p->g.nodes[v];
    return plain_f32(d) && forward(d) && !kept(p, v);
}

/* Does rule r hold for the match whose fused output is node `out` (conv: node c)? */
static int rule_holds(const ct_plan *p, const fusion_rule *r, ct_node out, ct_node conv) {
    const ct_graph *g = &p->g;
    const ct_node_def *o = &g->nodes[out];
    if (r->dtype >= 0 && o->dtype != (ct_dtype)r->dtype) return 0;
    if (r->max_elements >= 0 && ct_node_numel(o) > r->max_elements) return 0;
    if (conv == CT_NONE) return 1;
    const ct_node_def *c = &g->nodes[conv], *x = &g->nodes[c->in[0]];
    if (r->stride >= 0 && c->ia[0] != r->stride) return 0;
    if (r->dilation >= 0 && c->ia[2] != r->dilation) return 0;
    if (r->groups >= 0 && c->ia[3] != r->groups) return 0;
    int64_t s = c->ia[0];
    switch (r->padding) {
    case PAD_SAME: return c->shape[2] == (x->shape[2] + s - 1) / s && c->shape[3] == (x->shape[3] + s - 1) / s;
    case PAD_VALID: return c->ia[1] == 0;
    case PAD_EXPLICIT: return c->ia[1] == r->pad;
    default: return 1;
    }
}

typedef struct {
    ct_plan *p;
    int *hits; /* per rule */
} fz;

/* Whether pattern `pat` may apply to this match: the rules naming it decide
 * when there are any (the first that holds is counted), else the level.
 * *rule: the rule that enabled it, or -1. */
static int enabled(fz *f, int pat, ct_node out, ct_node conv, int *rule) {
    const ct_fusion_rules *rs = f->p->fusion_rules;
    int named = 0;
    *rule = -1;
    for (int i = 0; rs && i < rs->n; i++) {
        if (rs->r[i].pattern != pat) continue;
        named = 1;
        if (rule_holds(f->p, &rs->r[i], out, conv)) {
            *rule = i;
            return 1;
        }
    }
    return !named && k_patterns[pat].level <= f->p->fusion_level;
}

static ct_status add_group(fz *f, int pat, int rule, ct_node fused, const char *absorbed) {
    ct_plan *p = f->p;
    ct_fused_group *ng = realloc(p->groups, sizeof *ng * (size_t)(p->n_groups + 1));
    if (!ng) return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory in the fusion pass");
    p->groups = ng;
    ct_fused_group *gr = &p->groups[p->n_groups];
    memset(gr, 0, sizeof *gr);
    gr->pattern = pat;
    gr->rule = rule;
    gr->nodes[gr->n_nodes++] = fused;
    snprintf(gr->absorbed[0], CT_NAME_LEN, "%s", absorbed);
    p->fused_group[fused] = p->n_groups;
    p->n_groups++;
    if (rule >= 0) f->hits[rule]++;
    return CT_OK;
}

static void group_add_node(ct_plan *p, ct_node n) {
    ct_fused_group *gr = &p->groups[p->n_groups - 1];
    if (gr->n_nodes < (int)(sizeof gr->nodes / sizeof gr->nodes[0])) gr->nodes[gr->n_nodes++] = n;
    p->fused_group[n] = p->n_groups - 1;
}

/* Replaces fused-away producer `from` by `to` in the backward nodes reading
 * it for its saved state only. */
static void repoint(ct_plan *p, const reader *r, int nr, ct_node from, ct_node to) {
    for (int i = 0; i < nr; i++)
        if (p->g.nodes[r[i].node].in[r[i].slot] == from && r[i].node != to) {
            p->g.nodes[r[i].node].in[r[i].slot] = to;
            group_add_node(p, r[i].node);
        }
}

/* Writes fused node nd at `at` (the consumer's place; its group names the
 * absorbed node `absorbed`, copied first: it may be the node overwritten)
 * and points the saved-state readers r of the absorbed producer `from` (if
 * any) at it. */
static ct_status install(fz *f, int pat, int rule, ct_node at, const ct_node_def *nd, const char *absorbed,
                         const reader *r, int nr, ct_node from) {
    char name[CT_NAME_LEN];
    snprintf(name, sizeof name, "%s", absorbed);
    f->p->g.nodes[at] = *nd;
    CT_TRY(add_group(f, pat, rule, at, name));
    if (r) repoint(f->p, r, nr, from, at);
    return CT_OK;
}

/* conv2d (no bias) + add of a channel vector / linear (no bias) + add of a [O] vector. */
static ct_status try_bias(fz *f, ct_node a, int *done) {
    ct_graph *g = &f->p->g;
    const ct_node_def *A = &g->nodes[a];
    *done = 0;
    if (A->op != CT_OP_BINARY || A->ia[0] != CT_BIN_ADD || !plain_f32(A) || !forward(A)) return CT_OK;
    for (int side = 0; side < 2; side++) {
        ct_node c = A->in[side], b = A->in[1 - side];
        const ct_node_def *C = &g->nodes[c], *B = &g->nodes[b];
        int conv = C->op == CT_OP_CONV2D, lin = C->op == CT_OP_LINEAR;
        if ((!conv && !lin) || C->n_in != 2 || !usable(f->p, c) || B->dtype != CT_F32) continue;
        if (C->ndim != A->ndim || memcmp(C->shape, A->shape, sizeof(int64_t) * (size_t)A->ndim)) continue;
        /* b: exactly one non-1 dim, the channel (conv: dim 1 of NCHW, the last of NHWC; linear: the last) */
        int last = !conv || C->ia[4];
        int64_t ch = last ? C->shape[C->ndim - 1] : C->shape[1];
        int at = last ? C->ndim - 1 : C->ndim - 3, off = C->ndim - B->ndim, ok = B->ndim >= 1 && off >= 0;
        for (int k = 0; ok && k < B->ndim; k++) ok = B->shape[k] == (k + off == at ? ch : 1);
        if (!ok) continue;
        reader r[MAX_READERS];
        int nr = readers_of(g, c, r, MAX_READERS);
        if (nr > MAX_READERS) continue;
        int fwd_reads = 0;
        for (int i = 0; i < nr && ok; i++) {
            ct_op op = g->nodes[r[i].node].op;
            if (r[i].node == a) fwd_reads++;
            else ok = conv && (op == CT_OP_CONV2D_BWD_DATA || op == CT_OP_CONV2D_BWD_WEIGHT) && r[i].slot == 2;
        }
        if (!ok || fwd_reads != 1) continue;
        int pat = conv ? PAT_CONV_BIAS : PAT_LINEAR_BIAS, rule;
        if (!enabled(f, pat, a, conv ? c : CT_NONE, &rule)) continue;
        ct_node_def nd = *C;
        nd.n_in = 3;
        nd.in[2] = b;
        nd.flags = A->flags;
        CT_TRY(install(f, pat, rule, a, &nd, A->name, r, nr, c));
        *done = 1;
        return CT_OK;
    }
    return CT_OK;
}

/* relu(batchnorm(x)) -> BN_RELU; relu's backward -> RELU_MASK_BWD. */
static ct_status try_bn_relu(fz *f, ct_node u, int *done) {
    ct_graph *g = &f->p->g;
    const ct_node_def *U = &g->nodes[u];
    *done = 0;
    if (U->op != CT_OP_UNARY || U->ia[0] != CT_UNARY_RELU || !plain_float(U) || !forward(U)) return CT_OK;
    ct_node b = U->in[0];
    const ct_node_def *B = &g->nodes[b];
    if (B->op != CT_OP_BATCHNORM || !plain_float(B) || !forward(B) || kept(f->p, b) || B->dtype != U->dtype) return CT_OK;
    reader r[MAX_READERS], ru[MAX_READERS];
    int nr = readers_of(g, b, r, MAX_READERS), fwd_reads = 0, ok = nr <= MAX_READERS;
    for (int i = 0; ok && i < nr; i++) {
        ct_op op = g->nodes[r[i].node].op;
        if (r[i].node == u) fwd_reads++;
        else ok = (op == CT_OP_BATCHNORM_BWD_DATA && r[i].slot == 3) || (op == CT_OP_BATCHNORM_BWD_GAMMA && r[i].slot == 2);
    }
    int nu = readers_of(g, u, ru, MAX_READERS);
    if (!ok || fwd_reads != 1 || nu > MAX_READERS) return CT_OK;
    int rule;
    if (!enabled(f, PAT_BN_RELU, u, CT_NONE, &rule)) return CT_OK;
    ct_node_def nd = *B;
    nd.op = CT_OP_BN_RELU;
    nd.flags = U->flags | (B->flags & CT_NODE_KEEP_STATS);
    snprintf(nd.name, sizeof nd.name, "%s", B->name);
    ct_dtype udt = U->dtype; /* U is overwritten */
    CT_TRY(install(f, PAT_BN_RELU, rule, u, &nd, U->name, r, nr, b));
    for (int i = 0; i < nu; i++) { /* relu's backward (from the output): the mask bits */
        ct_node_def *R = &g->nodes[ru[i].node];
        if (R->op == CT_OP_UNARY_BWD && R->ia[0] == CT_UNARY_RELU && ru[i].slot == 1 && R->n_in == 2 &&
            R->dtype == udt) {
            R->op = CT_OP_RELU_MASK_BWD;
            group_add_node(f->p, ru[i].node);
        }
    }
    *done = 1;
    return CT_OK;
}

/* A reshape of v read only as the second operand of weight-gradient
 * matmuls (matmul(dy^T, x) of a linear's backward). */
static int reshape_for_dw(const ct_graph *g, ct_node rs, ct_node v) {
    const ct_node_def *R = &g->nodes[rs], *V = &g->nodes[v];
    if (R->op != CT_OP_RESHAPE || R->ndim != 2 || R->shape[1] != V->shape[V->ndim - 1]) return 0;
    reader r[MAX_READERS];
    int nr = readers_of(g, rs, r, MAX_READERS);
    if (nr < 1 || nr > MAX_READERS) return 0;
    for (int i = 0; i < nr; i++) {
        const ct_node_def *M = &g->nodes[r[i].node];
        if (M->op != CT_OP_MATMUL || r[i].slot != 1 || M->ia[0] != 1 || M->ia[1] != 0 || M->dtype != CT_F32) return 0;
    }
    return 1;
}

/* After gelu+linear: the activation's backward d = UNARY_BWD(a, h) (a the
 * linear's dx) runs after the weight gradient m = MATMUL_PRO(u, h), which
 * recomputes act(h). Instead d keeps the activation (UNARY_BWD_KEEP, one pass
 * over h for both) and the weight gradient reads it (MATMUL_AUX) after it.
 * Autodiff emits a linear's weight gradient before its dx (m < a < d), so
 * the three rotate: a's matmul moves to m's place, the keep node to a's and
 * the weight gradient to d's. (With a < m the two swap places.) Node ids stay
 * topological: a's inputs come before m, a's and d's readers after them, and
 * every reader of m comes after d (else nothing changes). */
static void keep_activation(ct_plan *p, ct_node h, int kind, ct_node m) {
    ct_graph *g = &p->g;
    reader r[MAX_READERS], rd[MAX_READERS], rm[MAX_READERS], ra[MAX_READERS];
    int nr = readers_of(g, h, r, MAX_READERS);
    if (nr > MAX_READERS) return;
    ct_node d = CT_NONE;
    for (int i = 0; i < nr; i++) {
        const ct_node_def *D = &g->nodes[r[i].node];
        if (D->op != CT_OP_UNARY_BWD || D->ia[0] != kind || D->ia[1] != 0 || D->n_in != 2 || r[i].slot != 1 ||
            !plain_f32(D) || forward(D))
            continue;
        if (d != CT_NONE) return; /* two backwards of one activation: leave them */
        d = r[i].node;
    }
    if (d == CT_NONE || d <= m || g->nodes[d].in[1] >= m) return;
    ct_node a = g->nodes[d].in[0];
    int rotate = a > m, na = 0;
    if (rotate) {
        const ct_node_def *A = &g->nodes[a];
        if (p->fused_group[a] >= 0 || A->op == CT_OP_RESHAPE) return;
        for (int j = 0; j < A->n_in; j++)
            if (A->in[j] >= m) return;
        na = readers_of(g, a, ra, MAX_READERS);
        if (na > MAX_READERS) return;
    } else if (a == m) {
        return;
    }
    int nd = readers_of(g, d, rd, MAX_READERS), nm = readers_of(g, m, rm, MAX_READERS);
    if (nd > MAX_READERS || nm > MAX_READERS) return;
    for (int i = 0; i < nm; i++)
        if (rm[i].node <= d) return;
    ct_node k = rotate ? a : m; /* where the keep node goes */
    ct_node_def K = g->nodes[d], M = g->nodes[m], A = g->nodes[a];
    K.op = CT_OP_UNARY_BWD_KEEP;
    M.op = CT_OP_MATMUL_AUX;
    M.n_in = 2;
    M.in[1] = k; /* the keep node, read for its aux */
    for (int j = 2; j < (int)(sizeof M.ia / sizeof M.ia[0]); j++) M.ia[j] = 0;
    M.fa[0] = 0.0f;
    if (rotate) {
        K.in[0] = m;
        g->nodes[m] = A;
        for (int i = 0; i < na; i++)
            if (ra[i].node != d) g->nodes[ra[i].node].in[ra[i].slot] = m;
        /* m left the group for a (the keep node) */
        ct_fused_group *gr = &p->groups[p->fused_group[m]];
        for (int i = 0; i < gr->n_nodes; i++)
            if (gr->nodes[i] == m) gr->nodes[i] = a;
        p->fused_group[a] = p->fused_group[m];
        p->fused_group[m] = -1;
    }
    g->nodes[k] = K;
    g->nodes[d] = M;
    for (int i = 0; i < nd; i++) g->nodes[rd[i].node].in[rd[i].slot] = k;
    for (int i = 0; i < nm; i++) g->nodes[rm[i].node].in[rm[i].slot] = d;
    for (int i = 0; i < p->n_params; i++) { /* any of them may be a parameter's gradient */
        ct_node q = p->param_grads[i];
        p->param_grads[i] = q == m ? d : q == d ? k : rotate && q == a ? m : q;
    }
    group_add_node(p, d);
}

/* linear(act(h)) / linear(layernorm(x)) -> LINEAR_PRO; its weight gradient -> MATMUL_PRO. */
static ct_status try_pro(fz *f, ct_node l, int *done) {
    ct_graph *g = &f->p->g;
    const ct_node_def *L = &g->nodes[l];
    *done = 0;
    if (L->op != CT_OP_LINEAR || !plain_f32(L) || !forward(L)) return CT_OK;
    ct_node v = L->in[0];
    const ct_node_def *V = &g->nodes[v];
    int act = V->op == CT_OP_UNARY &&
              (V->ia[0] == CT_UNARY_GELU || V->ia[0] == CT_UNARY_GELU_TANH || V->ia[0] == CT_UNARY_SILU);
    int ln = V->op == CT_OP_LAYERNORM;
    if ((!act && !ln) || !usable(f->p, v) || g->nodes[V->in[0]].dtype != CT_F32) return CT_OK;
    if (L->n_in + V->n_in - 1 > CT_MAX_INPUTS) return CT_OK;
    reader r[MAX_READERS];
    int nr = readers_of(g, v, r, MAX_READERS), fwd_reads = 0, ok = nr <= MAX_READERS;
    for (int i = 0; ok && i < nr; i++) {
        const ct_node_def *R = &g->nodes[r[i].node];
        if (r[i].node == l) fwd_reads += r[i].slot == 0 ? 1 : 2; /* only as x */
        else if (R->op == CT_OP_RESHAPE) ok = reshape_for_dw(g, r[i].node, v);
        else ok = ln && ((R->op == CT_OP_LAYERNORM_BWD_DATA && r[i].slot == 3) ||
                         (R->op == CT_OP_LAYERNORM_BWD_GAMMA && r[i].slot == 2));
    }
    if (!ok || fwd_reads != 1) return CT_OK;
    int pat = act ? PAT_ACT_LINEAR : PAT_LN_LINEAR, rule;
    if (!enabled(f, pat, l, CT_NONE, &rule)) return CT_OK;
    /* the fused forward: x, w[, b] then the prologue's parameters */
    ct_node_def nd = *L, vd = *V;
    nd.op = CT_OP_LINEAR_PRO;
    nd.in[0] = vd.in[0];
    int k = L->n_in;
    nd.ia[0] = act ? CT_PRO_UNARY : CT_PRO_LAYERNORM;
    nd.ia[1] = act ? vd.ia[0] : 0;
    nd.ia[2] = L->n_in > 2 ? 2 : -1;
    nd.ia[3] = nd.ia[4] = -1;
    nd.fa[0] = ln ? vd.fa[0] : 0.0f;
    if (ln) {
        nd.ia[3] = k;
        nd.in[k++] = vd.in[1];
        if (vd.n_in > 2) {
            nd.ia[4] = k;
            nd.in[k++] = vd.in[2];
        }
    }
    nd.n_in = k;
    g->nodes[l] = nd;
    CT_TRY(add_group(f, pat, rule, l, vd.name));
    if (ln) { /* layernorm backward: the statistics are in l's aux now */
        reader lr[MAX_READERS];
        int nl = 0;
        for (int i = 0; i < nr; i++) {
            ct_op op = g->nodes[r[i].node].op;
            if (op == CT_OP_LAYERNORM_BWD_DATA || op == CT_OP_LAYERNORM_BWD_GAMMA) lr[nl++] = r[i];
        }
        repoint(f->p, lr, nl, v, l);
    }
    for (int i = 0; i < nr; i++) {
        if (g->nodes[r[i].node].op != CT_OP_RESHAPE || g->nodes[r[i].node].in[0] != v) continue;
        reader m[MAX_READERS];
        int nm = readers_of(g, r[i].node, m, MAX_READERS);
        for (int j = 0; j < nm && j < MAX_READERS; j++) {
            ct_node_def *M = &g->nodes[m[j].node];
            M->op = CT_OP_MATMUL_PRO;
            M->in[1] = vd.in[0];
            M->ia[2] = nd.ia[0];
            M->ia[3] = nd.ia[1];
            M->ia[4] = M->ia[7] = -1;
            M->fa[0] = nd.fa[0];
            int q = 2;
            if (ln) {
                M->ia[4] = q;
                M->in[q++] = vd.in[1];
                if (vd.n_in > 2) {
                    M->ia[7] = q;
                    M->in[q++] = vd.in[2];
                }
            }
            M->n_in = q;
            group_add_node(f->p, m[j].node);
            if (act && nm == 1) keep_activation(f->p, vd.in[0], (int)vd.ia[0], m[j].node);
        }
    }
    *done = 1;
    return CT_OK;
}

/* r + dropout(a) -> DROPOUT_ADD (the dropout's backward reads only dy). */
static ct_status try_dropout_add(fz *f, ct_node n, int *done) {
    ct_graph *g = &f->p->g;
    const ct_node_def *A = &g->nodes[n];
    *done = 0;
    if (A->op != CT_OP_BINARY || A->ia[0] != CT_BIN_ADD || !plain_f32(A) || !forward(A)) return CT_OK;
    for (int side = 0; side < 2; side++) {
        ct_node d = A->in[side], r = A->in[1 - side];
        const ct_node_def *D = &g->nodes[d], *R = &g->nodes[r];
        /* not drop path (ia[1] > 0: one decision per row; dropout+add draws one per element) */
        if (D->op != CT_OP_DROPOUT || D->ia[1] > 0 || !usable(f->p, d) || R->dtype != CT_F32 || d == r) continue;
        if (D->ndim != A->ndim || R->ndim != A->ndim || memcmp(D->shape, A->shape, sizeof(int64_t) * (size_t)A->ndim) ||
            memcmp(R->shape, A->shape, sizeof(int64_t) * (size_t)A->ndim) || g->nodes[D->in[0]].dtype != CT_F32)
            continue;
        reader rd[2];
        if (readers_of(g, d, rd, 1) != 1) continue; /* the add only */
        int rule;
        if (!enabled(f, PAT_DROPOUT_ADD, n, CT_NONE, &rule)) continue;
        ct_node_def nd = *A;
        nd.op = CT_OP_DROPOUT_ADD;
        nd.n_in = 2;
        nd.in[0] = D->in[0];
        nd.in[1] = r;
        nd.fa[0] = D->fa[0];
        nd.ia[0] = D->ia[0];
        CT_TRY(install(f, PAT_DROPOUT_ADD, rule, n, &nd, D->name, NULL, 0, CT_NONE));
        *done = 1;
        return CT_OK;
    }
    return CT_OK;
}

/* relu(linear / conv2d) -> GEMM_RELU; relu(a + b) -> ADD_RELU. relu's
 * backward reads the output, which the fused node still writes. */
static ct_status try_relu_tail(fz *f, ct_node u, int *done) {
    ct_graph *g = &f->p->g;
    const ct_node_def *U = &g->nodes[u];
    *done = 0;
    if (U->op != CT_OP_UNARY || U->ia[0] != CT_UNARY_RELU || !plain_f32(U) || !forward(U)) return CT_OK;
    ct_node c = U->in[0];
    const ct_node_def *C = &g->nodes[c];
    int conv = C->op == CT_OP_CONV2D, lin = C->op == CT_OP_LINEAR;
    int add = C->op == CT_OP_BINARY && C->ia[0] == CT_BIN_ADD;
    if ((!conv && !lin && !add) || !usable(f->p, c)) return CT_OK;
    if (add) {
        for (int j = 0; j < 2; j++) {
            const ct_node_def *X = &g->nodes[C->in[j]];
            if (X->dtype != CT_F32 || X->ndim != C->ndim || memcmp(X->shape, C->shape, sizeof(int64_t) * (size_t)C->ndim))
                return CT_OK;
        }
    }
    reader r[MAX_READERS];
    int nr = readers_of(g, c, r, MAX_READERS), fwd_reads = 0, ok = nr <= MAX_READERS;
    for (int i = 0; ok && i < nr; i++) {
        ct_op op = g->nodes[r[i].node].op;
        if (r[i].node == u) fwd_reads++;
        else ok = conv && (op == CT_OP_CONV2D_BWD_DATA || op == CT_OP_CONV2D_BWD_WEIGHT) && r[i].slot == 2;
    }
    if (!ok || fwd_reads != 1) return CT_OK;
    int pat = conv ? PAT_CONV_RELU : lin ? PAT_LINEAR_RELU : PAT_ADD_RELU, rule;
    if (!enabled(f, pat, u, conv ? c : CT_NONE, &rule)) return CT_OK;
    ct_node_def nd = *C;
    nd.flags = U->flags;
    if (add) {
        nd.op = CT_OP_ADD_RELU;
        snprintf(nd.name, sizeof nd.name, "%s", U->name);
    } else {
        nd.op = CT_OP_GEMM_RELU;
        nd.ia[6] = C->op;
    }
    CT_TRY(install(f, pat, rule, u, &nd, add ? C->name : U->name, r, nr, c));
    *done = 1;
    return CT_OK;
}

/* Autocast's casts around BF16 / FP16 nodes. A widening cast (16-bit ->
 * FP32) whose readers all read BF16 / FP16 themselves (ct_op_info.simd_lowp)
 * goes: they read its 16-bit input (the conversion is exact). A narrowing
 * cast (FP32 -> 16-bit) that is the only data reader of a producer whose
 * kernels write BF16 / FP16 becomes that producer writing the 16-bit dtype
 * (the same rounding as the cast); the producer's saved-state readers (a
 * layernorm's backward) follow it. No pass and no FP32 buffer for the cast;
 * results bit for bit. */
static ct_status try_cast_fold(fz *f, ct_node c, int *done) {
    ct_graph *g = &f->p->g;
    const ct_node_def *C = &g->nodes[c];
    *done = 0;
    if (C->op != CT_OP_CAST || (C->flags & CT_NODE_RECOMPUTE) || kept(f->p, c)) return CT_OK;
    ct_node x = C->in[0];
    const ct_node_def *X = &g->nodes[x];
    int widen = ct_dtype_is_low(X->dtype) && C->dtype == CT_F32, narrow = X->dtype == CT_F32 && ct_dtype_is_low(C->dtype);
    if (!widen && !narrow) return CT_OK;
    reader r[MAX_READERS];
    int nr = readers_of(g, widen ? c : x, r, MAX_READERS), rule;
    if (nr < 1 || nr > MAX_READERS) return CT_OK;
    if (widen) {
        for (int i = 0; i < nr; i++) {
            const ct_op_info *info = ct_op_table(g->nodes[r[i].node].op);
            if (!info->simd_lowp || (info->state_inputs & (1u << r[i].slot))) return CT_OK;
        }
        if (!enabled(f, PAT_CAST_FOLD, c, CT_NONE, &rule)) return CT_OK;
        CT_TRY(add_group(f, PAT_CAST_FOLD, rule, r[0].node, C->name));
        for (int i = 0; i < nr; i++) {
            g->nodes[r[i].node].in[r[i].slot] = x;
            if (i && f->p->fused_group[r[i].node] < 0) group_add_node(f->p, r[i].node);
        }
        *done = 1;
        return CT_OK;
    }
    /* narrow: x's readers are the cast (its data) and state readers after c. x may be in a group only as
       a reader an earlier widening fold pointed at 16-bit data (cross_entropy_bwd reading the BF16 logits):
       the node moves to c, and that group lists c instead */
    const ct_op_info *xi = ct_op_table(X->op);
    const int xg = f->p->fused_group[x];
    const int reader_only = xg >= 0 && f->p->groups[xg].pattern == PAT_CAST_FOLD && f->p->groups[xg].nodes[0] != x;
    if (!xi->simd_lowp || (X->flags & CT_NODE_RECOMPUTE) || kept(f->p, x) || (xg >= 0 && !reader_only)) return CT_OK;
    int data_reads = 0;
    for (int i = 0; i < nr; i++) {
        const ct_node_def *R = &g->nodes[r[i].node];
        if (r[i].node == c) data_reads++;
        else if (!(ct_op_table(R->op)->state_inputs & (1u << r[i].slot)) || r[i].node < c) return CT_OK;
    }
    if (data_reads != 1 || !enabled(f, PAT_CAST_FOLD, c, CT_NONE, &rule)) return CT_OK;
    ct_node_def nd = *X;
    nd.dtype = C->dtype;
    nd.flags = C->flags | (X->flags & CT_NODE_KEEP_STATS);
    CT_TRY(install(f, PAT_CAST_FOLD, rule, c, &nd, C->name, r, nr, x));
    if (reader_only) {
        ct_fused_group *og = &f->p->groups[xg];
        for (int i = 1; i < og->n_nodes; i++)
            if (og->nodes[i] == x) og->nodes[i] = c;
        f->p->fused_group[x] = -1;
    }
    *done = 1;
    return CT_OK;
}

/* A reader of v that nothing reads and nothing keeps: the liveness pass drops
 * it (a producer a fusion absorbed, e.g. cast_fold's layernorm). */
static int dead_reader(const ct_plan *p, ct_node r) {
    reader rr[1];
    return readers_of(&p->g, r, rr, 1) == 0 && !kept(p, r) && !ct_plan_is_param_grad(p, r);
}

/* v is read by a node that is not itself dead, or kept: a layernorm that layernorm+linear took into
 * the next linear is read only by the reshape its weight gradient read before (now dead) */
static int used(const ct_plan *p, ct_node v) {
    reader r[MAX_READERS];
    int nr = readers_of(&p->g, v, r, MAX_READERS);
    if (nr > MAX_READERS || kept(p, v) || ct_plan_is_param_grad(p, v)) return 1;
    for (int i = 0; i < nr; i++)
        if (!dead_reader(p, r[i].node)) return 1;
    return 0;
}

/* Forward: layernorm(s) with s = add(a, b), same shape (not a broadcast bias),
 * s read later as well -> the layernorm becomes ADD_LAYERNORM(a, b, s, gamma[,
 * beta]) and the add ADD_LN_SUM (no kernel): the fused node writes s into the
 * add's buffer row by row and normalizes each row from L1 (one pass instead of
 * the add's pass and the layernorm's reads). s keeps its node, buffer and
 * readers (the layernorm's backward reads it as x; its statistics stay in the
 * fused node's aux). The add's buffer lives from the add's place on, so the
 * planner keeps it through the fused node's write; every other live reader of
 * s must come after the layernorm (none may read it before it is written). The
 * layernorm may already write BF16 (a cast_fold): the fused node takes it over.
 * Any float dtype; after cast_fold (a fused layernorm no longer takes a cast). Not a layernorm
 * layernorm+linear took (level 2, no dropout+add in between): the fused node would be dead, and the
 * sum, whose node no longer computes it, never written. */
static ct_status try_add_ln(fz *f, ct_node l, int *done) {
    ct_plan *p = f->p;
    ct_graph *g = &p->g;
    const ct_node_def *L = &g->nodes[l];
    *done = 0;
    if (L->op != CT_OP_LAYERNORM || !forward(L) || !plain_float(L) || L->n_in < 2 || L->n_in > 3 || !used(p, l))
        return CT_OK;
    if (p->fused_group[l] >= 0 && p->groups[p->fused_group[l]].pattern != PAT_CAST_FOLD) return CT_OK;
    ct_node s = L->in[0];
    const ct_node_def *S = &g->nodes[s];
    if (S->op != CT_OP_BINARY || S->ia[0] != CT_BIN_ADD || S->n_in != 2 || !forward(S) || !plain_float(S) ||
        p->fused_group[s] >= 0)
        return CT_OK;
    for (int j = 0; j < 2; j++) {
        const ct_node_def *X = &g->nodes[S->in[j]];
        if (!ct_dtype_is_float(X->dtype) || X->ndim != S->ndim ||
            memcmp(X->shape, S->shape, sizeof(int64_t) * (size_t)S->ndim))
            return CT_OK;
    }
    for (int j = 1; j < L->n_in; j++)
        if (L->in[j] == s) return CT_OK;
    reader r[MAX_READERS];
    int nr = readers_of(g, s, r, MAX_READERS);
    if (nr > MAX_READERS) return CT_OK;
    for (int i = 0; i < nr; i++)
        if (r[i].node < l && !dead_reader(p, r[i].node)) return CT_OK;
    int rule;
    if (!enabled(f, PAT_ADD_LN, l, CT_NONE, &rule)) return CT_OK;
    ct_node_def nd = *L, sd = *S;
    nd.op = CT_OP_ADD_LAYERNORM;
    nd.in[0] = sd.in[0];
    nd.in[1] = sd.in[1];
    nd.in[2] = s;
    nd.in[3] = L->in[1];
    if (L->n_in > 2) nd.in[4] = L->in[2];
    nd.n_in = L->n_in + 2;
    memset(nd.ia, 0, sizeof nd.ia);
    nd.ia[0] = sd.dtype; /* the sum's dtype: a reference on FP32 copies rounds to it */
    sd.op = CT_OP_ADD_LN_SUM;
    g->nodes[l] = nd;
    g->nodes[s] = sd;
    CT_TRY(add_group(f, PAT_ADD_LN, rule, l, sd.name));
    group_add_node(p, s);
    *done = 1;
    return CT_OK;
}

/* Backward: add(layernorm_bwd_data(dy, x, gamma, fwd), r) -> layernorm_bwd_data
 * with r as its 5th input: the kernel adds r's row to the row of dx it just
 * wrote (rounded to the node's dtype), exactly the unfused add. Any float
 * dtype (the SIMD kernel reads BF16 / FP16); dx must be read by the add only. */
/* Node n is a backward add of two distinct operands, not in a group yet. */
static int backward_add(const fz *f, ct_node n) {
    const ct_node_def *A = &f->p->g.nodes[n];
    return A->op == CT_OP_BINARY && A->ia[0] == CT_BIN_ADD && A->n_in == 2 && !forward(A) && plain_float(A) &&
           A->in[0] != A->in[1] && f->p->fused_group[n] < 0;
}

/* The backward add n's operand `side` is a backward node of op `op` with n_in inputs that the add alone
 * reads, neither kept nor a parameter's gradient; both operands have the add's dtype and shape (what a
 * fused node that adds the other operand in its own pass needs). */
static int sole_operand(const fz *f, ct_node n, int side, ct_op op, int n_in) {
    const ct_graph *g = &f->p->g;
    const ct_node_def *A = &g->nodes[n];
    ct_node l = A->in[side];
    const ct_node_def *L = &g->nodes[l], *R = &g->nodes[A->in[1 - side]];
    if (L->op != op || L->n_in != n_in || forward(L) || !plain_float(L) || kept(f->p, l) || L->dtype != A->dtype ||
        R->dtype != A->dtype)
        return 0;
    if (L->ndim != A->ndim || R->ndim != A->ndim || memcmp(L->shape, A->shape, sizeof(int64_t) * (size_t)A->ndim) ||
        memcmp(R->shape, A->shape, sizeof(int64_t) * (size_t)A->ndim))
        return 0;
    reader rd[2];
    return readers_of(g, l, rd, 1) == 1 && !ct_plan_is_param_grad(f->p, l); /* the add only */
}

static ct_status try_ln_bwd_add(fz *f, ct_node n, int *done) {
    ct_graph *g = &f->p->g;
    const ct_node_def *A = &g->nodes[n];
    *done = 0;
    if (!backward_add(f, n)) return CT_OK;
    for (int side = 0; side < 2; side++) {
        ct_node l = A->in[side], r = A->in[1 - side];
        const ct_node_def *L = &g->nodes[l];
        /* (l may be in a cast_fold group as its layernorm's state reader: that stays) */
        int rule;
        if (!sole_operand(f, n, side, CT_OP_LAYERNORM_BWD_DATA, 4) || !enabled(f, PAT_LN_BWD_ADD, n, CT_NONE, &rule))
            continue;
        ct_node_def nd = *L;
        nd.n_in = 5;
        nd.in[4] = r;
        nd.flags = A->flags;
        snprintf(nd.name, sizeof nd.name, "%s", A->name);
        CT_TRY(install(f, PAT_LN_BWD_ADD, rule, n, &nd, L->name, NULL, 0, CT_NONE));
        *done = 1;
        return CT_OK;
    }
    return CT_OK;
}

/* ---- column sums in their producer's row pass ------------------------------------------------------ */

/* Node s sums the (R, D) rows of v over every dim but the last as the
 * SIMD sum's column path does (at least 2 rows and 2 columns, so that its
 * view is (R, D)), after `after`. */
static int col_sum_of(const ct_plan *p, ct_node s, ct_node v, ct_node after) {
    const ct_node_def *S = &p->g.nodes[s], *V = &p->g.nodes[v];
    if (S->op != CT_OP_SUM || S->n_in != 1 || S->in[0] != v || s <= after || forward(S) || !plain_float(S) ||
        V->ndim < 2 || S->ia[0] != (int64_t)(((1u << V->ndim) - 1) & ~(1u << (V->ndim - 1))))
        return 0;
    int64_t D = V->shape[V->ndim - 1];
    return D >= 2 && ct_node_numel(V) / D >= 2 && ct_node_numel(S) == D;
}

/* The column sum of producer q's output (or of its narrowing cast, *rdt: the dtype summed), -1: none */
static ct_node out_col_sum(const ct_plan *p, ct_node q, ct_dtype *rdt) {
    const ct_graph *g = &p->g;
    reader r[MAX_READERS];
    int nr = readers_of(g, q, r, MAX_READERS);
    for (int i = 0; i < nr && i < MAX_READERS; i++) {
        ct_node c = r[i].node;
        const ct_node_def *C = &g->nodes[c];
        if (col_sum_of(p, c, q, q)) {
            *rdt = g->nodes[q].dtype;
            return c;
        }
        if (C->op == CT_OP_CAST && !(C->flags & CT_NODE_RECOMPUTE) && g->nodes[q].dtype == CT_F32 &&
            ct_dtype_is_low(C->dtype)) {
            reader rc[MAX_READERS];
            int nc = readers_of(g, c, rc, MAX_READERS);
            for (int k = 0; k < nc && k < MAX_READERS; k++)
                if (col_sum_of(p, rc[k].node, c, q)) {
                    *rdt = C->dtype;
                    return rc[k].node;
                }
        }
    }
    return CT_NONE;
}

/* batchnorm_bwd+colsum: q's dy, if it is the relu_mask_bwd of q's own
 * batchnorm+relu read by nothing else once q's dgamma and dbeta (gamma,
 * sum) read q: q reads the mask bits itself (ia[5]) and r is dead */
static void fold_relu_mask(ct_plan *p, ct_node q, ct_node gamma, ct_node sum) {
    ct_graph *g = &p->g;
    ct_node_def *Q = &g->nodes[q];
    const ct_node r = Q->in[0];
    const ct_node_def *R = &g->nodes[r];
    if (R->op != CT_OP_RELU_MASK_BWD || R->n_in != 2 || R->in[1] != Q->in[3] || (R->flags & CT_NODE_RECOMPUTE) ||
        g->nodes[R->in[0]].dtype != R->dtype)
        return;
    reader rr[MAX_READERS];
    int nr = readers_of(g, r, rr, MAX_READERS);
    if (nr > MAX_READERS) return;
    for (int i = 0; i < nr; i++)
        if (rr[i].node != q && rr[i].node != gamma && rr[i].node != sum) return;
    Q->in[0] = R->in[0];
    Q->ia[5] = 1;
}

/* Backward: a layernorm's dgamma (layernorm_bwd_gamma over dy and x) and
 * dbeta (sum of dy), and the column sum of its output (a linear's bias
 * gradient, from the residual gradient the layernorm_bwd+add node writes)
 * / of an activation backward's output (the bias gradient of the linear in
 * front of it), a 2-D batchnorm's dgamma (batchnorm_bwd_gamma: the column
 * sums of dy * (x - mean), times invstd) and dbeta, the column sum of an
 * attention's d_qkv (the qkv linear's bias gradient; each (batch, head) task
 * sums its columns, the pieces across two batches come after the tasks). Whether
 * a node fuses never depends on its sizes (a dynamic-shape plan's graphs must
 * match): the producer's row pass
 * makes them (ia[7], the pieces' partials in its aux, simd/colsum.h,
 * simd/norm.c) and those nodes become COLSUM nodes adding the partials. The
 * pieces and the order of every addition are the unfused kernels', so the
 * results are bit for bit; the nodes must come after the producer (autodiff
 * emits them so). */
static ct_status try_colsum(fz *f, ct_node q, int *done) {
    ct_plan *p = f->p;
    ct_graph *g = &p->g;
    const ct_node_def *Q = &g->nodes[q];
    *done = 0;
    int ln = Q->op == CT_OP_LAYERNORM_BWD_DATA, att = Q->op == CT_OP_ATTENTION_BWD;
    int keep = Q->op == CT_OP_UNARY_BWD_KEEP, act = Q->op == CT_OP_UNARY_BWD || keep;
    /* a batchnorm's: on (M, C) only (the rows path; sum's pieces are per column), FP32 gamma (the -pure
       precisions' 16-bit gamma may send its fast kernel to the reference while batchnorm_bwd_gamma's stays) */
    int bn = Q->op == CT_OP_BATCHNORM_BWD_DATA && Q->ndim == 2 && !Q->ia[5] &&
             g->nodes[Q->in[2]].dtype == CT_F32;
    if ((!ln && !act && !bn && !att) || forward(Q) || !plain_float(Q) || Q->ia[6] || Q->ia[7] || Q->ndim < 2) return CT_OK;
    int64_t D = Q->shape[Q->ndim - 1], R = ct_node_numel(Q) / (D ? D : 1);
    if (D < (bn ? 1 : 2) || R < 2 || D > CT_COLSUM_MAX_D) return CT_OK; /* one channel: its dgamma */
    /* 16-bit I/O: the SIMD kernels' vector loads need rows of at least VW elements (else they decline) */
    int low = ct_dtype_is_low(Q->dtype);
    for (int j = 0; j < Q->n_in; j++) low |= ct_dtype_is_low(g->nodes[Q->in[j]].dtype);
    if (low && D < 16 && !bn) return CT_OK;
    if (att && Q->ndim != 3) return CT_OK; /* (B, T, 3 D) */
    reader rq[1];
    if (readers_of(g, q, rq, 0) == 0) return CT_OK; /* dead (a layernorm_bwd+add took its place) */
    ct_node sets[3] = {CT_NONE, CT_NONE, CT_NONE}; /* dgamma, dy, out */
    ct_dtype rdt = CT_F32;
    if (ln || bn) {
        ct_node dy = Q->in[0], x = Q->in[1], fwd = Q->in[3];
        ct_op gop = ln ? CT_OP_LAYERNORM_BWD_GAMMA : CT_OP_BATCHNORM_BWD_GAMMA;
        reader r[MAX_READERS];
        int nr = readers_of(g, dy, r, MAX_READERS);
        for (int i = 0; i < nr && i < MAX_READERS; i++) {
            ct_node c = r[i].node;
            const ct_node_def *C = &g->nodes[c];
            if (C->op == gop && c > q && sets[0] == CT_NONE && C->n_in == 3 && C->in[0] == dy && C->in[1] == x &&
                C->in[2] == fwd && !forward(C) && !(C->flags & CT_NODE_RECOMPUTE) && C->dtype == CT_F32)
                sets[0] = c;
            else if (sets[1] == CT_NONE && col_sum_of(p, c, dy, q) && g->nodes[dy].ndim == Q->ndim)
                sets[1] = c;
        }
    }
    if (!bn) sets[2] = out_col_sum(p, q, &rdt);
    int pat = ln ? PAT_LN_BWD_COLSUM : bn ? PAT_BN_BWD_COLSUM : att ? PAT_ATT_BWD_COLSUM : PAT_ACT_BWD_COLSUM, rule;
    if ((sets[0] == CT_NONE && sets[1] == CT_NONE && sets[2] == CT_NONE) || !enabled(f, pat, q, CT_NONE, &rule))
        return CT_OK;
    int64_t mask = 0;
    for (int s = 0; s < 3; s++)
        if (sets[s] != CT_NONE) mask |= 1 << s;
    g->nodes[q].ia[7] = mask;
    g->nodes[q].ia[6] = rdt;
    if (bn) fold_relu_mask(p, q, sets[0], sets[1]);
    int slot = 0, first = 1;
    for (int s = 0; s < 3; s++) {
        if (sets[s] == CT_NONE) continue;
        ct_node_def *S = &g->nodes[sets[s]];
        float mult = S->op == CT_OP_SUM ? S->fa[0] : 1.0f;
        ct_node fwd = bn && s == 0 ? S->in[2] : CT_NONE; /* a batchnorm's dgamma: times its invstd */
        S->op = CT_OP_COLSUM;
        S->n_in = fwd != CT_NONE ? 2 : 1;
        S->in[0] = q;
        S->in[1] = fwd;
        memset(S->ia, 0, sizeof S->ia);
        memset(S->fa, 0, sizeof S->fa);
        S->ia[0] = slot++;
        S->ia[1] = keep; /* a UNARY_BWD_KEEP's aux holds its activation first: the partials after it */
        S->fa[0] = mult;
        if (first) {
            CT_TRY(add_group(f, pat, rule, sets[s], g->nodes[q].name));
            if (p->fused_group[q] < 0) group_add_node(p, q);
            first = 0;
        } else {
            group_add_node(p, sets[s]);
        }
    }
    *done = 1;
    return CT_OK;
}

/* Backward, BF16 / FP16 autocast plans: the residual gradient a layernorm_bwd+add node n writes (FP32)
 * and its narrowing cast c (what the linear's backward reads): n's row pass also stores the cast (its
 * k->out2, n's ia[5] = c + 1) and c runs no pass (ia[1] = 1; its buffer lives from n's place on: the
 * planner). One read of the FP32 sum fewer and no pass; the cast's rounding, bit for bit. After the
 * column sums (a bias gradient's sum that reads the cast is n's CT_COLSUM_OUT, rounded as the cast). */
static ct_status try_ln_bwd_cast(fz *f, ct_node c, int *done) {
    ct_plan *p = f->p;
    ct_graph *g = &p->g;
    const ct_node_def *C = &g->nodes[c];
    *done = 0;
    if (C->op != CT_OP_CAST || C->n_in != 1 || C->ia[1] || forward(C) || (C->flags & CT_NODE_RECOMPUTE) ||
        !ct_dtype_is_low(C->dtype) || p->fused_group[c] >= 0)
        return CT_OK;
    ct_node n = C->in[0];
    const ct_node_def *N = &g->nodes[n];
    if (N->op != CT_OP_LAYERNORM_BWD_DATA || N->n_in != 5 || N->dtype != CT_F32 || forward(N) || N->ia[5] ||
        (N->flags & CT_NODE_RECOMPUTE) || n >= c || ct_node_numel(N) != ct_node_numel(C) || kept(p, c))
        return CT_OK;
    int rule;
    if (!enabled(f, PAT_LN_BWD_CAST, c, CT_NONE, &rule)) return CT_OK;
    g->nodes[c].ia[1] = 1;
    g->nodes[n].ia[5] = (int64_t)c + 1;
    CT_TRY(add_group(f, PAT_LN_BWD_CAST, rule, c, N->name));
    *done = 1;
    return CT_OK;
}

/* embedding_bwd+add: add(a, embedding_bwd(dy, ids)) (either order), the embedding's gradient read by the add
 * only -> the add becomes EMBEDDING_BWD(dy, ids, a) (ia[2] = 1 when the scatter was the add's first
 * operand). FP32 (gradients of a table are FP32 in every precision). */
static ct_status try_emb_bwd_add(fz *f, ct_node n, int *done) {
    ct_graph *g = &f->p->g;
    const ct_node_def *A = &g->nodes[n];
    *done = 0;
    if (!backward_add(f, n) || A->dtype != CT_F32 || A->ndim != 2) return CT_OK;
    for (int side = 0; side < 2; side++) {
        ct_node e = A->in[side], a = A->in[1 - side];
        const ct_node_def *E = &g->nodes[e], *X = &g->nodes[a];
        int rule;
        if (!sole_operand(f, n, side, CT_OP_EMBEDDING_BWD, 2) || f->p->fused_group[e] >= 0 ||
            !enabled(f, PAT_EMB_BWD_ADD, n, CT_NONE, &rule))
            continue;
        ct_node_def nd = *E;
        nd.n_in = 3;
        nd.in[2] = a;
        nd.ia[2] = side == 0;
        /* in place (the planner writes a into the parameter's gradient slot, lay_out_params): the add is
           that gradient, a is a backward matmul read by nothing else */
        reader ra[2];
        nd.ia[3] = !f->p->accumulate_grads && ct_plan_is_param_grad(f->p, n) && X->op == CT_OP_MATMUL &&
                   !forward(X) && !(X->flags & CT_NODE_RECOMPUTE) && !kept(f->p, a) && f->p->fused_group[a] < 0 &&
                   !ct_plan_is_param_grad(f->p, a) && readers_of(g, a, ra, 1) == 1;
        nd.flags = A->flags;
        snprintf(nd.name, sizeof nd.name, "%s", A->name);
        CT_TRY(install(f, PAT_EMB_BWD_ADD, rule, n, &nd, E->name, NULL, 0, CT_NONE));
        *done = 1;
        return CT_OK;
    }
    return CT_OK;
}

ct_status ct_pass_fusion(ct_plan *p) {
    ct_graph *g = &p->g;
    p->fused_group = malloc(sizeof(int) * (size_t)(g->n ? g->n : 1));
    const ct_fusion_rules *rs = p->fusion_rules;
    p->n_rules = rs ? rs->n : 0;
    p->rule_hits = calloc((size_t)(p->n_rules ? p->n_rules : 1), sizeof(int));
    if (!p->fused_group || !p->rule_hits) return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory in the fusion pass");
    for (int i = 0; i < g->n; i++) p->fused_group[i] = -1;
    if (p->fusion_level == 0 && !p->n_rules) return CT_OK;
    fz f = {p, p->rule_hits};
    for (int i = 0; i < g->n; i++) {
        if (!forward(&g->nodes[i])) continue;
        int done = 0;
        CT_TRY(try_bias(&f, i, &done));
        if (!done) CT_TRY(try_bn_relu(&f, i, &done));
        if (!done) CT_TRY(try_pro(&f, i, &done));
        if (!done) CT_TRY(try_dropout_add(&f, i, &done));
        if (!done) CT_TRY(try_relu_tail(&f, i, &done));
    }
    /* casts around BF16 nodes, forward and backward */
    for (int i = 0; i < g->n; i++) {
        int done = 0;
        CT_TRY(try_cast_fold(&f, i, &done));
    }
    /* a residual add and the layernorm of its sum (after cast_fold: the layernorm may write BF16) */
    for (int i = 0; i < g->n; i++) {
        int done = 0;
        CT_TRY(try_add_ln(&f, i, &done));
    }
    /* backward: a layernorm's dx and the residual gradient added to it */
    for (int i = 0; i < g->n; i++) {
        int done = 0;
        CT_TRY(try_ln_bwd_add(&f, i, &done));
    }
    /* backward: a tied table's two gradients summed by its embedding backward */
    for (int i = 0; i < g->n; i++) {
        int done = 0;
        CT_TRY(try_emb_bwd_add(&f, i, &done));
    }
    /* backward: column sums into their producers' row passes */
    for (int i = 0; i < g->n; i++) {
        int done = 0;
        CT_TRY(try_colsum(&f, i, &done));
    }
    /* backward: a layernorm_bwd+add's narrowing cast in its row pass */
    for (int i = 0; i < g->n; i++) {
        int done = 0;
        CT_TRY(try_ln_bwd_cast(&f, i, &done));
    }
    /* then the elementwise chains that are left, forward and backward */
    for (int i = 0; i < g->n; i++) {
        ct_node chain[8];
        int n = ct_fusion_chain_find(p, i, chain), rule;
        if (n < 2 || !enabled(&f, PAT_CHAIN, i, CT_NONE, &rule)) continue;
        char absorbed[CT_NAME_LEN];
        snprintf(absorbed, sizeof absorbed, "%d ops from %.40s", n, g->nodes[chain[n - 1]].name);
        ct_fusion_chain_apply(p, chain, n);
        CT_TRY(add_group(&f, PAT_CHAIN, rule, i, absorbed));
    }
    return CT_OK;
}

/* ---- reports ------------------------------------------------------------------------------------------- */

int ct_plan_fusion_count(const ct_plan *p, const char *pattern) {
    int n = 0;
    for (int i = 0; p && i < p->n_groups; i++)
        n += !pattern || !strcmp(pattern, k_patterns[p->groups[i].pattern].name);
    return n;
}

int ct_plan_fusion_rule_matches(const ct_plan *p, int i) {
    return p && i >= 0 && i < p->n_rules ? p->rule_hits[i] : -1;
}
