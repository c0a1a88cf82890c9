/* ctrain/infer.h - inference with an image model's checkpoint (a save dir
 * or a step dir written by ct_train / `ctrain train`): the test-split
 * evaluation with per-class counts (`ctrain eval`) and the class
 * probabilities of single JPEG/PNG files (`ctrain predict`).
 *
 * The evaluation builds the model exactly as the trainer did (the recipe
 * stored in the checkpoint: the same batch, precision, fusion and plan, the
 * same data and eval transform), so for a run of one process its accuracy
 * equals the trainer's last evaluation bit for bit (the trainer's result is
 * stored in the checkpoint: ct_classifier_trained). A prediction decodes the
 * file into the model's channels (RGB to gray with PIL's weights for
 * MNIST-style models, gray replicated for RGB ones), applies the evaluation
 * transform of the recipe (Resize + CenterCrop + Normalize; MNIST and
 * Fashion-MNIST: 28 x 28 with the loader's normalization table when the file
 * is 28 x 28, else Resize + CenterCrop to 28 first) and runs a forward of
 * batch 1 in eval mode.
 *
 *   ct_recipe r; ct_classifier_recipe(ctx0, "runs/mnist", &r);  // threads etc.
 *   ct_context *ctx; ct_train_context_create(&r, &ctx);
 *   ct_classifier *c; ct_classifier_load(ctx, "runs/mnist", NULL, &c);
 *   float p[ct_classifier_outputs(c)];
 *   ct_classifier_predict(c, bytes, len, "cat.png", p);
 *   ct_classifier_eval ev; ct_classifier_evaluate(c, &ev); ... ct_classifier_eval_free(&ev);
 *   ct_classifier_free(c);
 */
#ifndef CTRAIN_INFER_H
#define CTRAIN_INFER_H

#include <stddef.h>
#include <stdint.h>
#include "context.h"
#include "recipe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_classifier ct_classifier;

/* The recipe stored in checkpoint `ckpt` (data paths as stored). CT_E_IO /
 * CT_E_CORRUPT for a missing or damaged checkpoint, CT_E_CONFIG when it
 * holds no recipe. */
ct_status ct_classifier_recipe(ct_context *ctx, const char *ckpt, ct_recipe *r);

/* Opens an image model's checkpoint. data_dir (NULL or "": the recipe's)
 * replaces the recipe's data_dir. CT_E_CONFIG for a text model's checkpoint
 * (the message names `ctrain sample` for GPT) and for an image folder model
 * whose class names are neither in the checkpoint (classes.txt) nor in
 * data_dir/train_dir. Loads no data and no weights yet. */
ct_status ct_classifier_load(ct_context *ctx, const char *ckpt, const char *data_dir, ct_classifier **out);
void ct_classifier_free(ct_classifier *c); /* accepts NULL */

const ct_recipe *ct_classifier_recipe_of(const ct_classifier *c);
/* The dataset's classes (10 for MNIST, Fashion-MNIST, CIFAR-10; 100 for
 * CIFAR-100; an image folder's class folders). */
int ct_classifier_classes(const ct_classifier *c);
/* Class k's name: the folder's, CIFAR's and Fashion-MNIST's label names,
 * "0".."9" for MNIST; "class K" past the dataset's classes. Never NULL. */
const char *ct_classifier_class_name(const ct_classifier *c, int k);
/* The test accuracy and loss the trainer recorded in the checkpoint (its
 * last evaluation). */
void ct_classifier_trained(const ct_classifier *c, double *accuracy, double *loss);

/* The evaluation of the test split (MNIST / Fashion-MNIST t10k, CIFAR test,
 * an image folder's val_dir). */
typedef struct ct_classifier_eval {
    int64_t outputs;    /* W: the logits' width (>= the dataset's classes)      */
    int64_t count;      /* test images evaluated                                */
    int64_t correct;    /* argmax == label                                      */
    double loss, accuracy; /* mean cross entropy (with the recipe's label smoothing), correct / count */
    int64_t *confusion; /* (W, W): [label * W + prediction] counts; owned, freed by ct_classifier_eval_free */
} ct_classifier_eval;
/* Loads the data and the weights and evaluates as the trainer does (the
 * task's plan of the recipe's batch; deterministic recipes: its chunk).
 * Errors: the data's (CT_E_IO naming the file and scripts/setup.sh /
 * --data-dir), the checkpoint's (CT_E_CONFIG: another model). */
ct_status ct_classifier_evaluate(ct_classifier *c, ct_classifier_eval *out);
void ct_classifier_eval_free(ct_classifier_eval *e);

/* The number of probabilities ct_classifier_predict writes (the logits'
 * width); builds the batch-1 plan and loads the weights on first use. */
ct_status ct_classifier_outputs(ct_classifier *c, int64_t *outputs);
/* A JPEG or PNG file's bytes -> softmax probabilities (outputs floats).
 * CT_E_CORRUPT naming `name` for an unreadable, truncated or too large
 * image (ct_image_decode). */
ct_status ct_classifier_predict(ct_classifier *c, const void *data, size_t len, const char *name, float *probs);

#ifdef __cplusplus
}
#endif
#endif
