/* ctrain/recipe.h - training recipes: every knob of a run in one struct,
 * read from a JSON file and/or set key by key (the CLI's flags use the same
 * keys, so both paths share one validation). docs/recipes.md lists every
 * key. Unknown keys and out-of-range values are CT_E_CONFIG errors that name
 * the key. */
#ifndef CTRAIN_RECIPE_H
#define CTRAIN_RECIPE_H

#include "context.h"
#include "graph.h"
#include "models.h"
#include "optim.h"
#include "schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_RECIPE_MAX_LAYERS 8

/* Enumerated keys are parsed once into these enums; ct_recipe_enum_name
 * gives the text form back. The model (ct_model_kind) is a row of the model
 * table (CT_MODEL_TABLE in models.h). */
/* 1 for the torchvision image classifiers (resnet*, efficientnet_*, swin_*). */
int ct_model_is_vision(ct_model_kind m);
typedef enum ct_dataset_kind {
    CT_DATASET_MNIST = 0,
    CT_DATASET_FASHION_MNIST,
    CT_DATASET_MOBY_DICK,
    CT_DATASET_IMAGEFOLDER, /* data_dir/{train_dir,val_dir}/<class>/<image>.{jpg,png} (ctrain/image.h) */
    CT_DATASET_CIFAR10,     /* data_dir/data_batch_{1..5}.bin, test_batch.bin */
    CT_DATASET_CIFAR100,    /* data_dir/train.bin, test.bin */
    CT_DATASET_COUNT
} ct_dataset_kind;
typedef enum ct_recompute_kinds { CT_RECOMPUTE_OPS_NONE = 0, CT_RECOMPUTE_OPS_CHEAP, CT_RECOMPUTE_OPS_ALL } ct_recompute_kinds;
typedef enum ct_early_stop_mode { CT_EARLY_STOP_MIN = 0, CT_EARLY_STOP_MAX } ct_early_stop_mode;
typedef enum ct_anneal { CT_ANNEAL_COS = 0, CT_ANNEAL_LINEAR } ct_anneal;
typedef enum ct_tokenizer_choice { CT_TOKENIZER_CHAR = 0, CT_TOKENIZER_BYTE, CT_TOKENIZER_GPT2 } ct_tokenizer_choice;
/* loss_scale.mode; AUTO resolves by precision (ct_amp_scale_mode in amp.h) */
typedef enum ct_scale_mode { CT_SCALE_AUTO = 0, CT_SCALE_DYNAMIC, CT_SCALE_STATIC, CT_SCALE_OFF } ct_scale_mode;
typedef enum ct_scale_floor { CT_SCALE_FLOOR_ERROR = 0, CT_SCALE_FLOOR_STOP } ct_scale_floor;
/* lr_scaling: the learning rate for the global batch B = batch_size x
 * accumulate_steps, from optimizer.lr tuned at lr_base_batch B0:
 *   linear            lr x B/B0
 *   sqrt              lr x sqrt(B/B0)
 *   linear_then_sqrt  lr x B/B0 up to lr_sqrt_from_batch Bs, then
 *                     lr x Bs/B0 x sqrt(B/Bs) (continuous at Bs) */
/* fit (needs memory_budget): off; auto: the fastest configuration of the same global batch that fits
 * (accumulation, recomputation, zero_stage, bf16 with fit_allow_bf16); max_batch: the largest global batch that
 * fits, the learning rate scaled by lr_scaling (src/train/fit.c) */
typedef enum ct_fit_mode { CT_FIT_OFF = 0, CT_FIT_AUTO, CT_FIT_MAX_BATCH } ct_fit_mode;
typedef enum ct_lr_scaling { CT_LR_SCALING_NONE = 0, CT_LR_SCALING_LINEAR, CT_LR_SCALING_SQRT, CT_LR_SCALING_LINEAR_THEN_SQRT } ct_lr_scaling;

/* text_docs: train the language model on documents of the corpus (off:
 * random windows of the context) */
typedef enum ct_text_docs_mode { CT_TEXT_DOCS_OFF = 0, CT_TEXT_DOCS_PARAGRAPHS, CT_TEXT_DOCS_LINES, CT_TEXT_DOCS_SENTENCES } ct_text_docs_mode;

