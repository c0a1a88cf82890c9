/* ctrain/models.h - model builders on top of the graph API. */
#ifndef CTRAIN_MODELS_H
#define CTRAIN_MODELS_H

#include "graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elementwise activations a builder can be told to use (each is one op of
 * graph.h: ct_relu, ct_gelu(x, 0), ct_gelu(x, 1), ct_silu, ct_tanh).
 * CT_ACT_RELU is 0, so a zeroed option picks ReLU. */
typedef enum ct_activation {
    CT_ACT_RELU = 0,
    CT_ACT_GELU,      /* exact (erf) GELU, PyTorch's nn.GELU()                */
    CT_ACT_GELU_TANH, /* tanh approximation, nn.GELU(approximate='tanh')      */
    CT_ACT_SILU,
    CT_ACT_TANH,
    CT_ACT_COUNT
} ct_activation;
/* "relu", "gelu", "gelu-tanh", "silu", "tanh"; "invalid" for others. */
const char *ct_activation_name(ct_activation a);
/* Parses a name above; unknown -> CT_E_INVALID_ARG listing the valid ones
 * (ctx may be NULL). */
ct_status ct_activation_parse(ct_context *ctx, const char *name, ct_activation *out);
/* out = act(x), through the op the activation names. */
ct_status ct_activation_apply(ct_graph *g, ct_node x, ct_activation act, ct_node *out);

/* MLP: x (B, in) (other ranks are flattened from dim 1) -> hidden layers
 * linear -> act (-> dropout when dropout > 0) -> logits (B, n_classes).
 * act = CT_ACT_RELU is the classic ReLU MLP. Params named fc{i}.weight /
 * fc{i}.bias in PyTorch layout. */
ct_status ct_model_mlp(ct_graph *g, ct_node x, int n_hidden, const int64_t *hidden,
                       int64_t n_classes, ct_activation act, float dropout, ct_node *logits);

/* Small CNN: blocks of conv3x3(pad 1)-batchnorm-relu-maxpool2, then
 * flatten and linear. x (B, C, H, W). Params conv{i}.weight, bn{i}.weight,
 * bn{i}.bias (+ buffers bn{i}.running_mean / running_var), fc.weight,
 * fc.bias. Convolutions have no bias (batchnorm follows). */
ct_status ct_model_cnn(ct_graph *g, ct_node x, int n_blocks, const int64_t *channels,
                       int64_t n_classes, ct_node *logits);
/* ct_model_cnn with channels_last = 1: the same model (parameters, names,
 * math) run on (N, H, W, C) activations: x (B, C, H, W) is transposed once,
 * the convolutions and max pools run channels last (oneDNN without
 * reorders), batchnorm on the (B*H*W, C) view, and the last block's output
 * is transposed back before the flatten (PyTorch's feature order). */
ct_status ct_model_cnn_ex(ct_graph *g, ct_node x, int n_blocks, const int64_t *channels, int64_t n_classes,
                          int channels_last, ct_node *logits);

/* ---- transformers (src/models/transformer.c) ---------------------------------
 * Both use ct_attention (fused; no dropout on the attention probabilities)
 * and GELU MLPs; weights N(0, 0.02), biases 0, LayerNorm 1 / 0. */

/* GPT (nanoGPT's architecture and state_dict names): token + position
 * embeddings, n_layer pre-LN blocks (ln_1, attn.c_attn -> causal attention ->
 * attn.c_proj, residual; ln_2, mlp.c_fc (4D) -> GELU -> mlp.c_proj, residual;
 * dropout after the embeddings and both projections), ln_f, and the LM head
 * tied to transformer.wte.weight (no separate parameter). Params:
 * transformer.wte.weight (vocab, D), transformer.wpe.weight (context, D),
 * transformer.h.{i}.ln_1.weight/.bias, .attn.c_attn.weight/.bias,
 * .attn.c_proj.weight/.bias, .ln_2..., .mlp.c_fc..., .mlp.c_proj...,
 * transformer.ln_f.weight/.bias; no biases (LayerNorm without bias) when
 * bias = 0. c_proj weights are N(0, 0.02 / sqrt(2 n_layer)). LayerNorm eps 1e-5. */
