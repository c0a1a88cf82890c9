/* ctrain/train.h - the training loop, once, for every model.
 *
 * ct_train runs a recipe (recipe.h) to the end: it builds the model of a
 * task, compiles the plan, and repeats the step (micro-batches with gradient
 * accumulation, the loss scaler's unscale + overflow check, clipping, the
 * optimizer, the schedule), evaluates on the task's cadence (every epoch of
 * images; every eval_every steps of text), applies the plateau schedule and
 * early stopping (with restore-best), writes checkpoints and resumes from them
 * bit for bit, logs metrics (metrics.h), profiles (profile.h) and shows a
 * progress display. The CLI's `ctrain train` is a thin wrapper around it.
 *
 *   ct_recipe r; ct_recipe_default(&r); r.model = CT_MODEL_GPT; ...
 *   ct_context *ctx; ct_train_context_create(&r, &ctx);
 *   ct_train_opts o; ct_train_opts_default(&o);
 *   ct_train_result res;
 *   if (ct_train(ctx, &r, &o, &res) != CT_OK) puts(ct_context_last_error(ctx));
 *
 * A task is what differs between models: the data, the graph, a batch, an
 * evaluation. ct_task_create gives the built-in one for the recipe's model
 * (images: mlp, cnn; text: gpt, bert); a program can pass its own. */
#ifndef CTRAIN_TRAIN_H
#define CTRAIN_TRAIN_H

#include <stdio.h>

#include "checkpoint.h"
#include "dist.h"
#include "graph.h"
#include "metrics.h"
#include "recipe.h"
#include "text.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_task ct_task;

/* The evaluation a task reports. */
typedef struct ct_task_eval {
    double loss;       /* mean loss over the evaluated samples / tokens          */
    double accuracy;   /* in [0, 1]; meaningful when the task has_accuracy       */
    char detail[96];   /* extra text for the display ("val ppl 4.20  (64 windows)") */
    double count;      /* samples / tokens the means cover: each rank's weight when
                          data parallel ranks combine their parts of the evaluation */
    double rows;       /* rows evaluated (images, windows); summed over the ranks */
} ct_task_eval;

