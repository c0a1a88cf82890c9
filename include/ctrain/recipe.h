/* ctrain/recipe.h - training recipes: every knob of a run in one struct,
 * read from a JSON file and/or set key by key (the CLI's flags use the same
 * keys, so both paths share one validation). docs/recipes.md lists every
 * key. Unknown keys and out-of-range values are CT_E_CONFIG errors that name
 * the key. */
#ifndef CTRAIN_RECIPE_H
#define CTRAIN_RECIPE_H

#include "context.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_RECIPE_MAX_LAYERS 8

typedef struct ct_recipe {
    char model[16];          /* "mlp" | "cnn" | "gpt" | "bert"                  */
    int n_hidden;            /* mlp hidden layer sizes                          */
    int64_t hidden[CT_RECIPE_MAX_LAYERS];
    int n_channels;          /* cnn block channels                              */
    int64_t channels[CT_RECIPE_MAX_LAYERS];
    float dropout;
    char dataset[32];        /* "mnist" | "fashion-mnist" | "moby-dick"          */
    char data_dir[256];      /* default: data/<dataset>                         */
    int epochs;
    int64_t batch_size;
    int64_t max_steps;       /* stop after this many steps (0: no limit)        */
    uint64_t seed;
    int threads;             /* 0: all cores                                    */
    ct_optim_opts optim;
    char schedule[16];       /* a ct_schedule_kind name (schedule.h)            */
    int warmup_steps;
    float min_lr;            /* cosine floor                                    */
    /* schedule parameters (docs/recipes.md; 0 for a length: the whole run) */
    float warmup_start_factor; /* 0: ramp lr*(step+1)/warmup_steps            */
    int64_t step_size;
    float gamma;
    int n_milestones;
    int64_t milestones[CT_RECIPE_MAX_LAYERS];
    int64_t t_0;
    int t_mult;
    float power;
    float end_factor;
    float pct_start, div_factor, final_div_factor;
    char anneal[8];          /* "cos" | "linear" (one_cycle)                    */
    int plateau_patience;
    float plateau_factor, plateau_threshold;
    int plateau_cooldown;
    int early_stop_patience; /* 0: off; per-epoch test loss                     */
    float early_stop_min_delta;
    char early_stop_mode[4];     /* "min": test loss, "max": test accuracy         */
    int early_stop_restore_best; /* put back the best epoch's weights at the end  */
    float label_smoothing;
    int log_every;           /* steps between progress lines when not a TTY     */
    int accumulate_steps;    /* micro-batches per optimizer step (default 1)     */
    int detect_anomaly;      /* fail at the first op producing NaN/inf (slow)    */
    float clip_grad_norm;    /* max global L2 norm of the gradients (0: off)     */
    float clip_grad_value;   /* clamp every gradient to [-v, v] (0: off)          */
    int recompute_every;     /* activation checkpointing every N layers (0: off) */
    char recompute_ops[8];   /* "none" | "cheap" | "all": op kinds recomputed     */
    /* language models (model gpt / bert; tools/train_text.c) */
    char preset[16];         /* gpt-char-small | gpt2-124m | bert-base | bert-large ("": the model's default) */
    int n_layer, n_head;     /* 0: the preset's                                 */
    int64_t d_model, context;/* 0: the preset's                                 */
    char tokenizer[8];       /* char | byte | gpt2                               */
    char text_file[256];     /* "": data/text/<dataset>.txt                     */
    char bpe_dir[256];       /* "": data/text/gpt2 (encoder.json, vocab.bpe)    */
    float val_fraction;      /* last fraction of the tokens for validation      */
    int64_t eval_every;      /* steps between validation evaluations (0: end only) */
    int64_t eval_batches;    /* validation batches per evaluation (0: the whole split) */
    /* checkpoints (include/ctrain/checkpoint.h) */
    char save_dir[256];      /* "": no checkpoints                              */
    int64_t save_every;      /* steps between checkpoints (0: only at the end)  */
    int keep_last;           /* step directories kept (0: all); default 3       */
    char metrics_file[256];  /* JSON-lines metrics log (ctrain/metrics.h); "": none */
    char profile_dir[256];   /* profiler trace DIR/trace.json (ctrain/profile.h); "": off */
    /* data pipeline (ct_prefetcher, ctrain/data.h) */
    int prefetch;            /* ring of batches loaded ahead (default 4; 0: synchronous loader) */
    int prefetch_threads;    /* background loading threads (default 1)          */
    int augment;             /* random crop (pad 2) + horizontal flip of training images */
    /* mixed precision (ct_precision in graph.h, ct_scaler in amp.h) */
    char precision[12];      /* fp32 | bf16 | fp16 | bf16-pure | fp16-pure     */
    char keep_fp32[256];     /* comma-separated layer names / op kinds kept FP32 */
    char scale_mode[8];      /* loss_scale.mode: auto | dynamic | static | off;
                                auto: dynamic for fp16, static for fp16-pure,
                                off for bf16/fp32                              */
    float scale_init;        /* 0: 65536 dynamic, 1024 static                  */
    float scale_growth_factor, scale_backoff_factor;
    int scale_growth_interval, scale_hysteresis;
    float scale_min, scale_max;
    int scale_floor_patience;
    char scale_floor[8];     /* error | stop: what repeated overflows at min_scale do */
} ct_recipe;

/* The default recipe: MLP 784-1024-1024-10 on MNIST, AdamW. */
void ct_recipe_default(ct_recipe *r);
/* Applies a JSON object's keys on top of *r. */
ct_status ct_recipe_parse_json(ct_context *ctx, const char *json, ct_recipe *r);
ct_status ct_recipe_load_file(ct_context *ctx, const char *path, ct_recipe *r);
/* Sets one key from its text form ("optimizer.lr", "0.01"; lists as
 * "1024,512"). */
ct_status ct_recipe_set(ct_context *ctx, ct_recipe *r, const char *key, const char *value);
/* Checks cross-field consistency (e.g. cnn needs channels). */
ct_status ct_recipe_validate(ct_context *ctx, const ct_recipe *r);
/* Writes the recipe as JSON into buf (for logs): the same as
 * ct_recipe_to_json_full. */
int ct_recipe_to_json(const ct_recipe *r, char *buf, size_t len);
/* Writes every key of the recipe as JSON (checkpoints store it): parsing
 * it with ct_recipe_parse_json on top of ct_recipe_default gives back the
 * same recipe. Returns the length needed (like snprintf), or -1 on OOM. */
int ct_recipe_to_json_full(const ct_recipe *r, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