typedef struct ct_gpt_config {
    int64_t vocab;    /* token ids in [0, vocab)                    */
    int64_t context;  /* max sequence length (rows of wpe)          */
    int n_layer, n_head;
    int64_t d_model;  /* divisible by n_head                        */
    float dropout;    /* [0, 1)                                     */
    int bias;         /* 1: linear and LayerNorm biases             */
    int gelu_tanh;    /* 1: GELU tanh approximation (GPT-2), 0: exact */
} ct_gpt_config;

/* "gpt-char-small" (6 layers, d 384, 6 heads, context 256, vocab 65,
 * dropout 0.2, bias, exact GELU), "gpt2-124m" (12/12/768, context 1024,
 * vocab 50257, dropout 0.1, bias, tanh GELU), "gpt2-medium" (24 layers, 16
 * heads, d 1024: 354,823,168 parameters as Hugging Face's) or "gpt2-large"
 * (36/20/1280: 774,030,080). ctx (may be NULL) receives the message for an
 * unknown name. */
ct_status ct_gpt_preset(ct_context *ctx, const char *name, ct_gpt_config *out);
/* ids I32 (B, T), T <= context -> logits (B, T, vocab). With a tensor group
 * of T ranks on g (ct_graph_set_tensor_group; Megatron-style, docs/
 * distributed.md): this rank's part of the model (heads and MLP units split,
 * T must divide n_head and 4 d_model; the vocabulary padded to a multiple of
 * T) and its columns of the logits, (B, T, ceil(vocab / T)): use
 * ct_cross_entropy_vp on them. ct_model_bert likewise (T divides d_ff). */
ct_status ct_model_gpt(ct_graph *g, ct_node ids, const ct_gpt_config *cfg, ct_node *logits);
/* Number of parameters ct_model_gpt creates (lm_head tied: not counted twice). */
int64_t ct_gpt_num_params(const ct_gpt_config *cfg);

/* BERT encoder with the masked-LM head: word + position + token-type
 * embeddings, LayerNorm, dropout; n_layer post-LN blocks (packed qkv linear ->
 * attention with the key_valid padding mask -> output dense, dropout,
 * residual, LayerNorm; intermediate dense d_ff -> exact GELU -> output dense,
 * dropout, residual, LayerNorm); head: transform dense -> GELU -> LayerNorm
 * -> decoder tied to the word embeddings + its own bias. Params:
 * bert.embeddings.{word,position,token_type}_embeddings.weight,
 * bert.embeddings.LayerNorm.weight/.bias,
 * bert.encoder.layer.{i}.attention.qkv.weight/.bias (3D, D) (q | k | v rows),
 * bert.encoder.layer.{i}.attention.output.dense..., .attention.output.LayerNorm...,
 * .intermediate.dense..., .output.dense..., .output.LayerNorm...,
 * cls.predictions.transform.dense..., cls.predictions.transform.LayerNorm...,
 * cls.predictions.bias (vocab). */
typedef struct ct_bert_config {
    int64_t vocab;
    int64_t context;    /* max positions                 */
    int n_layer, n_head;
    int64_t d_model, d_ff;
    int64_t type_vocab; /* token types (2)               */
    float dropout;
    float ln_eps;       /* 1e-12                         */
} ct_bert_config;

/* "bert-base" (12/12/768, d_ff 3072) or "bert-large" (24/16/1024, d_ff 4096):
 * vocab 30522, 512 positions, 2 token types, dropout 0.1, eps 1e-12. */
