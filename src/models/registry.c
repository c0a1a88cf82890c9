/* src/models/registry.c - built-in model builders by name (`ctrain graph
 * --model NAME`). One row per builder: a new architecture (resnet,
 * efficientnet, swin, ...) adds its row to k_models with a function that
 * declares the input it expects and builds the model on it. */
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

int ct_model_num_builtin(void) { return (int)(sizeof k_models / sizeof k_models[0]); }

const char *ct_model_builtin_name(int i) { return i >= 0 && i < ct_model_num_builtin() ? k_models[i].name : NULL; }

const char *ct_model_builtin_desc(int i) { return i >= 0 && i < ct_model_num_builtin() ? k_models[i].desc : NULL; }

ct_status ct_model_by_name(ct_graph *g, const char *name, int64_t batch, ct_node *out) {
    if (!g || !name || !out || batch < 1) return CT_E_INVALID_ARG;
    for (int i = 0; i < ct_model_num_builtin(); i++)
        if (!strcmp(k_models[i].name, name)) return k_models[i].build(g, batch, out);
    char list[256];
    size_t o = 0;
    list[0] = 0;
    for (int i = 0; i < ct_model_num_builtin() && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", k_models[i].name);
    return ct_set_error(ct_graph_context(g), CT_E_INVALID_ARG, "model '%s' is unknown; built-in models: %s", name, list);
}