struct ct_task {
    const char *name;        /* "image", "gpt", "bert"                                  */
    int epochs_from_data;    /* 1: an epoch is a pass over the training data (next_batch
                                reports its end); 0: an epoch is eval_every steps        */
    int has_accuracy;        /* the task counts correct predictions (early_stop_mode max) */
    const char *eval_split;  /* "test" / "val": names the evaluation in the display     */
    const char *unit;        /* what a batch row is: "samples" / "tokens" (per second)  */
    int64_t unit_per_row;    /* units per batch row (1 for images, T for text)          */
    void *impl;
    /* Builds the inputs, the model and its loss into g for a batch of
     * r->batch_size rows; keep[0..*n_keep) are outputs to keep (logits). Called
     * again with other batch sizes when advising on memory_budget. */
    ct_status (*build)(ct_task *t, ct_graph *g, const ct_recipe *r, ct_node *loss, int *n_keep, ct_node *keep);
    /* After compile: the plan the batches go to. */
    ct_status (*bind)(ct_task *t, ct_plan *p);
    /* epochs_from_data: micro-batches per epoch. */
    int64_t (*batches_per_epoch)(ct_task *t);
    /* Starts an epoch, skipping its first `skip` micro-batches (resume). */
    ct_status (*start_epoch)(ct_task *t, int64_t epoch, int64_t skip);
    /* Writes micro-batch `micro` of optimizer step `step` into the plan's
     * inputs; *rows 0: the epoch's data is exhausted. */
    ct_status (*next_batch)(ct_task *t, int64_t step, int micro, int64_t *rows);
    /* The units (unit: samples, tokens) of the batch next_batch wrote last:
     * real tokens, not padding (text_docs batches are shorter than the
     * context). May be NULL: rows x unit_per_row. The trainer's rates
     * (progress line, epoch line, summary) sum these over the ranks. */
    int64_t (*batch_units)(ct_task *t);
    /* After a training forward: correct predictions among the batch's rows. */
    int64_t (*batch_correct)(ct_task *t, int64_t rows);
    /* Evaluation in eval mode on the held-out split. */
    ct_status (*evaluate)(ct_task *t, ct_task_eval *out);
    /* One line describing the data and the model for the run's header. */
    void (*describe)(ct_task *t, const ct_plan_stats *ps, char *buf, size_t len);
    /* Extra files written into every checkpoint's step directory before it is
     * committed (e.g. GPT's tokenizer.vocab); may be NULL. */
    ct_status (*checkpoint_files)(ct_task *t, ct_checkpoint_file *files, int *n, int max);
    /* Data parallel (may be NULL: the task trains in one process only).
     * Called once by ct_train, before build, on rank `rank` of `size` (the
     * batch size divides by size, checked by ct_train): from then on
     * next_batch writes only this rank's rows [rank*b, (rank+1)*b) of every
     * global batch of r->batch_size rows (b = batch_size / size; build is
     * called with batch_size b), and evaluate covers this rank's part of the
     * held-out split and sets count (the trainer combines the parts). */
    ct_status (*shard)(ct_task *t, int rank, int size);
    /* Writes ev->detail from ev's loss, accuracy and rows; data parallel: called
     * again after the ranks' parts are combined. May be NULL (no detail). */
    void (*eval_detail)(ct_task *t, ct_task_eval *ev);
    void (*free)(ct_task *t);
    /* The deterministic mode (recipe key deterministic; may be NULL: the
     * task does not support it). Called once by ct_train after shard and
     * before build, with n >= 1: build is then called with batch_size
     * b / n (b = this rank's rows of a global batch), and next_batch's
     * micro-batch m (0 <= m < n) of a step writes the m-th of n equal
     * slices of this rank's rows of the step's global batch (reading the
     * global batch at m == 0); batches_per_epoch and start_epoch's skip
     * still count global batches. With accumulate_steps A > 1 a step covers
     * A global batches and m runs to n x A: micro-batch m writes slice m / A
     * of this rank's rows of the step's global batch m % A (the batches of
     * plain accumulation; a task reading them at m == 0 reads all A or, at
     * the epoch's end, none: 0 rows at m == 0). evaluate covers the whole
     * held-out split on every rank from then on (count as in one process). */
    ct_status (*chunk)(ct_task *t, int n);
};

/* The built-in task of r->model: loads its data (IDX images; a text corpus
 * and its tokenizer). */
ct_status ct_task_create(ct_context *ctx, const ct_recipe *r, ct_task **out);
void ct_task_free(ct_task *t); /* accepts NULL */

/* A context with the recipe's seed, threads and memory_budget. */
ct_status ct_train_context_create(const ct_recipe *r, ct_context **out);

/* The recipe to resume the checkpoint `resume` (a save dir or a step dir)
 * with. A checkpoint is data, not instructions: its CRC is no signature, so
 * the paths its stored recipe names for writing (save_dir, metrics_file,
 * profile_dir) are never used. They are cleared, and save_dir becomes the
 * directory being resumed (`resume` itself, or a step dir's parent), so a
 * copied save directory continues in the copy. The caller applies its own
 * settings on top (a recipe file, flags), which may name other paths.
 * `stored` (may be NULL) receives the recipe as the checkpoint holds it, to
 * tell the user what was ignored. The data paths (data_dir, text_file,
 * bpe_dir) are kept: they are only read, and resuming needs the same data. */
ct_status ct_train_resume_recipe(ct_context *ctx, const char *resume, ct_recipe *r, ct_recipe *stored);