ct_status ct_bert_preset(ct_context *ctx, const char *name, ct_bert_config *out);
/* ids I32 (B, T) -> MLM logits (B, T, vocab), Hugging Face's
 * BertForMaskedLM(input_ids, attention_mask, token_type_ids, position_ids):
 *  key_valid       I32 (B, T) (0: padding key) or CT_NONE (no padding);
 *  token_type_ids  I32 (B, T) in [0, type_vocab), or CT_NONE: every token
 *                  has type 0;
 *  position_ids    I32 (B, T), (1, T) or (T) in [0, context), or CT_NONE:
 *                  positions 0..T-1.
 * Passing zeros / arange(T) gives the same logits as CT_NONE bit for bit (the
 * CT_NONE forms slice the tables instead of looking rows up). Ids out of
 * range fail at run time with a message. */
ct_status ct_model_bert(ct_graph *g, ct_node ids, ct_node key_valid, ct_node token_type_ids,
                        ct_node position_ids, const ct_bert_config *cfg, ct_node *mlm_logits);
int64_t ct_bert_num_params(const ct_bert_config *cfg);

/* ---- the model table ----------------------------------------------------------
 * THE list of built-in models: one line each, and nothing else names a model.
 * It is an X-macro so that one list gives both the public enum below (a
 * recipe stores a model as CT_MODEL_<ID>, its row's index) and the rows of
 * src/models/registry.c (checked against CT_MODEL_COUNT by a static
 * assertion), from which the recipe's `model` choices, the presets, the
 * "key does not apply to model" checks, `ctrain graph --model`, the help
 * text and docs/recipes.md all follow. A header list (rather than a table in
 * registry.c alone) keeps a named, stable enum for the API while a new
 * model is still one line here plus its builder's file:
 *   X(ID, name, family, keys, description)
 *   ID      CT_MODEL_<ID>
 *   name    the recipe's `model` value and `ctrain graph --model NAME`; also
 *           names the builder: src/models/<file>.c defines
 *           `const ct_model_def ct_model_def_<name>` (its builder functions,
 *           default configuration and presets; src/models/model_def.h)
 *   family  IMAGE (images -> class logits, the image task) or TEXT (token ids
 *           -> logits over the vocabulary, the text task); the family's recipe
 *           keys apply to every model of it (docs/recipes.md)
 *   keys    the other model-specific recipe keys that apply to it, space
 *           separated (any other key set away from its default is an error)
 * Rows are only ever appended: CT_MODEL_<ID> values are part of the API. */
typedef enum ct_model_family { CT_MODEL_FAMILY_IMAGE = 0, CT_MODEL_FAMILY_TEXT } ct_model_family;

