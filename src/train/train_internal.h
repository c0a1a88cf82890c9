/* src/train/train_internal.h - the built-in tasks (task_image.c, task_text.c). */
#ifndef CT_TRAIN_INTERNAL_H
#define CT_TRAIN_INTERNAL_H
#include "ctrain/ctrain.h"
#include "ctrain/train.h"

ct_status ct_task_image_create(ct_context *ctx, const ct_recipe *r, ct_task **out);
ct_status ct_task_text_create(ct_context *ctx, const ct_recipe *r, ct_task **out);
#endif
