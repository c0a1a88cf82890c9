/* src/models/model_def.h - what a model's builder file provides for its row
 * of the model table (CT_MODEL_TABLE in include/ctrain/models.h), and the
 * rows themselves (src/models/registry.c). Internal.
 *
 * A new model: one line in CT_MODEL_TABLE and one file here that defines
 * `const ct_model_def ct_model_def_<name>`; nothing else names it. */
#ifndef CT_MODELS_MODEL_DEF_H
#define CT_MODELS_MODEL_DEF_H

#include "core/internal.h"
#include "ctrain/models.h"
#include "ctrain/recipe.h"

typedef struct ct_model_row ct_model_row;

/* A named size of a model (text: "gpt2-124m"). */
typedef struct ct_model_preset {
    const char *name, *desc;
} ct_model_preset;

typedef struct ct_model_def {
    /* The model at its default configuration (`ctrain graph --model`):
     * declares its input for `batch` rows and builds it. preset: one of
     * `presets` (NULL: the first); n_classes: 0 for the default. */
    ct_status (*build_default)(ct_graph *g, const ct_model_row *m, const char *preset, int64_t batch,
                               int64_t n_classes, ct_node *logits);
    /* The model on input x with the recipe's model keys, n_classes outputs
     * (ct_model_build in recipe.h). */
    ct_status (*build)(ct_graph *g, const ct_model_row *m, ct_node x, const ct_recipe *r, int64_t n_classes,
                       ct_node *logits);
    /* Trainable parameters without building (NULL: build the default and count). */
    int64_t (*num_params)(const char *preset);
    const void *config;             /* the builder's own defaults (vision: its ct_vis_arch), or NULL */
    const ct_model_preset *presets; /* {name, desc} ... {NULL}: the first is the default; or NULL */
    int vision;                     /* 1: a torchvision classifier, config is a ct_vis_arch */
} ct_model_def;

/* A row of the table: CT_MODEL_TABLE's columns and the builder's def. */
struct ct_model_row {
    const char *name;
    ct_model_family family;
    const char *keys, *desc;
    const ct_model_def *def;
};

#define CT_MODEL_DEF_DECL_(ID, name, family, keys, desc) extern const ct_model_def ct_model_def_##name;
CT_MODEL_TABLE(CT_MODEL_DEF_DECL_)
#undef CT_MODEL_DEF_DECL_

/* Row m (0 <= m < CT_MODEL_COUNT) or NULL. */
const ct_model_row *ct_model_row_at(int m);
/* The row named `name` (a row's name, not a preset's), or NULL. */
const ct_model_row *ct_model_row_find(const char *name);

/* Channels last (layout.c): the CNN, ResNet and EfficientNet builders with channels_last
 * run their convolutions on (N, H, W, C) tensors (ct_conv2d_ex), so oneDNN
 * reorders nothing; the parameters and their names are PyTorch's either way. */
/* (N, C, H, W) -> (N, H, W, C): a transpose (a reshape, free, for C = 1). */
ct_status ct_mdl_to_nhwc(ct_graph *g, ct_node x, ct_node *out);
/* batchnorm (named `name`) then act (CT_ACT_COUNT: none) on y: (N, C, H, W),
 * or with cl y (N, H, W, C), normalized as its (N*H*W, C) view (the same
 * statistics: batchnorm of rows per column) and reshaped back. */
ct_status ct_mdl_bn_act(ct_graph *g, ct_node y, int cl, ct_node gamma, ct_node beta, ct_node rmean, ct_node rvar,
                        const char *name, ct_activation act, ct_node *out);
/* Channels of x: dim 1, or with cl the last. */
int64_t ct_mdl_channels(ct_graph *g, ct_node x, int cl);
/* Global average pooling to (N, C): of (N, C, H, W), or with cl of (N, H, W,
 * C) as the mean over axis 1 of its (N, H*W, C) view. */
ct_status ct_mdl_global_avgpool(ct_graph *g, ct_node x, int cl, ct_node *out);

#endif