#define CT_MODEL_VISION_KEYS_ "bn_stats_once num_classes width_div max_blocks"
#define CT_MODEL_TABLE(X)                                                                                             \
    X(MLP, mlp, IMAGE, "hidden activation dropout", "MLP: linear + activation hidden layers (784-1024-1024-10, MNIST)") \
    X(CNN, cnn, IMAGE, "channels channels_last bn_stats_once sync_batchnorm",                                       \
      "CNN: conv3x3-batchnorm-relu-maxpool blocks + linear (conv32-conv64, 1x28x28, Fashion-MNIST)")               \
    X(GPT, gpt, TEXT, "dropout", "GPT (nanoGPT), causal language model")                                          \
    X(BERT, bert, TEXT, "dropout", "BERT encoder with the masked-LM head")                                        \
    X(RESNET18, resnet18, IMAGE, "cifar_stem channels_last " CT_MODEL_VISION_KEYS_, "torchvision ResNet-18")                     \
    X(RESNET34, resnet34, IMAGE, "cifar_stem channels_last " CT_MODEL_VISION_KEYS_, "torchvision ResNet-34")                     \
    X(RESNET50, resnet50, IMAGE, "cifar_stem channels_last " CT_MODEL_VISION_KEYS_, "torchvision ResNet-50")                     \
    X(RESNET101, resnet101, IMAGE, "cifar_stem channels_last " CT_MODEL_VISION_KEYS_, "torchvision ResNet-101")                  \
    X(EFFICIENTNET_B0, efficientnet_b0, IMAGE, "dropout drop_path channels_last " CT_MODEL_VISION_KEYS_, "torchvision EfficientNet-B0") \
    X(EFFICIENTNET_B1, efficientnet_b1, IMAGE, "dropout drop_path channels_last " CT_MODEL_VISION_KEYS_, "torchvision EfficientNet-B1") \
    X(EFFICIENTNET_B2, efficientnet_b2, IMAGE, "dropout drop_path channels_last " CT_MODEL_VISION_KEYS_, "torchvision EfficientNet-B2") \
    X(EFFICIENTNET_B3, efficientnet_b3, IMAGE, "dropout drop_path channels_last " CT_MODEL_VISION_KEYS_, "torchvision EfficientNet-B3") \
    X(EFFICIENTNET_B4, efficientnet_b4, IMAGE, "dropout drop_path channels_last " CT_MODEL_VISION_KEYS_, "torchvision EfficientNet-B4") \
    X(SWIN_T, swin_t, IMAGE, "drop_path window " CT_MODEL_VISION_KEYS_, "torchvision Swin-T")                     \
    X(SWIN_S, swin_s, IMAGE, "drop_path window " CT_MODEL_VISION_KEYS_, "torchvision Swin-S")                     \
    X(SWIN_B, swin_b, IMAGE, "drop_path window " CT_MODEL_VISION_KEYS_, "torchvision Swin-B")                     \
    X(LINEAR, linear, IMAGE, "", "logistic regression: one linear layer on the flattened image (784-10, MNIST)")

#define CT_MODEL_ENUM_(ID, name, family, keys, desc) CT_MODEL_##ID,
typedef enum ct_model_kind { CT_MODEL_TABLE(CT_MODEL_ENUM_) CT_MODEL_COUNT } ct_model_kind;
#undef CT_MODEL_ENUM_

/* A row's name ("resnet18"), family, extra recipe keys ("" for none) and
 * description; "?" / "" for an out-of-range kind. */
const char *ct_model_name(ct_model_kind m);
ct_model_family ct_model_family_of(ct_model_kind m);
const char *ct_model_keys(ct_model_kind m);
const char *ct_model_desc(ct_model_kind m);
/* Preset i of a model ("gpt2-124m" for gpt, i = 1; i = 0 is the default), or
 * NULL past the last (models without presets: always NULL). */
const char *ct_model_preset_name(ct_model_kind m, int i);
/* A row's name or a preset's name -> its model and preset (NULL for a row's
 * name; `preset` may be NULL). Unknown: CT_E_INVALID_ARG listing every name
 * (ctx may be NULL). */
ct_status ct_model_find(ct_context *ctx, const char *name, ct_model_kind *kind, const char **preset);

/* Built-in models by name (src/models/registry.c; `ctrain graph --model`):
 * a row's name or a preset's; declares the model's input for `batch` rows
 * and builds it with its default configuration; out: the logits. An
 * unknown name is CT_E_INVALID_ARG listing the names. */
ct_status ct_model_by_name(ct_graph *g, const char *name, int64_t batch, ct_node *out);
/* Every name ct_model_by_name takes: each row's name, followed by its
 * presets' (i in [0, ct_model_num_builtin())). */
int ct_model_num_builtin(void);
const char *ct_model_builtin_name(int i); /* NULL when out of range */
const char *ct_model_builtin_desc(int i);

