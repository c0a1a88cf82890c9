/* ctrain/checkpoint.h - weights in safetensors files and checkpoints that
 * resume a run bit for bit (docs/checkpoint-format.md).
 *
 * Weights: ct_weights_save/ct_weights_load write and read a standard
 * safetensors file (8-byte little-endian header length, JSON header, raw
 * little-endian data) holding every parameter and buffer under its ctrain
 * name, which is the PyTorch state_dict name for ctrain's models
 * (scripts/load_safetensors.py loads it into PyTorch).
 *
 * Checkpoints: ct_checkpoint_save writes <dir>/step-NNNNNN/ with
 *   model.safetensors        parameters and buffers (as above)
 *   train_state.safetensors  the optimizer state tensors plus metadata: step,
 *                            epoch, batch in epoch, optimizer step count,
 *                            schedule / early-stopping / loss-scaler state,
 *                            the recipe JSON and a model signature
 * atomically (written into <dir>/.tmp-XXXXXX, fsync'd, renamed into place,
 * the directory fsync'd), then points <dir>/latest at it (also atomically)
 * and deletes all but the newest keep_last step directories. A crash at any
 * moment leaves `latest` naming a complete checkpoint.
 *
 * ct_checkpoint_load validates everything before it writes anything: file
 * sizes and headers (CT_E_CORRUPT for truncated or damaged files, every byte
 * is covered by a CRC32), then the model signature (CT_E_CONFIG naming the
 * first tensor that differs when the checkpoint is from another model or
 * optimizer). Only then are the plan's weights, the optimizer's state and
 * step count (and with it the plan's dropout step) restored. */
#ifndef CTRAIN_CHECKPOINT_H
#define CTRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include "amp.h"
#include "graph.h"
#include "optim.h"
#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_CHECKPOINT_RECIPE_MAX 8192

/* Where a run stands: everything besides weights and optimizer state that a
 * resumed run needs to continue exactly. */
typedef struct ct_train_state {
    int64_t step;            /* optimizer steps completed (global)                     */
    int64_t epoch;           /* epoch in progress (0-based)                            */
    int64_t batch_in_epoch;  /* batches of that epoch already consumed                */
    uint64_t optimizer_steps;/* load: the optimizer's step count that was restored    */
    int has_schedule;        /* schedule: ct_schedule_get_state (PLATEAU's state)      */
    ct_schedule_state schedule;
    int has_early_stop;
    ct_early_stop early_stop;
    int has_scaler;
    ct_scaler_state scaler;
    /* running totals of the epoch in progress (for identical progress lines) */
    double epoch_loss_sum;
    int64_t epoch_correct, epoch_seen;
    double test_loss, test_acc;   /* the last evaluation                           */
    int finished;                 /* 1: saved after the run ended                  */
    char recipe_json[CT_CHECKPOINT_RECIPE_MAX]; /* "" when none                    */
    char path[4096];              /* load: the step directory that was read        */
} ct_train_state;

void ct_train_state_init(ct_train_state *st);

/* Test hook: called at points of a save ("written": the temporary directory
 * is complete; "replaced": a step saved again was swapped in, the old copy
 * not yet deleted; "renamed": it is in place but `latest` not yet updated;
 * "latest": `latest` updated, old ones not yet deleted). */
typedef void (*ct_checkpoint_hook)(void *user, const char *phase, int64_t step);

/* A file written into the step directory with the checkpoint (committed
 * atomically with it), e.g. a tokenizer's vocabulary. */
typedef struct ct_checkpoint_file {
    const char *name;        /* a plain file name (no '/', not starting with '.')      */
    const void *data;
    size_t size;
} ct_checkpoint_file;

typedef struct ct_checkpoint_opts {
    int keep_last;           /* step directories to keep (0: all); default 3           */
    int fsync;               /* 1 (default): fsync files and directories               */
    const ct_checkpoint_file *files; /* extra files of the step directory (may be NULL) */
    int n_files;
    ct_checkpoint_hook hook;
    void *hook_user;
} ct_checkpoint_opts;
void ct_checkpoint_opts_default(ct_checkpoint_opts *o);

/* Saves <dir>/step-%06lld (st->step) and updates <dir>/latest. `dir` is
 * created when missing. opt may be NULL (weights and metadata only).
 * Pruning (keep_last, and step directories after st->step, left by a run
 * resumed from an earlier step) deletes only step directories that hold a
 * train state and the temporary directories of interrupted saves: only the
 * regular files directly inside them, never through a symbolic link. A step
 * saved again replaces the old one with one atomic rename (Linux
 * RENAME_EXCHANGE; a filesystem without it gives an error rather than a
 * moment where `latest` names a missing directory). */
ct_status ct_checkpoint_save(ct_context *ctx, const char *dir, ct_plan *plan, ct_optimizer *opt,
                             const ct_train_state *st, int keep_last);
ct_status ct_checkpoint_save_ex(ct_context *ctx, const char *dir, ct_plan *plan, ct_optimizer *opt,
                                const ct_train_state *st, const ct_checkpoint_opts *o);

/* Loads from `path`: a save directory (follows its `latest`) or a step
 * directory. plan NULL: reads and checks the train state only (e.g. to get
 * the recipe before building the model). opt NULL: weights only. st may be
 * NULL. Nothing is modified unless everything validates. */
ct_status ct_checkpoint_load(ct_context *ctx, const char *path, ct_plan *plan, ct_optimizer *opt,
                             ct_train_state *st);

/* The checkpoint format's version ("1"; __metadata__.ctrain_version of every file). Files also record the
 * library that wrote them (ctrain_library: ct_version()); a load needs the format, not the library, to match. */
const char *ct_checkpoint_format_version(void);

/* The step directory `path` resolves to (as ct_checkpoint_load does). */
ct_status ct_checkpoint_resolve(ct_context *ctx, const char *path, char *out, size_t len);
/* The save directory `path` belongs to: `path` itself when it is a save dir
 * (it has `latest`), a step dir's parent otherwise. */
ct_status ct_checkpoint_save_dir(ct_context *ctx, const char *path, char *out, size_t len);

/* Tensor and pipeline parallelism: a plan with a tensor group and/or a
 * pipeline group (ct_stage_opts.group) makes the saves and loads below
 * collectives over those groups, in the one-process format: a save gathers
 * the shards (tensor rank 0) and then every stage's tensors (pipeline rank
 * 0), which writes the file alone, each tensor once in the whole model's
 * order; every rank returns the writer's status. A load gives each stage its
 * tensors by name (each tensor rank its slices); a tensor of the file that no
 * stage holds is CT_E_CONFIG ("from another model") on every rank. */

/* Weights alone: a safetensors file with every parameter and buffer,
 * written atomically (tmp file, fsync, rename, fsync of the directory). */
ct_status ct_weights_save(ct_context *ctx, const char *path, ct_plan *plan);
/* Loads a safetensors file written by ct_weights_save (or any F32
 * safetensors file with exactly the plan's tensor names and shapes; a
 * pipeline stage: the stages' tensors together). */
ct_status ct_weights_load(ct_context *ctx, const char *path, ct_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