typedef struct ct_recipe {
    ct_model_kind model;
    int n_hidden;            /* mlp hidden layer sizes                          */
    ct_activation activation;/* mlp hidden activation (models.h)                */
    int64_t hidden[CT_RECIPE_MAX_LAYERS];
    int n_channels;          /* cnn block channels                              */
    int64_t channels[CT_RECIPE_MAX_LAYERS];
    float dropout;
    ct_dataset_kind dataset;
    char data_dir[256];      /* default: data/<dataset>                         */
    int epochs;
    int64_t batch_size;
    int64_t max_steps;       /* stop after this many steps (0: no limit)        */
    uint64_t seed;
    int threads;             /* 0: all cores                                    */
    int flush_subnormals;    /* 1 (default): FTZ/DAZ (ct_context_opts)          */
    ct_optim_opts optim;
    ct_schedule_kind schedule;
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
    ct_anneal anneal;        /* one_cycle                                       */
    int plateau_patience;
    float plateau_factor, plateau_threshold;
    int plateau_cooldown;
    int early_stop_patience; /* 0: off; per-epoch test loss                     */
    float early_stop_min_delta;
    ct_early_stop_mode early_stop_mode; /* MIN: test loss, MAX: test accuracy */
    int early_stop_restore_best; /* put back the best epoch's weights at the end  */
    float label_smoothing;
    int log_every;           /* steps between progress lines when not a TTY     */
    int accumulate_steps;    /* micro-batches per optimizer step (default 1)     */
    int detect_anomaly;      /* fail at the first op producing NaN/inf (slow)    */
    float divergence_factor; /* stop when a loss exceeds this x the first (0: off) */
    float clip_grad_norm;    /* max global L2 norm of the gradients (0: off)     */
    float clip_grad_value;   /* clamp every gradient to [-v, v] (0: off)          */
    int recompute_every;     /* activation checkpointing every N layers (0: off) */
    ct_recompute_kinds recompute_ops; /* op kinds recomputed                 */
    int recompute_blocks;    /* activation checkpointing every N transformer blocks (0: off) */
    /* language models (model gpt / bert; tools/train_text.c) */
    char preset[16];         /* a preset of the model (ct_model_preset_name; "": its first) */
    int n_layer, n_head;     /* 0: the preset's                                 */
    int64_t d_model, context;/* 0: the preset's                                 */
    ct_tokenizer_choice tokenizer;
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
    char tensorboard_dir[256]; /* TensorBoard event files (ctrain/tensorboard.h); "": none */
    char profile_dir[256];   /* profiler trace DIR/trace.json (ctrain/profile.h); "": off */
    /* data pipeline (ct_prefetcher, ctrain/data.h) */
    int prefetch;            /* ring of batches loaded ahead (default 4; 0: synchronous loader) */
    int prefetch_threads;    /* background loading threads (default 1)          */
    int augment;             /* random crop (pad 2) + horizontal flip of training images */
    /* mixed precision (ct_precision in graph.h, ct_scaler in amp.h) */
    ct_precision precision;
    char keep_fp32[256];     /* comma-separated layer names / op kinds kept FP32 */
    ct_scale_mode scale_mode; /* loss_scale.mode; AUTO: dynamic for fp16, static
                                 for fp16-pure, off for bf16/fp32              */
    float scale_init;        /* 0: 65536 dynamic, 1024 static                  */
    float scale_growth_factor, scale_backoff_factor;
    int scale_growth_interval, scale_hysteresis;
    float scale_min, scale_max;
    int scale_floor_patience;
    ct_scale_floor scale_floor; /* what repeated overflows at min_scale do   */
    /* memory and batch (the seeds' knobs) */
    int64_t memory_budget;   /* bytes the plan may use (0: no limit); "8G" in a recipe */
    int bn_stats_once;       /* accumulation: update batchnorm running stats on
                                the last micro-batch of a step only            */
    ct_lr_scaling lr_scaling;
    int64_t lr_base_batch;   /* B0: the batch optimizer.lr was tuned for        */
    int64_t lr_sqrt_from_batch; /* Bs for linear_then_sqrt (0: 8 x B0)          */
    /* data parallel (docs/distributed.md) */
    int zero_stage;          /* 0: DDP; 1: optimizer state sharded; 2: + gradients */
    int deterministic;       /* bit-identical results at any world size          */
    int deterministic_chunks;/* K: chunks of every global batch (default 4)       */
    float comm_timeout;      /* CLI: seconds a rank may wait in one collective (0: forever) */
    /* tensor parallelism (gpt, bert; docs/distributed.md): the world is tensor x data ranks */
    int tensor_parallel;     /* T: ranks one model is split over (1: none); data parallel = world / T */
    int grad_reduce_method;  /* the copies every tensor rank holds: 0 mean, 1 sum of their gradients */
    /* pipeline parallelism (docs/distributed.md): the world is tensor x data x pipeline ranks */
    int pipeline_stages;     /* P: consecutive pieces of the model on P ranks (1: none)          */
    int pipeline_schedule;   /* 0 1f1b, 1 gpipe, 2 interleaved                                   */
    int virtual_stages;      /* interleaved: pieces per rank (0: 2)                               */
    char pipeline_split[256];/* cut points: block indices or names, comma-separated ("": balanced) */
    /* image data (dataset imagefolder / cifar10 / cifar100; ctrain/image.h) */
    char train_dir[64];      /* imagefolder: training subfolder of data_dir ("train") */
    char val_dir[64];        /* imagefolder: evaluation subfolder of data_dir ("val") */
    int image_size;          /* side of the square input (0: 32)                */
    int image_channels;      /* 1 or 3 (default 3)                              */
    int resize_size;         /* eval: shorter side before the center crop (0: image_size) */
    char mean[64], std[64];  /* per channel, "0.485,0.456,0.406" ("": 0.5 each)  */
    float crop_scale_min, crop_scale_max; /* augment: RandomResizedCrop area (0.08, 1) */
    float crop_ratio_min, crop_ratio_max; /* augment: aspect ratio (3/4, 4/3)  */
    int hflip;               /* augment: random horizontal flip (default 1)     */
    int crop_padding;        /* augment: > 0 RandomCrop(padding) instead of RandomResizedCrop (0) */
    int bad_images;          /* 0 error (default), 1 skip and count             */
    /* graph optimizer (ct_compile_opts; docs/fusion.md) */
    int fusion_level;        /* 0 | 1 | 2 (default 1)                           */
    char fusion_rules[256];  /* JSON file of fusion rules ("": none)            */
    int memory_opt;          /* 1 (default): activations reuse memory; 0: none  */
    /* data parallel gradient buckets (docs/distributed.md, ct_buckets in dist.h) */
    float bucket_size_mb;    /* bucket cap in MiB (default 25; 0: one bucket of every gradient) */
    int overlap_communication; /* start each bucket's allreduce during backward (default 1) */
    int comm_progress;       /* ct_bucket_progress: 0 thread, 1 hook            */
    int grad_compression;    /* ct_grad_compression: none, bf16, fp16           */
    int sync_batchnorm;      /* BatchNorm statistics over the global batch (all ranks) */
    /* dynamic shapes (docs/dynamic-shapes.md) */
    int dynamic_shapes;      /* 1 (default): the plan is compiled for the maximum and runs a
                                partial last image batch / a shorter text batch at its size;
                                0: images drop the last partial batch, text pads to the context */
    ct_text_docs_mode text_docs; /* gpt / bert: variable-length documents (default off)  */
    int length_buckets;      /* text_docs: batches draw from one of this many length buckets */
    int64_t pad_to_multiple; /* text_docs: a batch's length is rounded up to a multiple of this */
    /* torchvision image classifiers (ct_vision_config in models.h); in a JSON
     * recipe also as {"model": {"type": "resnet18", "cifar_stem": true, ...}} */
    int cifar_stem;          /* resnet: 3x3 stride-1 stem, no max pool (32x32)  */
    int channels_last;       /* cnn, resnet: NHWC activations (default 1)        */
    int64_t num_classes;     /* 0: the dataset's classes                        */
    int width_div;           /* widths / width_div (reduced variants; default 1) */
    int max_blocks;          /* at most this many blocks per stage (0: all)     */
    int window;              /* swin: attention window (0: 7, torchvision's)    */
    float drop_path;         /* efficientnet, swin: stochastic depth rate (-1: the
                                model's, torchvision's 0.2 / 0.2, 0.3, 0.5)     */
    float warmup_epochs;     /* warm-up length in epochs (0: warmup_steps counts) */
    /* schedules in epochs (ct_train_schedule_epochs converts them to optimizer steps) */
    float step_size_epochs;  /* step: epochs between decays (0: step_size counts) */
    float cosine_epochs;     /* cosine: the period T in epochs (0: the run after warmup) */
    int cosine_after;        /* cosine past T: 0 cycle (PyTorch's closed form), 1 hold at min_lr */
    char init_weights[256];  /* safetensors file the weights start from (ct_weights_load;
                                not with resume); "": the initialization     */
    /* runs that fit memory by themselves (src/train/fit.c; needs memory_budget) */
    int fit;                 /* ct_fit_mode (default off)                       */
    int fit_allow_bf16;      /* fit auto may switch precision fp32 to bf16 (default 0) */
} ct_recipe;