/* Called after each optimizer step (tests use it to crash at a step). */
typedef void (*ct_train_step_hook)(void *user, int64_t step);
/* Callbacks for programs that watch a run (the Python package's on_step /
 * on_eval, notebooks' progress bars). on_step: after each optimizer step,
 * with the step's metrics (the metrics log's step line: m->step counts from
 * 1; m->samples is this step's samples) and the run's total steps. on_eval:
 * after each evaluation (epoch: 0-based; ev: the evaluation). A non-zero
 * return stops the run after that step or evaluation, as early stopping
 * does: the epoch's evaluation, the final checkpoint and the summary follow,
 * and res->stopped_early is 1. Data parallel: every rank's callbacks must
 * return the same. NULL: none. */
typedef int (*ct_train_step_fn)(void *user, const ct_metrics_step *m, int64_t total_steps);
typedef int (*ct_train_eval_fn)(void *user, int64_t epoch, int64_t step, const ct_task_eval *ev);

typedef struct ct_train_opts {
    FILE *out;               /* progress display and run summary (stdout); NULL: silent */
    int quiet;               /* only the evaluation lines and the summary               */
    const char *resume;      /* a checkpoint (save dir or step dir) to continue, or NULL */
    const char *metrics_path;/* overrides r->metrics_file when set                       */
    ct_task *task;           /* NULL: ct_task_create for the recipe                       */
    ct_train_step_hook step_hook;
    ct_checkpoint_hook checkpoint_hook;
    void *hook_user;
    /* NULL or a world of one process: train alone. Else data parallel over
     * the communicator's ranks (docs/distributed.md): every rank calls
     * ct_train with the same recipe; r->batch_size is the global batch and
     * must divide by the world size; rank 0 alone writes `out`, the metrics
     * log, the profile and the checkpoints. The task (o->task or the built-in
     * one) must have a shard function. ct_train records the communicator's
     * errors on ctx (ct_comm_set_context). */
    ct_comm *comm;
    ct_train_step_fn on_step;  /* see ct_train_step_fn; NULL: none                    */
    ct_train_eval_fn on_eval;
    void *cb_user;             /* passed to on_step and on_eval                       */
    int verbose;             /* the header also prints the recipe keys that do not apply to the model */
} ct_train_opts;
void ct_train_opts_default(ct_train_opts *o);

typedef struct ct_train_result {
    int64_t steps;           /* optimizer steps completed                               */
    double seconds;
    double eval_loss, eval_accuracy; /* the last evaluation                             */
    int stopped_early;       /* early stopping (or the loss scaler's floor = stop)      */
    size_t peak_bytes;       /* peak of the context allocator                           */
    int64_t skipped_steps;   /* this run's updates skipped by the loss scaler (overflow) */
    int64_t zero_grad_steps; /* this run's steps whose gradients were all exactly zero   */
    int64_t grad_allreduces; /* data parallel: allreduces of the gradient arena (one per step) */
    double comm_seconds;     /* data parallel: seconds inside the communicator's calls    */
} ct_train_result;

/* Runs the recipe. Errors are returned with the context's message: a bad
 * recipe (E40010), data (E70001/E70002), a loss that became NaN/inf or
 * diverged (more than divergence_factor x the run's first loss) (E40020), a
 * run that trained nothing because every step overflowed (FP16 loss scale
 * too high) or had all-zero gradients (underflow) (E40020, after the final
 * checkpoint is saved; most steps affected is a warning in the summary),
 * a plan over memory_budget (E60003, with advice naming the recompute_every,
 * batch_size or precision that fits and the bytes each saves; with recipe key
 * fit the run picks such a configuration itself, or E60003 naming what the
 * smallest candidate needs), ... */
ct_status ct_train(ct_context *ctx, const ct_recipe *r, const ct_train_opts *o, ct_train_result *res);

/* A model of the program's own in the image task: called (maybe several
 * times, for other batch sizes) to build logits (B, n_classes) from the
 * images x (B, C, H, W) FP32 into g; the parameters it declares (ct_param)
 * are trained, saved and loaded under their names. */
