/* src/models/registry.c - built-in model builders by name (`ctrain graph
 * --model NAME`). One row per builder: a new architecture (resnet,
 * efficientnet, swin, ...) adds its row to k_models with a function that
 * declares the input it expects and builds the model on it; torchvision's
 * architectures (vision.c: resnet*, efficientnet_*, swin_*) follow the table,
 * at full size with 1000 classes on 3x224x224 inputs. */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/models.h"

static ct_status build_mlp(ct_graph *g, int64_t batch, ct_node *out) {
    ct_node x;
    CT_TRY(ct_input(g, "x", CT_F32, 2, (int64_t[]){batch, 784}, &x));
    return ct_model_mlp(g, x, 2, (int64_t[]){1024, 1024}, 10, CT_ACT_RELU, 0.0f, out);
}

static ct_status build_cnn(ct_graph *g, int64_t batch, ct_node *out) {
    ct_node x;
    CT_TRY(ct_input(g, "x", CT_F32, 4, (int64_t[]){batch, 1, 28, 28}, &x));
    return ct_model_cnn(g, x, 2, (int64_t[]){32, 64}, 10, out);
}

static ct_status build_gpt(ct_graph *g, const char *preset, int64_t batch, ct_node *out) {
    ct_gpt_config c;
    CT_TRY(ct_gpt_preset(ct_graph_context(g), preset, &c));
    ct_node ids;
    CT_TRY(ct_input(g, "ids", CT_I32, 2, (int64_t[]){batch, c.context}, &ids));
    return ct_model_gpt(g, ids, &c, out);
}
static ct_status build_gpt_char_small(ct_graph *g, int64_t b, ct_node *o) { return build_gpt(g, "gpt-char-small", b, o); }
static ct_status build_gpt2_124m(ct_graph *g, int64_t b, ct_node *o) { return build_gpt(g, "gpt2-124m", b, o); }

static ct_status build_bert(ct_graph *g, const char *preset, int64_t batch, ct_node *out) {
    ct_bert_config c;
    CT_TRY(ct_bert_preset(ct_graph_context(g), preset, &c));
    ct_node ids;
    CT_TRY(ct_input(g, "ids", CT_I32, 2, (int64_t[]){batch, c.context}, &ids));
    return ct_model_bert(g, ids, CT_NONE, CT_NONE, CT_NONE, &c, out);
}
static ct_status build_bert_base(ct_graph *g, int64_t b, ct_node *o) { return build_bert(g, "bert-base", b, o); }

static const struct {
    const char *name, *desc;
    ct_status (*build)(ct_graph *g, int64_t batch, ct_node *out);
} k_models[] = {
    {"mlp", "MLP 784-1024-1024-10 (MNIST)", build_mlp},
    {"cnn", "CNN conv32-conv64 + linear, 1x28x28 input (Fashion-MNIST)", build_cnn},
    {"gpt-char-small", "GPT, 6 layers, d_model 384, context 256, 65 characters", build_gpt_char_small},
    {"gpt2-124m", "GPT-2 small, 12 layers, d_model 768, context 1024", build_gpt2_124m},
    {"bert-base", "BERT-base, 12 layers, d_model 768, MLM head", build_bert_base},
};

static int n_table(void) { return (int)(sizeof k_models / sizeof k_models[0]); }

int ct_model_num_builtin(void) { return n_table() + ct_vision_num_archs(); }

const char *ct_model_builtin_name(int i) {
    if (i >= 0 && i < n_table()) return k_models[i].name;
    return i >= n_table() ? ct_vision_arch_name(i - n_table()) : NULL;
}

const char *ct_model_builtin_desc(int i) {
    if (i >= 0 && i < n_table()) return k_models[i].desc;
    return i >= n_table() && ct_vision_arch_name(i - n_table()) ? "torchvision architecture, 3x224x224 input, 1000 classes"
                                                                 : NULL;
}

/* A torchvision architecture at full size on (batch, 3, 224, 224); num_classes 0: its default (1000). */
static int is_vision(const char *name) {
    for (int i = 0; i < ct_vision_num_archs(); i++)
        if (!strcmp(ct_vision_arch_name(i), name)) return 1;
    return 0;
}
static ct_status build_vision(ct_graph *g, const char *name, int64_t batch, int64_t num_classes, ct_node *out) {
    ct_vision_config c = {0};
    CT_TRY(ct_vision_config_default(ct_graph_context(g), name, &c));
    if (num_classes > 0) c.num_classes = num_classes;
    ct_node x;
    CT_TRY(ct_input(g, "x", CT_F32, 4, (int64_t[]){batch, 3, 224, 224}, &x));
    return ct_model_vision(g, x, &c, out);
}

ct_status ct_model_by_name(ct_graph *g, const char *name, int64_t batch, ct_node *out) {
    if (!g || !name || !out || batch < 1) return CT_E_INVALID_ARG;
    for (int i = 0; i < n_table(); i++)
        if (!strcmp(k_models[i].name, name)) return k_models[i].build(g, batch, out);
    if (is_vision(name)) return build_vision(g, name, batch, 0, out);
    char list[512];
    size_t o = 0;
    list[0] = 0;
    for (int i = 0; i < ct_model_num_builtin() && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", ct_model_builtin_name(i));
    return ct_set_error(ct_graph_context(g), CT_E_INVALID_ARG, "model '%s' is unknown; built-in models: %s", name, list);
}

/* Sum of the parameter sizes of a built graph. */
static int64_t graph_params(const ct_graph *g) {
    int64_t tot = 0;
    for (int i = 0; i < ct_graph_num_nodes(g); i++) {
        if (strcmp(ct_node_op_name(g, i), "param")) continue;
        int nd;
        int64_t s[CT_MAX_DIMS], n = 1;
        if (ct_node_shape(g, i, &nd, s) != CT_OK) continue;
        for (int d = 0; d < nd; d++) n *= s[d];
        tot += n;
    }
    return tot;
}

ct_status ct_model_num_params_by_name(ct_context *ctx, const char *name, int64_t num_classes, int64_t *out) {
    if (!name || !out) return ct_set_error(ctx, CT_E_INVALID_ARG, "model name and output must not be NULL");
    ct_gpt_config gc;
    ct_bert_config bc;
    if (!strncmp(name, "gpt", 3) && ct_gpt_preset(NULL, name, &gc) == CT_OK) { /* counted, not built (gpt2: 124M) */
        *out = ct_gpt_num_params(&gc);
        return CT_OK;
    }
    if (!strncmp(name, "bert", 4) && ct_bert_preset(NULL, name, &bc) == CT_OK) {
        *out = ct_bert_num_params(&bc);
        return CT_OK;
    }
    if (!is_vision(name)) {
        ct_vision_config c;
        return ct_wrap_error(ctx, ct_vision_config_default(ctx, name, &c), NULL,
                             " (or a transformer preset: gpt-char-small, gpt2-124m, bert-base, bert-large)");
    }
    ct_graph *g;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_node logits;
    ct_status st = build_vision(g, name, 1, num_classes, &logits);
    if (st == CT_OK) *out = graph_params(g);
    ct_graph_free(g);
    return st;
}