/* The default recipe: MLP 784-1024-1024-10 on MNIST, AdamW. */
void ct_recipe_default(ct_recipe *r);
/* Applies a JSON object's keys on top of *r. */
ct_status ct_recipe_parse_json(ct_context *ctx, const char *json, ct_recipe *r);
ct_status ct_recipe_load_file(ct_context *ctx, const char *path, ct_recipe *r);
/* Sets one key from its text form ("optimizer.lr", "0.01"; lists as
 * "1024,512"). */
ct_status ct_recipe_set(ct_context *ctx, ct_recipe *r, const char *key, const char *value);
/* Checks cross-field consistency (e.g. cnn needs channels) and that every
 * key set away from its default applies to the recipe's model: a key that
 * cannot (e.g. 'tokenizer' for an MLP, 'augment' for GPT) is a CT_E_CONFIG
 * error naming the key and the models it applies to. */
ct_status ct_recipe_validate(ct_context *ctx, const ct_recipe *r);
/* The compile options a recipe asks for (precision, keep_fp32, accumulation, recomputation, fusion level,
 * memory reuse); the rest stays ct_compile_opts_default's (fusion_rules: load r->fusion_rules yourself). */
void ct_recipe_compile_opts(const ct_recipe *r, ct_compile_opts *co);
/* Builds the recipe's model (its row's builder, src/models/) on input x with
 * the recipe's model keys (hidden, channels, width_div, preset, ...):
 * n_classes outputs (image: the dataset's classes; text: the vocabulary).
 * The text task builds its language model with its own sizes (the recipe's
 * n_layer, d_model, ...); for text models this builds the preset. */