/* ---- image classifiers with torchvision's architectures ------------------------
 * (src/models/vision.c, resnet.c, efficientnet.c) The parameters and buffers
 * carry torchvision 0.14's state_dict names and shapes ("layer1.0.conv1.weight",
 * "features.1.0.block.0.0.weight", "bn1.running_mean"; torchvision's
 * num_batches_tracked counters are not kept), so weights converted once by
 * scripts/torchvision_to_safetensors.py load with ct_weights_load, and
 * ct_weights_save writes files that script turns back into a state_dict.
 * Input x (N, 3, H, W) FP32 -> logits (N, num_classes). Batchnorm: momentum
 * 0.1, eps 1e-5 (PyTorch's defaults, as torchvision). Initialization as
 * torchvision: convolutions N(0, sqrt(2 / fan_out)) (kaiming_normal_,
 * fan_out), batchnorm 1 / 0; the last linear layer PyTorch's default (ResNet)
 * or U(+-1/sqrt(num_classes)) with zero bias (EfficientNet).
 *
 *  resnet18, resnet34   BasicBlock [2,2,2,2] / [3,4,6,3]
 *  resnet50, resnet101  Bottleneck [3,4,6,3] / [3,4,23,3] (stride on the 3x3, v1.5)
 *  efficientnet_b0..b4  MBConv stages (depthwise conv, squeeze-excitation with
 *                       SiLU, stochastic depth linear in the block index),
 *                       width/depth multipliers (1.0,1.0) (1.0,1.1) (1.1,1.2)
 *                       (1.2,1.4) (1.4,1.8), classifier dropout 0.2 0.2 0.3 0.3 0.4
 *  swin_t, swin_s, swin_b  Swin Transformer v1: patch 4, window 7, embed 96/96/128,
 *                       depths [2,2,6,2] / [2,2,18,2] / [2,2,18,2], heads [3,6,12,24] /
 *                       [3,6,12,24] / [4,8,16,32], stochastic depth 0.2 / 0.3 / 0.5;
 *                       window attention as explicit matmuls + softmax with
 *                       ct_window_bias (torchvision's relative_position_index buffers
 *                       are computed, not kept); no padding: every stage's map must
 *                       be a multiple of the window (224x224 works); linear weights
 *                       N(0, 0.02) (torchvision truncates at 2 std). */
typedef struct ct_vision_config {
    char arch[24];       /* one of the names above                                   */
    int64_t num_classes; /* torchvision: 1000                                        */
    int cifar_stem;      /* resnet: conv1 3x3 stride 1 padding 1 and no max pooling
                            (32x32 inputs); the parameter names do not change       */
    int width_div;       /* 1: torchvision's widths; k > 1: reduced variants for tests
                            (resnet: every width / k; efficientnet: width multiplier
                            / k, rounded to multiples of 8 as torchvision does;
                            swin: the embedding width / k, heads unchanged)         */
    int max_blocks;      /* 0: torchvision's depth; n: at most n blocks per stage    */
    float drop_path;     /* efficientnet, swin: stochastic depth rate of the last
                            block (torchvision: 0.2; swin 0.2 / 0.3 / 0.5); resnet: 0 */
    float dropout;       /* efficientnet: classifier dropout; others: must be 0      */
    int window;          /* swin: window size (0: 7); others: must be 0              */
    int channels_last;   /* resnet, efficientnet: 1 runs it on (N, H, W, C)
                            activations (see ct_model_cnn_ex; the same model);
                            swin: must be 0                                      */
} ct_vision_config;

/* The architecture's torchvision defaults (full size, 1000 classes). An
 * unknown name is CT_E_INVALID_ARG listing the known ones (ctx may be NULL). */
ct_status ct_vision_config_default(ct_context *ctx, const char *arch, ct_vision_config *out);
ct_status ct_model_vision(ct_graph *g, ct_node x, const ct_vision_config *cfg, ct_node *logits);
/* Name i (0 <= i < count) of the architectures above, or NULL. */
int ct_vision_num_archs(void);
const char *ct_vision_arch_name(int i);
/* Trainable parameters of a model by name, by building its graph only (no
 * memory for values): the vision architectures above at full size with
 * num_classes (0: 1000), and the transformer presets ("gpt2-124m",
 * "bert-large", ...). Unknown name -> CT_E_INVALID_ARG. */
ct_status ct_model_num_params_by_name(ct_context *ctx, const char *name, int64_t num_classes, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