typedef ct_status (*ct_model_build_fn)(void *user, ct_graph *g, ct_node x, int64_t n_classes, ct_node *logits);
/* The built-in image task of recipe r (an image model: its data, batches,
 * evaluation, loss, as ct_task_create) with the model built by `build`
 * instead of r->model's row; pass it as ct_train_opts.task and free it with
 * ct_task_free after ct_train. The recipe's model keys (hidden, channels)
 * are ignored. CT_E_CONFIG for a text model's recipe. */
ct_status ct_task_image_custom(ct_context *ctx, const ct_recipe *r, ct_model_build_fn build, void *user,
                               ct_task **out);

/* Recipe key fit (auto / max_batch, with memory_budget): the candidate configurations for `world` ranks, one line
 * each with its memory, estimated step time and fits / too big, and the one the trainer would try first, printed to
 * out without training (`ctrain graph --fit`); t builds the graphs (ct_task_create for r). */
ct_status ct_train_fit_report(ct_context *ctx, const ct_recipe *r, ct_task *t, int world, FILE *out);

/* What one data parallel rank holds of the model under the recipe's zero_stage on `world` ranks, in bytes, from
 * the plan's statistics (ct_plan_get_stats of one rank's plan) and its largest parameter: the parameters between
 * uses and at their peak (stage 3: 1/N, and 1/N plus two units of bucket_size_mb gathered), the gradients
 * between steps and at backward's peak (stage 2, 3: 1/N, and 1/N plus two buckets in flight, plus the shard's
 * accumulator with accumulate_steps), the optimizer state (stage >= 1: 1/N) and the 16-bit weight copies
 * (whole). `ctrain graph --world N` prints it; fit's candidates use it. */
typedef struct {
    double params, params_peak, grads_between, grads_peak, state, copies;
} ct_zero_estimate;
void ct_train_zero_estimate(const ct_recipe *r, const ct_plan_stats *ps, double largest_param_bytes, int world,
                            ct_zero_estimate *out);

/* The learning rate the recipe's lr_scaling gives for its global batch. */
double ct_train_scaled_lr(const ct_recipe *r);

/* The recipe's schedule over `total` optimizer steps. A recipe with keys in
 * epochs (warmup_epochs, step_size_epochs, cosine_epochs) needs
 * ct_train_schedule_epochs: here they are a CT_E_CONFIG error. */
ct_status ct_train_schedule(ct_context *ctx, const ct_recipe *r, int64_t total, ct_schedule **out);
/* The same with `steps_per_epoch` optimizer steps per epoch (> 0): each key in
 * epochs becomes ceil(epochs x steps_per_epoch) optimizer steps (warmup_steps,
 * step_size, cosine's T_max; cosine_after hold: ct_schedule_opts.cosine_hold).
 * The decay counts from the end of the warmup, as with warmup_steps. */
ct_status ct_train_schedule_epochs(ct_context *ctx, const ct_recipe *r, int64_t total, int64_t steps_per_epoch,
                                   ct_schedule **out);

/* GPT / BERT sizes from the recipe (preset + overrides; the vocabulary of
 * the tokenizer, +1 for BERT's mask id); errors name the key. */
ct_status ct_train_gpt_config(ct_context *ctx, const ct_recipe *r, int64_t tok_vocab, ct_gpt_config *c);
ct_status ct_train_bert_config(ct_context *ctx, const ct_recipe *r, int64_t tok_vocab, ct_bert_config *c);
/* The recipe's tokenizer (char: fitted on text). */
ct_status ct_train_tokenizer(ct_context *ctx, const ct_recipe *r, const char *text, size_t len, ct_tokenizer **out);
#define CT_TRAIN_VOCAB_FILE "tokenizer.vocab"
/* An image folder model's class names, one a line in class order, in its checkpoints' step directories. */
#define CT_TRAIN_CLASSES_FILE "classes.txt"

#ifdef __cplusplus
}
#endif
#endif