ct_status ct_model_build(ct_graph *g, ct_node x, const ct_recipe *r, int64_t n_classes, ct_node *logits);

/* ---- the key table, queryable (as zstd's ZSTD_cParam_getBounds) ---------- */
typedef enum ct_recipe_key_type {
    CT_KEY_INT = 0, /* integer (int or int64)                         */
    CT_KEY_UINT,    /* unsigned 64-bit integer (seed)                 */
    CT_KEY_FLOAT,
    CT_KEY_BOOL,
    CT_KEY_STRING,  /* free text (paths, names)                       */
    CT_KEY_ENUM,    /* one of `choices`                               */
    CT_KEY_LIST,    /* up to CT_RECIPE_MAX_LAYERS integers            */
    CT_KEY_BYTES,   /* a size: a number of bytes or "512M", "8G"      */
} ct_recipe_key_type;

/* Models a key applies to: bit (1 << ct_model_kind), from the model table
 * (the family's keys and each row's own; CT_MODEL_TABLE in models.h). */
#define CT_KEY_MODELS_ALL ((1u << CT_MODEL_COUNT) - 1)

typedef struct ct_recipe_key_info {
    const char *key;     /* "optimizer.lr"                                         */
    ct_recipe_key_type type;
    double lo, hi;       /* inclusive bounds of numbers and list items             */
    const char *choices; /* CT_KEY_ENUM: "a|b|c" in enum order; else NULL          */
    unsigned models;     /* models it applies to (bits 1 << ct_model_kind)         */
    const char *flag;    /* its `ctrain train` flag ("--lr"), or NULL              */
    const char *help;    /* one line: what it does                                 */
} ct_recipe_key_info;

/* Number of keys, and key i (0 <= i < count) or NULL. */
int ct_recipe_num_keys(void);
const ct_recipe_key_info *ct_recipe_key_at(int i);
/* The key named `key`, or NULL. */
const ct_recipe_key_info *ct_recipe_key_find(const char *key);
/* A numeric key's bounds; CT_E_INVALID_ARG for an unknown or non-numeric key. */
ct_status ct_recipe_key_bounds(const char *key, double *lo, double *hi);
/* The text of an enum key's value ("cosine" for schedule CT_SCHED_COSINE), or "?". */
const char *ct_recipe_enum_name(const char *key, int value);
/* Writes the current value of a key as text (lists as "1024,512"); returns
 * the length needed, like snprintf, or -1 for an unknown key. */
int ct_recipe_get(const ct_recipe *r, const char *key, char *buf, size_t len);
/* 1 when the key's value in r differs from the default recipe's (with the
 * optimizer's own defaults), 0 when equal, -1 for an unknown key. */
int ct_recipe_is_set(const ct_recipe *r, const char *key);
/* The models mask as text: "image models" or "text models" for a whole
 * family (CT_MODEL_TABLE), else the names ("mlp, cnn"). */
void ct_recipe_models_text(unsigned models, char *buf, size_t len);
/* Writes the recipe as JSON into buf (for logs): the same as
 * ct_recipe_to_json_full. */
int ct_recipe_to_json(const ct_recipe *r, char *buf, size_t len);
/* Writes every key of the recipe as JSON (checkpoints store it): parsing
 * it with ct_recipe_parse_json on top of ct_recipe_default gives back the
 * same recipe. Returns the length needed (like snprintf), or -1 on OOM. */
int ct_recipe_to_json_full(const ct_recipe *r, char *buf, size_t len);
/* The same with only the keys that apply to r->model (applies 1), only
 * those that do not (applies 0), or those that apply and differ from the
 * defaults, with model and optimizer.name always (applies 2: what a run's
 * header prints). */
int ct_recipe_to_json_applied(const ct_recipe *r, int applies, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
