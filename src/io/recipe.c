/* src/io/recipe.c - recipe keys, JSON parsing (cJSON) and validation. One
 * table lists every key with its type, range and meaning; JSON files and CLI
 * flags both go through set_value, so they validate the same way. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/recipe.h"

typedef enum { K_INT, K_I64, K_U64, K_F32, K_BOOL, K_STR, K_LIST, K_ENUM, K_ENUM_OPT, K_BYTES } key_type;

typedef struct {
    const char *key;
    key_type type;
    size_t off;          /* offset into ct_recipe                                  */
    size_t size;         /* string capacity / list count offset                    */
    double lo, hi;       /* inclusive range for numbers / list items               */
    const char *choices; /* K_ENUM: "a|b|c" in the enum's order (value = index)     */
    int models;          /* M_ALL, M_IMG, M_LM or M_ROW: the models it applies to   */
    const char *flag;    /* the `ctrain train` flag, or NULL (--set KEY=VALUE)      */
    const char *help;
} key_def;

#define OFF(f) offsetof(ct_recipe, f)
#define SZ(f) sizeof(((ct_recipe *)0)->f)
/* Which models a key applies to (ct_recipe_key_info.models follows from the model table):
 * every model, the models of one family, or the rows that list the key (CT_MODEL_TABLE in models.h). */
enum { M_ALL = 0, M_IMG, M_LM, M_ROW };
/* "mlp|cnn|...": the rows' names, in the table's (the enum's) order */
#define MODEL_CHOICE_(ID, nm, fam, keys, desc) "|" #nm
#define MODELS (&CT_MODEL_TABLE(MODEL_CHOICE_)[1]) /* without the first "|" */
/* enum keys whose values are library enums: the choices follow their order
 * (tests/test_recipe.c checks them against ct_schedule_kind_name and
 * ct_precision_name) */
#define SCHEDULES "constant|step|multistep|exponential|cosine|cosine_restarts|linear|polynomial|one_cycle|inverse_sqrt|plateau"
#define PRECISIONS "fp32|bf16|fp16|bf16-pure|fp16-pure"

/* Texts that follow from the model table, written once (fill_model_texts):
 * the choices and help of `preset`, the help of `model`. */
static char k_presets[256], k_preset_help[256], k_model_help[512];

/* The one table of recipe keys: parsing, validation, --help and the key
 * list in docs/recipes.md (`ctrain train --help-keys markdown`) come from it. */
static const key_def k_keys[] = {
    {"model", K_ENUM, OFF(model), 0, 0, 0, MODELS, M_ALL, "--model", k_model_help},
    {"hidden", K_LIST, OFF(hidden), OFF(n_hidden), 1, 1 << 20, NULL, M_ROW, "--hidden", "MLP hidden layer sizes, e.g. 1024,1024"},
    {"activation", K_ENUM, OFF(activation), 0, 0, 0, "relu|gelu|gelu-tanh|silu|tanh", M_ROW, NULL,
     "MLP hidden activation (gelu: exact erf GELU, gelu-tanh: its tanh approximation)"},
    {"channels", K_LIST, OFF(channels), OFF(n_channels), 1, 1 << 16, NULL, M_ROW, "--channels",
     "CNN conv block channels, e.g. 32,64 (conv3x3-batchnorm-relu-maxpool per block)"},
    {"dropout", K_F32, OFF(dropout), 0, 0, 0.999, NULL, M_ROW, "--dropout",
     "dropout probability (MLP hidden layers; GPT/BERT: replaces the preset's; efficientnet: before the classifier)"},
    {"dataset", K_ENUM, OFF(dataset), 0, 0, 0, "mnist|fashion-mnist|moby-dick|imagefolder|cifar10|cifar100", M_ALL,
     "--dataset",
     "images: mnist, fashion-mnist (IDX files), imagefolder (JPEG/PNG class folders), cifar10, cifar100 (binary "
     "version); text: moby-dick (data/text/moby-dick.txt)"},
    {"data_dir", K_STR, OFF(data_dir), SZ(data_dir), 0, 0, NULL, M_IMG, "--data-dir",
     "IDX: folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]; imagefolder: folder with train_dir and "
     "val_dir; cifar: folder with the .bin files (default data/<dataset>)"},
    {"epochs", K_INT, OFF(epochs), 0, 1, 100000, NULL, M_ALL, "--epochs",
     "passes over the training images; text: without max_steps the run is epochs x eval_every steps"},
    {"batch_size", K_I64, OFF(batch_size), 0, 1, 1 << 20, NULL, M_ALL, "--batch-size", "samples (sequences) per micro-batch"},
    {"max_steps", K_I64, OFF(max_steps), 0, 0, 1e15, NULL, M_ALL, "--max-steps", "stop after this many optimizer steps (0: no limit)"},
    {"seed", K_U64, OFF(seed), 0, 0, 1.8e19, NULL, M_ALL, "--seed", "parameter init, shuffling, dropout and batch sampling"},
    {"threads", K_INT, OFF(threads), 0, 0, 1024, NULL, M_ALL, "--threads", "compute threads (0: all cores)"},
    {"flush_subnormals", K_BOOL, OFF(flush_subnormals), 0, 0, 1, NULL, M_ALL, NULL,
     "flush subnormal floats (< 1.2e-38) to zero in every computing thread (x86 FTZ/DAZ): late in training they "
     "slow x86 cores several-fold; false keeps them, as PyTorch does by default (results may differ in the last "
     "bits); the environment variable CT_FLUSH_SUBNORMALS=0|1 overrides it"},
    {"optimizer.name", K_ENUM_OPT, OFF(optim.kind), 0, 0, 0, "sgd|adamw|adam|rmsprop|adagrad|lamb", M_ALL, "--optimizer",
     "the optimizer (PyTorch 1.13 semantics); resets the other optimizer keys to its defaults, so it applies first"},
    {"optimizer.lr", K_F32, OFF(optim.lr), 0, 0, 1e3, NULL, M_ALL, "--lr", "the base learning rate (peak of the schedule)"},
    {"optimizer.weight_decay", K_F32, OFF(optim.weight_decay), 0, 0, 1e3, NULL, M_ALL, "--weight-decay",
     "weight decay (decoupled for adamw/lamb, L2 in the gradient for the others)"},
    {"optimizer.momentum", K_F32, OFF(optim.momentum), 0, 0, 0.99999, NULL, M_ALL, "--momentum", "sgd / rmsprop momentum"},
    {"optimizer.dampening", K_F32, OFF(optim.dampening), 0, 0, 1, NULL, M_ALL, NULL, "sgd dampening"},
    {"optimizer.nesterov", K_BOOL, OFF(optim.nesterov), 0, 0, 1, NULL, M_ALL, NULL, "sgd Nesterov momentum (needs momentum > 0, dampening 0)"},
    {"optimizer.beta1", K_F32, OFF(optim.beta1), 0, 0, 0.99999994, NULL, M_ALL, NULL, "adam/adamw/lamb first-moment decay"},
    {"optimizer.beta2", K_F32, OFF(optim.beta2), 0, 0, 0.99999994, NULL, M_ALL, NULL, "adam/adamw/lamb second-moment decay"},
    {"optimizer.eps", K_F32, OFF(optim.eps), 0, 1e-30, 1, NULL, M_ALL, NULL, "denominator epsilon"},
    {"optimizer.amsgrad", K_BOOL, OFF(optim.amsgrad), 0, 0, 1, NULL, M_ALL, NULL, "adam/adamw AMSGrad"},
    {"optimizer.alpha", K_F32, OFF(optim.alpha), 0, 0, 0.99999994, NULL, M_ALL, NULL, "rmsprop smoothing constant"},
    {"optimizer.centered", K_BOOL, OFF(optim.centered), 0, 0, 1, NULL, M_ALL, NULL, "centered rmsprop"},
    {"optimizer.lr_decay", K_F32, OFF(optim.lr_decay), 0, 0, 1e3, NULL, M_ALL, NULL, "adagrad lr decay"},
    {"optimizer.initial_accumulator_value", K_F32, OFF(optim.initial_accumulator_value), 0, 0, 1e3, NULL, M_ALL, NULL,
     "adagrad initial accumulator"},
    {"schedule", K_ENUM, OFF(schedule), 0, 0, 0, SCHEDULES, M_ALL, "--schedule",
     "the LR schedule (PyTorch's schedulers value for value; see below)"},
    {"warmup_steps", K_INT, OFF(warmup_steps), 0, 0, 1e9, NULL, M_ALL, NULL,
     "linear warmup steps, then the schedule starts afresh; not with one_cycle/plateau; required by inverse_sqrt"},
    {"min_lr", K_F32, OFF(min_lr), 0, 0, 1e3, NULL, M_ALL, NULL, "floor of cosine, cosine_restarts (eta_min) and plateau; <= optimizer.lr"},
    {"warmup_start_factor", K_F32, OFF(warmup_start_factor), 0, 0, 1, NULL, M_ALL, NULL,
     "0: ramp lr*(step+1)/warmup_steps (reaches lr on the last warmup step); in (0, 1]: PyTorch LinearLR(start_factor, total_iters=warmup_steps)"},
    {"step_size", K_I64, OFF(step_size), 0, 0, 1e15, NULL, M_ALL, NULL, "step: optimizer steps between decays (this or step_size_epochs is required)"},
    {"gamma", K_F32, OFF(gamma), 0, 1e-30, 1, NULL, M_ALL, NULL, "step, multistep, exponential: decay factor"},
    {"milestones", K_LIST, OFF(milestones), OFF(n_milestones), 1, 1e15, NULL, M_ALL, NULL,
     "multistep: increasing step numbers (after warmup)"},
    {"t_0", K_I64, OFF(t_0), 0, 0, 1e15, NULL, M_ALL, NULL, "cosine_restarts: first cycle length (required)"},
    {"t_mult", K_INT, OFF(t_mult), 0, 1, 1000, NULL, M_ALL, NULL, "cosine_restarts: cycle growth"},
    {"power", K_F32, OFF(power), 0, 0, 1e3, NULL, M_ALL, NULL, "polynomial: lr*(1 - t/T)^power over the run after warmup"},
    {"end_factor", K_F32, OFF(end_factor), 0, 0, 1, NULL, M_ALL, NULL, "linear: lr falls to lr*end_factor over the run after warmup"},
    {"pct_start", K_F32, OFF(pct_start), 0, 1e-6, 0.999999, NULL, M_ALL, NULL, "one_cycle: fraction of the run rising"},
    {"div_factor", K_F32, OFF(div_factor), 0, 1e-6, 1e9, NULL, M_ALL, NULL, "one_cycle: initial lr = lr / div_factor"},
    {"final_div_factor", K_F32, OFF(final_div_factor), 0, 1e-6, 1e12, NULL, M_ALL, NULL,
     "one_cycle: final lr = initial lr / final_div_factor"},
    {"anneal", K_ENUM, OFF(anneal), 0, 0, 0, "cos|linear", M_ALL, NULL, "one_cycle: annealing shape"},
    {"plateau_patience", K_INT, OFF(plateau_patience), 0, 0, 1e9, NULL, M_ALL, NULL,
     "plateau: evaluations without improvement before the lr drops"},
    {"plateau_factor", K_F32, OFF(plateau_factor), 0, 0, 0.999999, NULL, M_ALL, NULL, "plateau: lr multiplier"},
    {"plateau_threshold", K_F32, OFF(plateau_threshold), 0, 0, 1e3, NULL, M_ALL, NULL, "plateau: relative improvement threshold"},
    {"plateau_cooldown", K_INT, OFF(plateau_cooldown), 0, 0, 1e9, NULL, M_ALL, NULL, "plateau: evaluations to wait after a drop"},
    {"early_stop_patience", K_INT, OFF(early_stop_patience), 0, 0, 1e9, NULL, M_ALL, NULL,
     "stop after this many evaluations without the watched metric improving by min_delta (0: off)"},
    {"early_stop_min_delta", K_F32, OFF(early_stop_min_delta), 0, 0, 1e9, NULL, M_ALL, NULL, "the improvement that counts"},
    {"early_stop_mode", K_ENUM, OFF(early_stop_mode), 0, 0, 0, "min|max", M_ALL, NULL,
     "min: watch the evaluation loss; max: watch the test accuracy (image models)"},
    {"early_stop_restore_best", K_BOOL, OFF(early_stop_restore_best), 0, 0, 1, NULL, M_ALL, NULL,
     "at an early stop, put back the weights and buffers of the best evaluation (one copy kept in memory)"},
    {"label_smoothing", K_F32, OFF(label_smoothing), 0, 0, 0.999, NULL, M_ALL, "--label-smoothing",
     "cross-entropy label smoothing"},
    {"log_every", K_INT, OFF(log_every), 0, 1, 1e9, NULL, M_ALL, NULL, "progress line every N steps when stdout is not a terminal"},
    {"accumulate_steps", K_INT, OFF(accumulate_steps), 0, 1, 1e6, NULL, M_ALL, NULL,
     "micro-batches per optimizer step; each micro-batch's loss is scaled by 1/N"},
    {"detect_anomaly", K_BOOL, OFF(detect_anomaly), 0, 0, 1, NULL, M_ALL, NULL,
     "stop at the first op whose output holds NaN/inf, naming it (slow; for debugging)"},
    {"divergence_factor", K_F32, OFF(divergence_factor), 0, 0, 1e30, NULL, M_ALL, NULL,
     "stop with an error when a batch's loss exceeds this many times the run's first loss (and 1): the run diverged (0: off)"},
    {"clip_grad_norm", K_F32, OFF(clip_grad_norm), 0, 0, 1e9, NULL, M_ALL, NULL, "clip by global L2 norm before the step (0: off)"},
    {"clip_grad_value", K_F32, OFF(clip_grad_value), 0, 0, 1e9, NULL, M_ALL, NULL, "clamp every gradient to [-v, v] (0: off)"},
    {"recompute_every", K_INT, OFF(recompute_every), 0, 0, 1e6, NULL, M_ALL, NULL,
     "activation checkpointing: keep every N-th layer's boundary, recompute the rest in backward (0: off)"},
    {"recompute_blocks", K_INT, OFF(recompute_blocks), 0, 0, 1e6, NULL, M_LM, NULL,
     "activation checkpointing by transformer blocks: keep the input of every N-th block, recompute the rest of each group of N in backward (checkpoint_sequential; not with recompute_every; 0: off)"},
    {"recompute_ops", K_ENUM, OFF(recompute_ops), 0, 0, 0, "none|cheap|all", M_ALL, NULL,
     "op kinds recomputed (cheap: activations, elementwise, dropout, norms); alone: selective recomputation per layer"},
    {"fusion_level", K_INT, OFF(fusion_level), 0, 0, 2, NULL, M_ALL, NULL,
     "graph fusion: 0 none; 1 conv2d/linear + bias add or relu, batchnorm + relu; 2 also gelu / layernorm computed inside the next linear, dropout + add, add + relu, elementwise chains (docs/fusion.md)"},
    {"fusion_rules", K_STR, OFF(fusion_rules), SZ(fusion_rules), 0, 0, NULL, M_ALL, NULL,
     "JSON file of fusion rules {\"fusion_patterns\": [{\"ops\": [...], \"constraints\": {...}}]} (docs/fusion.md)"},
    {"memory_opt", K_BOOL, OFF(memory_opt), 0, 0, 1, NULL, M_ALL, NULL,
     "false: every activation its own buffer, no reuse (to measure what reuse saves)"},
    {"optimizer.no_decay_bias_norm", K_BOOL, OFF(optim.no_decay_bias_norm), 0, 0, 1, NULL, M_ALL, NULL,
     "no weight decay on 1-D parameters (biases, norm weights)"},
    {"preset", K_STR, OFF(preset), SZ(preset), 0, 0, k_presets, M_LM, NULL, k_preset_help},
    {"n_layer", K_INT, OFF(n_layer), 0, 0, 1024, NULL, M_LM, NULL, "transformer blocks (0: the preset's)"},
    {"n_head", K_INT, OFF(n_head), 0, 0, 1024, NULL, M_LM, NULL, "attention heads (0: the preset's)"},
    {"d_model", K_I64, OFF(d_model), 0, 0, 1 << 16, NULL, M_LM, NULL, "model width (0: the preset's)"},
    {"context", K_I64, OFF(context), 0, 0, 1 << 20, NULL, M_LM, NULL, "sequence length (0: the preset's; at most the preset's)"},
    {"tokenizer", K_ENUM, OFF(tokenizer), 0, 0, 0, "char|byte|gpt2", M_LM, NULL,
     "char (the corpus's bytes), byte (256) or gpt2 (BPE from bpe_dir)"},
    {"text_file", K_STR, OFF(text_file), SZ(text_file), 0, 0, NULL, M_LM, NULL, "a custom corpus (default data/text/<dataset>.txt)"},
    {"bpe_dir", K_STR, OFF(bpe_dir), SZ(bpe_dir), 0, 0, NULL, M_LM, NULL, "folder with encoder.json and vocab.bpe (default data/text/gpt2)"},
    {"val_fraction", K_F32, OFF(val_fraction), 0, 1e-6, 0.999, NULL, M_LM, NULL, "the last fraction of the tokens is the validation split"},
    {"eval_every", K_I64, OFF(eval_every), 0, 0, 1e15, NULL, M_LM, NULL,
     "steps between validation evaluations (0: only at the end); image models evaluate every epoch"},
    {"eval_batches", K_I64, OFF(eval_batches), 0, 0, 1e15, NULL, M_LM, NULL,
     "validation batches per evaluation (GPT 0: the whole split; BERT 0: 20)"},
    {"save_dir", K_STR, OFF(save_dir), SZ(save_dir), 0, 0, NULL, M_ALL, "--save-dir",
     "write checkpoints to <save_dir>/step-NNNNNN/ (<save_dir>/latest names the newest); always one at the end"},
    {"save_every", K_I64, OFF(save_every), 0, 0, 1e15, NULL, M_ALL, "--save-every", "steps between checkpoints (0: only at the end)"},
    {"keep_last", K_INT, OFF(keep_last), 0, 0, 1e6, NULL, M_ALL, "--keep", "step directories kept (0: all)"},
    {"metrics_file", K_STR, OFF(metrics_file), SZ(metrics_file), 0, 0, NULL, M_ALL, "--metrics",
     "JSON-lines metrics log: one line per step, evaluation and loss-scale event"},
    {"tensorboard_dir", K_STR, OFF(tensorboard_dir), SZ(tensorboard_dir), 0, 0, NULL, M_ALL, "--tensorboard-dir",
     "write TensorBoard event files (the metrics log's scalars) into DIR; view: tensorboard --logdir DIR"},
    {"profile_dir", K_STR, OFF(profile_dir), SZ(profile_dir), 0, 0, NULL, M_ALL, "--profile",
     "profile steps 4-13: write DIR/trace.json (Chrome trace) and print the doctor's verdict"},
    {"prefetch", K_INT, OFF(prefetch), 0, 0, 4096, NULL, M_IMG, NULL,
     "image batches loaded ahead by background threads (0: synchronous); the same batches bit for bit"},
    {"prefetch_threads", K_INT, OFF(prefetch_threads), 0, 1, 256, NULL, M_IMG, NULL,
     "prefetch worker threads; the batches do not depend on it"},
    {"augment", K_BOOL, OFF(augment), 0, 0, 1, NULL, M_IMG, NULL,
     "training images, keyed by (seed, epoch, index): IDX: random crop (pad 2) + horizontal flip; imagefolder/cifar: "
     "RandomResizedCrop(image_size, crop_scale, crop_ratio) or, with crop_padding, RandomCrop(image_size, "
     "crop_padding) + hflip (off: Resize + CenterCrop as evaluation)"},
    {"precision", K_ENUM, OFF(precision), 0, 0, 0, PRECISIONS, M_ALL, "--precision",
     "fp32, bf16/fp16 (autocast, FP32 master weights), bf16-pure/fp16-pure (every op stores low precision)"},
    {"keep_fp32", K_STR, OFF(keep_fp32), SZ(keep_fp32), 0, 0, NULL, M_ALL, "--keep-fp32",
     "comma-separated layer names or op kinds that stay FP32 under autocast"},
    {"loss_scale.mode", K_ENUM, OFF(scale_mode), 0, 0, 0, "auto|dynamic|static|off", M_ALL, NULL,
     "auto: dynamic for fp16, static for fp16-pure, off otherwise"},
    {"loss_scale.init_scale", K_F32, OFF(scale_init), 0, 0, 3.0e38, NULL, M_ALL, NULL, "first scale (0: 65536 dynamic, 1024 static)"},
    {"loss_scale.growth_factor", K_F32, OFF(scale_growth_factor), 0, 1, 1e6, NULL, M_ALL, NULL,
     "scale multiplier after growth_interval clean steps"},
    {"loss_scale.backoff_factor", K_F32, OFF(scale_backoff_factor), 0, 1e-6, 0.999999, NULL, M_ALL, NULL, "scale multiplier on overflow"},
    {"loss_scale.growth_interval", K_INT, OFF(scale_growth_interval), 0, 1, 1e9, NULL, M_ALL, NULL,
     "clean (overflow-free) steps before growing"},
    {"loss_scale.hysteresis", K_INT, OFF(scale_hysteresis), 0, 1, 1e6, NULL, M_ALL, NULL,
     "overflows in a row tolerated before backing off"},
    {"loss_scale.min_scale", K_F32, OFF(scale_min), 0, 1e-30, 3.0e38, NULL, M_ALL, NULL, "lower clamp of the dynamic scale"},
    {"loss_scale.max_scale", K_F32, OFF(scale_max), 0, 1e-30, 3.0e38, NULL, M_ALL, NULL, "upper clamp of the dynamic scale"},
    {"loss_scale.floor_patience", K_INT, OFF(scale_floor_patience), 0, 1, 1e9, NULL, M_ALL, NULL,
     "overflows in a row at min_scale before loss_scale.floor applies"},
    {"loss_scale.floor", K_ENUM, OFF(scale_floor), 0, 0, 0, "error|stop", M_ALL, NULL,
     "error: the run fails with advice; stop: it stops cleanly (checkpoint written)"},
    {"memory_budget", K_BYTES, OFF(memory_budget), 0, 0, 9.2e18, NULL, M_ALL, "--memory-budget",
     "bytes the run may allocate, e.g. \"8G\" (0: no limit); a plan that does not fit fails with E60003 and advice"},
    {"fit", K_ENUM, OFF(fit), 0, 0, 0, "off|auto|max_batch", M_ALL, NULL,
     "with memory_budget: auto trains the fastest configuration of the same global batch that fits (accumulate_steps, "
     "recompute_blocks / recompute_every, zero_stage, bf16 with fit_allow_bf16); max_batch the largest global batch "
     "that fits in 90% of the budget, lr scaled by lr_scaling; the header lists the candidates"},
    {"fit_allow_bf16", K_BOOL, OFF(fit_allow_bf16), 0, 0, 1, NULL, M_ALL, NULL,
     "fit auto may train a precision fp32 recipe in bf16 (off: fit never changes the precision)"},
    {"bn_stats_once", K_BOOL, OFF(bn_stats_once), 0, 0, 1, NULL, M_ROW, NULL,
     "with accumulate_steps > 1: update batchnorm running statistics on the last micro-batch of a step only"},
    {"lr_scaling", K_ENUM, OFF(lr_scaling), 0, 0, 0, "none|linear|sqrt|linear_then_sqrt", M_ALL, NULL,
     "scale optimizer.lr by the global batch (batch_size x accumulate_steps) over lr_base_batch"},
    {"lr_base_batch", K_I64, OFF(lr_base_batch), 0, 1, 1 << 30, NULL, M_ALL, NULL, "the batch optimizer.lr was tuned for"},
    {"lr_sqrt_from_batch", K_I64, OFF(lr_sqrt_from_batch), 0, 0, 1 << 30, NULL, M_ALL, NULL,
     "linear_then_sqrt: linear up to this batch, sqrt beyond (0: 8 x lr_base_batch)"},
    {"zero_stage", K_INT, OFF(zero_stage), 0, 0, 3, NULL, M_ALL, NULL,
     "data parallel: 0 every rank keeps the whole optimizer state; 1 each rank keeps and updates its shard "
     "(bucketed reduce-scatter overlapped with backward + allgather); 2 also releases each gradient bucket outside "
     "its shard as soon as it is reduced (the peak holds one shard plus the buckets in flight); 3 also shards the "
     "parameters: each unit of bucket_size_mb is allgathered just before use in forward and backward, one unit "
     "ahead, and released after"},
    {"deterministic", K_BOOL, OFF(deterministic), 0, 0, 1, NULL, M_ALL, NULL,
     "bit-identical weights and losses at 1, 2, 4, ... ranks: batches cut into deterministic_chunks chunks whose "
     "gradients are added in one fixed tree"},
    {"deterministic_chunks", K_INT, OFF(deterministic_chunks), 0, 1, 1024, NULL, M_ALL, NULL,
     "deterministic: chunks per global batch (a power of two; the world size must divide it)"},
    {"tensor_parallel", K_INT, OFF(tensor_parallel), 0, 1, 1024, NULL, M_LM, NULL,
     "Megatron-style tensor parallelism: consecutive groups of this many ranks split each layer (attention heads, "
     "the MLP's hidden units, the vocabulary); it must divide n_head and d_ff; data parallel is world / T"},
    {"grad_reduce_method", K_ENUM, OFF(grad_reduce_method), 0, 0, 0, "mean|sum", M_LM, NULL,
     "tensor parallel: the gradient of a parameter every tensor rank holds a copy of (layernorms, biases after a "
     "row-parallel layer) is the mean of the ranks' (= one process's) or their sum (T times larger)"},
    {"pipeline_stages", K_INT, OFF(pipeline_stages), 0, 1, 256, NULL, M_ALL, NULL,
     "pipeline parallelism: the model cut into this many consecutive stages (at block boundaries: transformer "
     "layers, MLP layers, CNN / ResNet blocks), one per group of ranks; activations and their gradients go between "
     "neighbours; the micro-batches of a step are accumulate_steps (micro_batches)"},
    {"pipeline_schedule", K_ENUM, OFF(pipeline_schedule), 0, 0, 0, "1f1b|gpipe|interleaved", M_ALL, NULL,
     "pipeline: gpipe runs every micro-batch's forward, then the backwards (holds all of them); 1f1b alternates "
     "once the pipeline is full (a stage holds at most P of them); interleaved gives each rank virtual_stages "
     "pieces (a smaller bubble, more messages)"},
    {"micro_batches", K_INT, OFF(accumulate_steps), 0, 1, 1e6, NULL, M_ALL, NULL,
     "pipeline: the micro-batches of one optimizer step, each of batch_size rows (the same key as accumulate_steps)"},
    {"virtual_stages", K_INT, OFF(virtual_stages), 0, 0, 64, NULL, M_ALL, NULL,
     "pipeline_schedule interleaved: pieces per rank (0: 2); the model is cut into pipeline_stages x this many"},
    {"pipeline_split", K_STR, OFF(pipeline_split), SZ(pipeline_split), 0, 0, NULL, M_ALL, NULL,
     "pipeline: where the stages start, comma-separated: block indices (\"4,8,12\") or block names "
     "(\"layer3,layer4\"); \"\" (default): cuts balancing each stage's FLOPs and parameter bytes"},
    {"comm_timeout", K_F32, OFF(comm_timeout), 0, 0, 1e7, NULL, M_ALL, NULL,
     "data parallel (ctrain train): end the job when a rank waits this many seconds in one collective: another rank "
     "hangs (0: wait forever)"},
    {"train_dir", K_STR, OFF(train_dir), SZ(train_dir), 0, 0, NULL, M_IMG, NULL,
     "imagefolder: training subfolder of data_dir, one folder per class (class index: sorted folder names)"},
    {"val_dir", K_STR, OFF(val_dir), SZ(val_dir), 0, 0, NULL, M_IMG, NULL,
     "imagefolder: evaluation subfolder of data_dir, with the same class folders"},
    {"image_size", K_INT, OFF(image_size), 0, 0, 8192, NULL, M_IMG, NULL,
     "imagefolder/cifar: side S of the square S x S input (0: 32)"},
    {"image_channels", K_INT, OFF(image_channels), 0, 1, 3, NULL, M_IMG, NULL,
     "imagefolder/cifar: 3 (RGB; gray, CMYK, palette converted) or 1 (gray)"},
    {"resize_size", K_INT, OFF(resize_size), 0, 0, 16384, NULL, M_IMG, NULL,
     "imagefolder/cifar evaluation (and training without augment): Resize(shorter side) then CenterCrop(image_size) "
     "(0: image_size; ImageNet: 256 for 224)"},
    {"mean", K_STR, OFF(mean), SZ(mean), 0, 0, NULL, M_IMG, NULL,
     "imagefolder/cifar: per-channel mean of x/255, e.g. \"0.485,0.456,0.406\" (\"\": 0.5 each; one value: all channels)"},
    {"std", K_STR, OFF(std), SZ(std), 0, 0, NULL, M_IMG, NULL,
     "imagefolder/cifar: per-channel std of x/255, e.g. \"0.229,0.224,0.225\" (\"\": 0.5 each)"},
    {"crop_scale_min", K_F32, OFF(crop_scale_min), 0, 1e-6, 1, NULL, M_IMG, NULL,
     "imagefolder/cifar augment: RandomResizedCrop smallest area fraction"},
    {"crop_scale_max", K_F32, OFF(crop_scale_max), 0, 1e-6, 1, NULL, M_IMG, NULL,
     "imagefolder/cifar augment: RandomResizedCrop largest area fraction"},
    {"crop_ratio_min", K_F32, OFF(crop_ratio_min), 0, 1e-3, 1e3, NULL, M_IMG, NULL,
     "imagefolder/cifar augment: RandomResizedCrop smallest aspect ratio w/h"},
    {"crop_ratio_max", K_F32, OFF(crop_ratio_max), 0, 1e-3, 1e3, NULL, M_IMG, NULL,
     "imagefolder/cifar augment: RandomResizedCrop largest aspect ratio w/h"},
    {"crop_padding", K_INT, OFF(crop_padding), 0, 0, 4096, NULL, M_IMG, NULL,
     "imagefolder/cifar augment: > 0 takes RandomCrop(image_size, padding) instead of RandomResizedCrop: an "
     "image_size window of the image padded with black, no resampling (CIFAR-style; 0: RandomResizedCrop)"},
    {"hflip", K_BOOL, OFF(hflip), 0, 0, 1, NULL, M_IMG, NULL, "imagefolder/cifar augment: horizontal flip with p = 0.5"},
    {"bad_images", K_ENUM, OFF(bad_images), 0, 0, 0, "error|skip", M_IMG, NULL,
     "imagefolder: an undecodable file (truncated, not a JPEG/PNG, 0 bytes) stops the run naming it (error), or is "
     "replaced by the next good image and counted (skip)"},
    {"bucket_size_mb", K_F32, OFF(bucket_size_mb), 0, 0, 1e6, NULL, M_ALL, NULL,
     "data parallel: gradient bucket size in MiB, the first bucket at most 1 (0: one bucket of all gradients)"},
    {"overlap_communication", K_BOOL, OFF(overlap_communication), 0, 0, 1, NULL, M_ALL, NULL,
     "data parallel: start each bucket's allreduce during backward as soon as its gradients are final"},
    {"comm_progress", K_ENUM, OFF(comm_progress), 0, 0, 0, "thread|hook", M_ALL, NULL,
     "data parallel overlap: who drives MPI during backward (a communication thread, or the grad-ready hook)"},
    {"grad_compression", K_ENUM, OFF(grad_compression), 0, 0, 0, "none|bf16|fp16", M_ALL, NULL,
     "data parallel: send gradients as bf16/fp16 with error feedback (each rank keeps what rounding lost)"},
    {"sync_batchnorm", K_BOOL, OFF(sync_batchnorm), 0, 0, 1, NULL, M_ROW, NULL,
     "data parallel: batchnorm's batch statistics over the global batch (reduced across ranks); default per rank"},
    {"dynamic_shapes", K_BOOL, OFF(dynamic_shapes), 0, 0, 1, NULL, M_ALL, NULL,
     "compile for the maximum batch / length and run smaller ones at their size: the last partial image batch "
     "trains and evaluates unpadded, text_docs batches use their own length (false: drop / pad to the maximum)"},
    {"text_docs", K_ENUM, OFF(text_docs), 0, 0, 0, "off|paragraphs|lines|sentences", M_LM, NULL,
     "train on the corpus's documents (blank-line paragraphs, lines or sentences), variable length, instead of "
     "random context windows; validation: every validation document once"},
    {"length_buckets", K_INT, OFF(length_buckets), 0, 1, 4096, NULL, M_LM, NULL,
     "text_docs: each batch draws its rows from one of this many buckets of similar-length documents (1: any)"},
    {"pad_to_multiple", K_I64, OFF(pad_to_multiple), 0, 1, 1 << 20, NULL, M_LM, NULL,
     "text_docs: a batch's sequence length is its longest document rounded up to a multiple of this"},
    {"cifar_stem", K_BOOL, OFF(cifar_stem), 0, 0, 1, NULL, M_ROW, NULL,
     "resnet: 3x3 stride-1 first conv and no max pool (for 32x32 images)"},
    {"channels_last", K_BOOL, OFF(channels_last), 0, 0, 1, NULL, M_ROW, NULL,
     "run the convolutions, pooling and batchnorm on (N, H, W, C) activations (the same model and parameters; "
     "oneDNN's convolutions then reorder nothing: faster on AVX-512); false: NCHW"},
    {"num_classes", K_I64, OFF(num_classes), 0, 0, 1 << 24, NULL, M_ROW, NULL,
     "classifier outputs (0: the dataset's classes; at least those)"},
    {"width_div", K_INT, OFF(width_div), 0, 1, 64, NULL, M_ROW, NULL,
     "divide every width by this (reduced variants; resnet: must divide 64)"},
    {"max_blocks", K_INT, OFF(max_blocks), 0, 0, 64, NULL, M_ROW, NULL, "at most this many blocks per stage (0: all)"},
    {"window", K_INT, OFF(window), 0, 0, 64, NULL, M_ROW, NULL,
     "swin: the attention window (0: 7, torchvision's); maps that are no multiple of it are zero-padded as "
     "torchvision pads them (small images: a smaller window wastes less, e.g. 2 or 4 for 32x32 or 64x64)"},
    {"init_weights", K_STR, OFF(init_weights), SZ(init_weights), 0, 0, NULL, M_ALL, NULL,
     "start from the weights of this safetensors file (exact names and shapes, e.g. torchvision's converted by "
     "scripts/torchvision_to_safetensors.py); a resumed run keeps its checkpoint's"},
    {"warmup_epochs", K_F32, OFF(warmup_epochs), 0, 0, 1e6, NULL, M_ALL, NULL,
     "warm-up length in epochs (rounded up to optimizer steps; text: eval_every steps per epoch); replaces warmup_steps"},
    {"step_size_epochs", K_F32, OFF(step_size_epochs), 0, 0, 1e6, NULL, M_ALL, NULL,
     "step: epochs between decays (x0.1 every 30 epochs: 30 with gamma 0.1), rounded to optimizer steps as "
     "warmup_epochs; replaces step_size"},
    {"cosine_epochs", K_F32, OFF(cosine_epochs), 0, 0, 1e6, NULL, M_ALL, NULL,
     "cosine: the period T in epochs, PyTorch's CosineAnnealingLR(T_max = T x steps per epoch, eta_min = min_lr) "
     "stepped every optimizer step, counted after warmup (0: T is the run after warmup); past T see cosine_after"},
    {"cosine_after", K_ENUM, OFF(cosine_after), 0, 0, 0, "cycle|hold", M_ALL, NULL,
     "cosine past its period T: cycle follows the closed form min_lr + (lr - min_lr)(1 + cos(pi t/T))/2 back up to lr "
     "at 2T (what CosineAnnealingLR does), hold stays at min_lr"},
    {"drop_path", K_F32, OFF(drop_path), 0, -1, 0.999, NULL, M_ROW, NULL,
     "efficientnet, swin: stochastic depth rate of the last block, linear in the block index (-1: torchvision's "
     "0.2; swin_t/s/b 0.2/0.3/0.5)"},
};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

/* ---- what follows from the model table ---------------------------------------------------- */

static pthread_once_t k_texts_once = PTHREAD_ONCE_INIT;

/* Appends the names of the models of `family` to buf ("mlp, cnn, ..."). */
static size_t family_names(char *buf, size_t len, size_t o, ct_model_family family, const char *sep) {
    int first = 1;
    for (int m = 0; m < CT_MODEL_COUNT; m++) {
        if (ct_model_family_of((ct_model_kind)m) != family || o >= len) continue;
        o += (size_t)snprintf(buf + o, len - o, "%s%s", first ? "" : sep, ct_model_name((ct_model_kind)m));
        first = 0;
    }
    return o;
}

/* The presets of model m into buf: "a, b" (sep ", ") or "|a|b" (sep "|", lead 1). */
static size_t preset_names(char *buf, size_t len, size_t o, ct_model_kind m, const char *sep, int lead) {
    for (int j = 0; ct_model_preset_name(m, j) && o < len; j++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", j || lead ? sep : "", ct_model_preset_name(m, j));
    return o;
}

static void fill_model_texts(void) {
    size_t o = 0, h = 0;
    h += (size_t)snprintf(k_preset_help, sizeof k_preset_help, "model size preset (");
    for (int m = 0; m < CT_MODEL_COUNT; m++) {
        if (!ct_model_preset_name((ct_model_kind)m, 0) || h >= sizeof k_preset_help) continue;
        o = preset_names(k_presets, sizeof k_presets, o, (ct_model_kind)m, "|", 1);
        h += (size_t)snprintf(k_preset_help + h, sizeof k_preset_help - h, "%s: ", ct_model_name((ct_model_kind)m));
        h = preset_names(k_preset_help, sizeof k_preset_help, h, (ct_model_kind)m, ", ", 0);
        if (h < sizeof k_preset_help) h += (size_t)snprintf(k_preset_help + h, sizeof k_preset_help - h, "; ");
    }
    if (h < sizeof k_preset_help) snprintf(k_preset_help + h, sizeof k_preset_help - h, "\"\": the first)");
    size_t n = (size_t)snprintf(k_model_help, sizeof k_model_help, "the model (docs/models.md): ");
    n = family_names(k_model_help, sizeof k_model_help, n, CT_MODEL_FAMILY_TEXT, " and ");
    if (n < sizeof k_model_help)
        n += (size_t)snprintf(k_model_help + n, sizeof k_model_help - n, " train on text, the others on images; a "
                              "preset's name (");
    for (int m = 0; m < CT_MODEL_COUNT && n < sizeof k_model_help; m++)
        if (ct_model_preset_name((ct_model_kind)m, 0)) {
            if (k_model_help[n - 1] != '(') n += (size_t)snprintf(k_model_help + n, sizeof k_model_help - n, ", ");
            n = preset_names(k_model_help, sizeof k_model_help, n, (ct_model_kind)m, ", ", 0);
        }
    if (n < sizeof k_model_help) snprintf(k_model_help + n, sizeof k_model_help - n, ") picks its model and preset");
}
static void model_texts(void) { pthread_once(&k_texts_once, fill_model_texts); }

/* `word` is one of the space-separated words of list. */
static int has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
    return 0;
}

/* Key k applies to model m: every model, its family, or m's row lists it. */
static int key_applies(const key_def *k, ct_model_kind m) {
    switch (k->models) {
    case M_IMG: return ct_model_family_of(m) == CT_MODEL_FAMILY_IMAGE;
    case M_LM: return ct_model_family_of(m) == CT_MODEL_FAMILY_TEXT;
    case M_ROW: return has_word(ct_model_keys(m), k->key);
    default: return 1;
    }
}

static unsigned key_models(const key_def *k) {
    unsigned mask = 0;
    for (int m = 0; m < CT_MODEL_COUNT; m++)
        if (key_applies(k, (ct_model_kind)m)) mask |= 1u << m;
    return mask;
}

/* The models of mask `models` by name: "mlp, cnn". */
static void models_list(unsigned models, char *buf, size_t len) {
    size_t o = 0;
    if (len) buf[0] = 0;
    for (int m = 0; m < CT_MODEL_COUNT; m++)
        if (models & (1u << m) && o < len)
            o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? ", " : "", ct_model_name((ct_model_kind)m));
}

void ct_recipe_models_text(unsigned models, char *buf, size_t len) {
    unsigned family[2] = {0, 0};
    for (int m = 0; m < CT_MODEL_COUNT; m++) family[ct_model_family_of((ct_model_kind)m)] |= 1u << m;
    if (models == family[CT_MODEL_FAMILY_IMAGE]) snprintf(buf, len, "image models");
    else if (models == family[CT_MODEL_FAMILY_TEXT]) snprintf(buf, len, "text models");
    else models_list(models, buf, len);
}

void ct_recipe_default(ct_recipe *r) {
    memset(r, 0, sizeof *r);
    r->dynamic_shapes = 1;
    r->flush_subnormals = 1;
    r->channels_last = 1;
    r->comm_progress = 1; /* hook: quiet, it hid more than the thread everywhere (docs/distributed.md) */
    r->length_buckets = 8;
    r->pad_to_multiple = 8;
    r->model = CT_MODEL_MLP;
    r->width_div = 1;
    r->drop_path = -1.0f; /* the model's */
    r->n_hidden = 2;
    r->hidden[0] = r->hidden[1] = 1024;
    r->n_channels = 2;
    r->channels[0] = 32;
    r->channels[1] = 64;
    r->dataset = CT_DATASET_MNIST;
    r->epochs = 10;
    r->batch_size = 128;
    ct_optim_opts_default(&r->optim, CT_OPTIM_ADAMW);
    r->schedule = CT_SCHED_COSINE;
    r->gamma = 0.1f;
    r->t_mult = 1;
    r->power = 1.0f;
    r->pct_start = 0.3f;
    r->div_factor = 25.0f;
    r->final_div_factor = 1e4f;
    r->anneal = CT_ANNEAL_COS;
    r->plateau_patience = 10;
    r->plateau_factor = 0.1f;
    r->plateau_threshold = 1e-4f;
    r->log_every = 100;
    r->accumulate_steps = 1;
    r->deterministic_chunks = 4;
    r->tensor_parallel = 1;
    r->pipeline_stages = 1;
    r->divergence_factor = 1e4f;
    r->early_stop_mode = CT_EARLY_STOP_MIN;
    r->recompute_ops = CT_RECOMPUTE_OPS_NONE;
    r->fusion_level = 1;
    r->memory_opt = 1;
    r->precision = CT_PRECISION_FP32;
    r->scale_mode = CT_SCALE_AUTO;
    r->scale_floor = CT_SCALE_FLOOR_ERROR;
    r->scale_growth_factor = 2.0f; /* ct_scaler_opts_default's values */
    r->scale_backoff_factor = 0.5f;
    r->scale_growth_interval = 2000;
    r->scale_hysteresis = 1;
    r->scale_min = 1.0f;
    r->scale_max = 16777216.0f;
    r->scale_floor_patience = 10;
    r->tokenizer = CT_TOKENIZER_CHAR;
    r->val_fraction = 0.1f;
    r->eval_every = 100;
    r->eval_batches = 20;
    r->keep_last = 3;
    r->prefetch = 4;
    r->prefetch_threads = 1;
    r->lr_scaling = CT_LR_SCALING_NONE;
    r->lr_base_batch = 256;
    snprintf(r->train_dir, sizeof r->train_dir, "train");
    snprintf(r->val_dir, sizeof r->val_dir, "val");
    r->image_channels = 3;
    r->crop_scale_min = 0.08f;
    r->crop_scale_max = 1.0f;
    r->crop_ratio_min = 3.0f / 4.0f;
    r->crop_ratio_max = 4.0f / 3.0f;
    r->hflip = 1;
    r->bucket_size_mb = 25.0f;
    r->overlap_communication = 1;
}

static const key_def *find_key(const char *key) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(k_keys[i].key, key)) return &k_keys[i];
    return NULL;
}

/* Other frameworks' spellings (the seeds' own, PyTorch's, DeepSpeed's) of ctrain's keys. */
static const struct {
    const char *theirs, *ours;
} k_aliases[] = {
    {"accumulation_steps", "accumulate_steps"}, {"gradient_accumulation_steps", "accumulate_steps"},
    {"keep_fp32_modules", "keep_fp32"}, {"dynamic_scaling", "loss_scale.mode"},
    {"max_batch_size", "batch_size (with dynamic_shapes)"}, {"init_scale", "loss_scale.init_scale"},
    {"growth_factor", "loss_scale.growth_factor"}, {"backoff_factor", "loss_scale.backoff_factor"},
    {"growth_interval", "loss_scale.growth_interval"}, {"buffer_size", "prefetch"},
    {"learning_rate", "optimizer.lr"}, {"lr", "optimizer.lr"}, {"weight_decay", "optimizer.weight_decay"},
    {"momentum", "optimizer.momentum"}, {"betas", "optimizer.beta1 and optimizer.beta2"},
    {"num_epochs", "epochs"}, {"max_epochs", "epochs"}, {"train_batch_size", "batch_size"},
    {"micro_batch_size", "batch_size"}, {"grad_clip", "clip_grad_norm"}, {"max_grad_norm", "clip_grad_norm"},
    {"gradient_clipping", "clip_grad_norm"}, {"mixed_precision", "precision"}, {"dtype", "precision"},
    {"amp", "precision"}, {"lr_scheduler", "schedule"}, {"scheduler", "schedule"},
    {"checkpoint_dir", "save_dir"}, {"output_dir", "save_dir"}, {"num_workers", "prefetch_threads"},
    {"num_layers", "n_layer"}, {"num_heads", "n_head"}, {"hidden_size", "d_model"}, {"block_size", "context"},
    {"seq_len", "context"}, {"stage", "zero_stage"}, {"zero_optimization.stage", "zero_stage"},
    {"tensor_model_parallel_size", "tensor_parallel"}, {"pipeline_model_parallel_size", "pipeline_stages"},
    /* the rest of the guide's (docs/seeds.md) */
    {"split_dim", "tensor_parallel (the split is per layer)"}, {"memory_growth_factor", "dynamic_shapes"},
    {"patience", "early_stop_patience"}, {"min_delta", "early_stop_min_delta"}, {"eta_min", "min_lr"},
    {"T_max", "cosine_epochs"}, {"t_max", "cosine_epochs"}, {"max_lr", "optimizer.lr"},
    {"checkpoint_sequential", "recompute_blocks"}, {"checkpoint_every", "recompute_every"},
    {"fusion_patterns", "fusion_rules (a file holding them)"}, {"compression", "grad_compression"},
    {"step_size_epoch", "step_size_epochs"}, {"cosine_epoch", "cosine_epochs"},
};

/* Levenshtein distance of a and b, capped: returns cap + 1 once it is larger. */
static int edit_distance(const char *a, const char *b, int cap) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return cap + 1;
    int row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0], best;
        row[0] = best = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j], v = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < v) v = up + 1;
            if (row[j - 1] + 1 < v) v = row[j - 1] + 1;
            diag = up;
            row[j] = v;
            if (v < best) best = v;
        }
        if (best > cap) return cap + 1;
    }
    return row[lb];
}

/* The last dotted component of a key ("optimizer.lr" -> "lr"). */
static const char *key_leaf(const char *k) {
    const char *d = strrchr(k, '.');
    return d ? d + 1 : k;
}

/* "did you mean" for key: another framework's spelling, or the keys closest in spelling (whole key or its last
 * component), at most 3, written to out ("" when none is close). */
static void suggest_keys(const char *key, char *out, size_t len) {
    out[0] = 0;
    const char *leaf = key_leaf(key);
    for (size_t i = 0; i < sizeof k_aliases / sizeof k_aliases[0]; i++)
        if (!strcmp(key, k_aliases[i].theirs) || !strcmp(leaf, k_aliases[i].theirs)) {
            snprintf(out, len, "ctrain calls it '%s'", k_aliases[i].ours);
            return;
        }
    int cap = strlen(leaf) <= 4 ? 1 : strlen(leaf) <= 8 ? 2 : 3, best[3] = {cap + 1, cap + 1, cap + 1};
    size_t pick[3] = {0, 0, 0};
    for (size_t i = 0; i < N_KEYS; i++) {
        int d = edit_distance(key, k_keys[i].key, cap), dl = edit_distance(leaf, key_leaf(k_keys[i].key), cap);
        if (dl < d) d = dl;
        size_t lk = strlen(key);
        if (d > 1 && lk >= 4 && !strncmp(k_keys[i].key, key, lk)) d = 1; /* "warmup" -> "warmup_steps" */
        for (int j = 0; j < 3; j++)
            if (d < best[j]) {
                for (int m = 2; m > j; m--) { best[m] = best[m - 1]; pick[m] = pick[m - 1]; }
                best[j] = d;
                pick[j] = i;
                break;
            }
    }
    size_t o = 0;
    for (int j = 0; j < 3 && best[j] <= cap && o < len; j++)
        o += (size_t)snprintf(out + o, len - o, "%s'%s'", j ? (j + 1 < 3 && best[j + 1] <= cap ? ", " : " or ") : "did you mean ",
                              k_keys[pick[j]].key);
}

static ct_status unknown_key(ct_context *ctx, const char *key) {
    char hint[256];
    suggest_keys(key, hint, sizeof hint);
    return ct_set_error(ctx, CT_E_CONFIG, "unknown recipe key '%s'%s%s%s; `ctrain train --help-keys` lists every key "
                        "(docs/recipes.md)", key, hint[0] ? " (" : "", hint, hint[0] ? ")" : "");
}

/* The index of v in "a|b|c" (an empty choice matches ""), or -1. */
static int choice_index(const char *choices, const char *v) {
    if (!choices) return -1;
    size_t n = strlen(v);
    int i = 0;
    for (const char *c = choices;; i++) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && !strncmp(c, v, n)) return i;
        if (!bar) return -1;
        c = bar + 1;
    }
}
static int in_choices(const char *choices, const char *v) { return choice_index(choices, v) >= 0; }

/* "8G", "512M", "64K", "1.5G" or a plain number of bytes; -1 when malformed. */
static double parse_bytes(const char *v) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || errno || !(x >= 0)) return -1;
    double mul = 1;
    if (*end) {
        switch (*end) {
        case 'k': case 'K': mul = 1024.0; break;
        case 'm': case 'M': mul = 1048576.0; break;
        case 'g': case 'G': mul = 1073741824.0; break;
        case 't': case 'T': mul = 1099511627776.0; break;
        default: return -1;
        }
        end++;
        if (*end == 'i') end++;
        if (*end == 'B' || *end == 'b') end++;
        if (*end) return -1;
    }
    return floor(x * mul);
}

static ct_status set_number(ct_context *ctx, ct_recipe *r, const key_def *k, double v) {
    char *base = (char *)r + k->off;
    if (!isfinite(v) || v < k->lo || v > k->hi)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': value %g is out of range [%g, %g]", k->key, v, k->lo,
                            k->hi);
    if ((k->type == K_INT || k->type == K_I64 || k->type == K_U64 || k->type == K_BYTES) && v != floor(v))
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': value %g must be an integer", k->key, v);
    switch (k->type) {
    case K_INT: *(int *)base = (int)v; break;
    case K_I64: *(int64_t *)base = (int64_t)v; break;
    case K_U64: *(uint64_t *)base = (uint64_t)v; break;
    case K_F32: *(float *)base = (float)v; break;
    case K_BOOL: *(int *)base = v != 0; break;
    case K_BYTES: *(int64_t *)base = (int64_t)v; break;
    default: return CT_E_INTERNAL;
    }
    return CT_OK;
}

static ct_status set_string(ct_context *ctx, ct_recipe *r, const key_def *k, const char *v) {
    if (k->type == K_BYTES) {
        double b = parse_bytes(v);
        if (b < 0)
            return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': '%s' is not a size (bytes, or e.g. 512M, 8G)",
                                k->key, v);
        return set_number(ctx, r, k, b);
    }
    model_texts();
    ct_model_kind model;
    const char *preset = NULL;
    if (k->off == OFF(model) && !in_choices(k->choices, v) && ct_model_find(NULL, v, &model, &preset) == CT_OK &&
        preset) { /* a preset's name: its model and the preset */
        r->model = model;
        snprintf(r->preset, sizeof r->preset, "%s", preset);
        return CT_OK;
    }
    if (k->choices && !in_choices(k->choices, v))
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': '%s' is not one of %s", k->key, v, k->choices);
    if (k->type == K_ENUM) {
        *(int *)((char *)r + k->off) = choice_index(k->choices, v);
        return CT_OK;
    }
    if (k->type == K_ENUM_OPT) {
        ct_optim_kind kind = CT_OPTIM_ADAMW;
        ct_optim_kind_parse(v, &kind); /* v is one of the choices */
        float lr = r->optim.lr;
        int lr_set = r->optim.kind == kind;
        ct_optim_opts_default(&r->optim, kind); /* the kind's defaults, then keys set after it */
        if (lr_set) r->optim.lr = lr;
        return CT_OK;
    }
    if (strlen(v) >= k->size)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': value is longer than %zu characters", k->key,
                            k->size - 1);
    snprintf((char *)r + k->off, k->size, "%s", v);
    return CT_OK;
}

static ct_status set_list(ct_context *ctx, ct_recipe *r, const key_def *k, const double *v, int n) {
    if (n < 1 || n > CT_RECIPE_MAX_LAYERS)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': needs 1..%d sizes, got %d", k->key,
                            CT_RECIPE_MAX_LAYERS, n);
    int64_t *dst = (int64_t *)((char *)r + k->off);
    for (int i = 0; i < n; i++) {
        if (!(v[i] >= k->lo && v[i] <= k->hi) || v[i] != floor(v[i]))
            return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': item %d (%g) must be an integer in [%g, %g]",
                                k->key, i, v[i], k->lo, k->hi);
        dst[i] = (int64_t)v[i];
    }
    *(int *)((char *)r + k->size) = n;
    return CT_OK;
}

ct_status ct_recipe_set(ct_context *ctx, ct_recipe *r, const char *key, const char *value) {
    if (!r || !key || !value) return CT_E_INVALID_ARG;
    const key_def *k = find_key(!strcmp(key, "optimizer") ? "optimizer.name" : key); /* optimizer=sgd: its name */
    if (!k) return unknown_key(ctx, key);
    if (k->type == K_STR || k->type == K_ENUM_OPT || k->type == K_ENUM || k->type == K_BYTES)
        return set_string(ctx, r, k, value);
    if (k->type == K_LIST) {
        double v[CT_RECIPE_MAX_LAYERS + 1];
        int n = 0;
        const char *p = value;
        while (*p && n <= CT_RECIPE_MAX_LAYERS) {
            char *end;
            errno = 0;
            v[n++] = strtod(p, &end);
            if (end == p || errno)
                return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': '%s' is not a comma-separated list of sizes",
                                    key, value);
            p = end;
            if (*p == ',') p++;
            else if (*p) return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': unexpected '%c' in '%s'", key, *p, value);
        }
        return set_list(ctx, r, k, v, n);
    }
    if (k->type == K_BOOL) {
        if (!strcmp(value, "true") || !strcmp(value, "1")) return set_number(ctx, r, k, 1);
        if (!strcmp(value, "false") || !strcmp(value, "0")) return set_number(ctx, r, k, 0);
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': '%s' is not true or false", key, value);
    }
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (end == value || *end || errno)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': '%s' is not a number", key, value);
    return set_number(ctx, r, k, v);
}

/* One JSON recipe being applied: which keys it has set, to refuse a key given twice (cJSON keeps both members
 * of an object; a field reached through two spellings, such as "optimizer.lr" and {"optimizer": {"lr"}}, or
 * micro_batches and accumulate_steps, counts too). */
typedef struct {
    ct_context *ctx;
    ct_recipe *r;
    char seen[N_KEYS][160]; /* the spelling that set key i, "" when unset */
} json_apply;

/* A member's name appears earlier in the same object. */
static ct_status check_duplicates(ct_context *ctx, const cJSON *obj, const char *prefix) {
    for (const cJSON *it = obj->child; it; it = it->next)
        for (const cJSON *jt = obj->child; jt != it; jt = jt->next)
            if (it->string && jt->string && !strcmp(it->string, jt->string))
                return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s%s' is given twice; keep one", prefix, it->string);
    return CT_OK;
}

/* Key k set under the spelling `key`: an error when the recipe already set it. *alias: the key sharing k's
 * field (micro_batches, accumulate_steps) that the recipe set, or NULL: the two may both be given with one
 * value (a recipe written by ct_recipe_to_json_full has both), not with two. */
static ct_status mark_seen(json_apply *ja, const key_def *k, const char *key, const key_def **alias) {
    *alias = NULL;
    for (size_t i = 0; i < N_KEYS; i++)
        if (k_keys[i].off == k->off && ja->seen[i][0]) {
            if (&k_keys[i] != k) {
                *alias = &k_keys[i];
                continue;
            }
            return ct_set_error(ja->ctx, CT_E_CONFIG, "recipe key '%s' is given twice (as %s and as %s); keep "
                                "one", k->key, ja->seen[i], key);
        }
    snprintf(ja->seen[k - k_keys], sizeof ja->seen[0], "%s", key);
    return CT_OK;
}

static ct_status set_json_value(json_apply *ja, const cJSON *it, const key_def *k, const char *key);

/* One leaf member `it` under its full name `key`. */
static ct_status apply_item(json_apply *ja, const cJSON *it, const char *key) {
    ct_context *ctx = ja->ctx;
    ct_recipe *r = ja->r;
    const key_def *k = find_key(key);
    if (!strncmp(key, "model.", 6)) /* the model section: "type" is the model, the rest are flat keys */
        k = !strcmp(key + 6, "type") ? find_key("model") : find_key(key + 6);
    if (!k) return unknown_key(ctx, key);
    const char *dot = strrchr(key, '.');
    char spelled[160];
    if (it->string && dot && !strcmp(it->string, dot + 1) && strcmp(it->string, key)) /* {"optimizer": {"lr"}} */
        snprintf(spelled, sizeof spelled, "\"%s\" in the \"%.*s\" section", it->string, (int)(dot - key), key);
    else snprintf(spelled, sizeof spelled, "'%.120s'", key);
    const key_def *alias;
    CT_TRY(mark_seen(ja, k, spelled, &alias));
    char before[128] = "", after[128] = "";
    if (alias) ct_recipe_get(r, k->key, before, sizeof before);
    CT_TRY(set_json_value(ja, it, k, key));
    if (alias && (ct_recipe_get(r, k->key, after, sizeof after), strcmp(before, after)))
        return ct_set_error(ctx, CT_E_CONFIG, "recipe keys '%s' (%s) and '%s' (%s) set the same thing to two values; "
                            "keep one", alias->key, before, k->key, after);
    return CT_OK;
}

/* The JSON value of key k onto the recipe, checked against the key's type. */
static ct_status set_json_value(json_apply *ja, const cJSON *it, const key_def *k, const char *key) {
    ct_context *ctx = ja->ctx;
    ct_recipe *r = ja->r;
    if (k->type == K_BYTES && cJSON_IsNumber(it)) return set_number(ctx, r, k, it->valuedouble);
    if (k->type == K_STR || k->type == K_ENUM_OPT || k->type == K_ENUM || k->type == K_BYTES) {
        if (!cJSON_IsString(it)) return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s' must be a string", key);
        return set_string(ctx, r, k, it->valuestring);
    }
    if (k->type == K_LIST) {
        double v[CT_RECIPE_MAX_LAYERS + 1];
        int n = 0;
        if (!cJSON_IsArray(it)) return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s' must be an array of sizes", key);
        for (const cJSON *e = it->child; e; e = e->next) {
            if (!cJSON_IsNumber(e))
                return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': item %d is not a number", key, n);
            if (n > CT_RECIPE_MAX_LAYERS) { n++; break; }
            v[n++] = e->valuedouble;
        }
        return set_list(ctx, r, k, v, n);
    }
    if (k->type == K_BOOL) {
        if (!cJSON_IsBool(it)) return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s' must be true or false", key);
        return set_number(ctx, r, k, cJSON_IsTrue(it));
    }
    if (!cJSON_IsNumber(it)) return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s' must be a number", key);
    return set_number(ctx, r, k, it->valuedouble);
}

static ct_status apply_json(json_apply *ja, const cJSON *obj, const char *prefix) {
    CT_TRY(check_duplicates(ja->ctx, obj, prefix));
    /* optimizer.name first so the kind's defaults do not override later keys */
    for (int pass = 0; pass < 2; pass++) {
        for (const cJSON *it = obj->child; it; it = it->next) {
            char key[128];
            snprintf(key, sizeof key, "%s%s", prefix, it->string ? it->string : "");
            if (!strcmp(key, "optimizer") && cJSON_IsString(it)) /* "optimizer": "sgd" is {"name": "sgd"} */
                snprintf(key, sizeof key, "optimizer.name");
            else if (!strcmp(key, "optimizer") && !cJSON_IsObject(it))
                return ct_set_error(ja->ctx, CT_E_CONFIG, "recipe key 'optimizer' must be a name (\"adamw\") or an object "
                                    "({\"name\": \"adamw\", \"lr\": 0.001})");
            int is_name = !strcmp(key, "optimizer.name");
            if ((pass == 0) != is_name && !cJSON_IsObject(it)) continue;
            if (cJSON_IsObject(it)) {
                if (pass == 1) continue;
                /* sections: {"optimizer": {...}}, {"loss_scale": {...}}, {"model": {"type": ...}} */
                if (prefix[0] || (strcmp(key, "optimizer") && strcmp(key, "loss_scale") && strcmp(key, "model")))
                    return unknown_key(ja->ctx, key); /* key == it->string here */
                char sub[64];
                snprintf(sub, sizeof sub, "%s.", it->string);
                CT_TRY(apply_json(ja, it, sub));
                continue;
            }
            CT_TRY(apply_item(ja, it, key));
        }
    }
    return CT_OK;
}

/* A string member of obj, or of its "model" section (section_key there), or NULL. */
static const char *json_model_str(const cJSON *obj, const char *key, const char *section_key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    const cJSON *sec = cJSON_GetObjectItemCaseSensitive(obj, "model");
    if (!cJSON_IsString(v) && cJSON_IsObject(sec)) v = cJSON_GetObjectItemCaseSensitive(sec, section_key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* "model": a preset's name with a "preset" naming another: the recipe contradicts itself, whatever the key order. */
static ct_status check_model_preset(ct_context *ctx, const cJSON *root) {
    const char *model = json_model_str(root, "model", "type"), *preset = json_model_str(root, "preset", "preset");
    const char *implied = NULL;
    ct_model_kind kind;
    if (!model || !preset || ct_model_find(NULL, model, &kind, &implied) != CT_OK || !implied || !strcmp(implied, preset))
        return CT_OK;
    return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'model' is '%s', a preset's name (model %s, preset %s), but 'preset' "
                        "is '%s'; keep one of the two", model, ct_model_name(kind), implied, preset);
}

ct_status ct_recipe_parse_json(ct_context *ctx, const char *json, ct_recipe *r) {
    if (!json || !r) return CT_E_INVALID_ARG;
    const char *endp = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &endp, 1);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        int line = 1, col = 1;
        for (const char *c = json; at && c < at && *c; c++) {
            if (*c == '\n') { line++; col = 1; }
            else col++;
        }
        return ct_set_error(ctx, CT_E_CONFIG, "recipe is not valid JSON: syntax error at line %d, column %d", line, col);
    }
    ct_status s = CT_OK;
    if (!cJSON_IsObject(root)) s = ct_set_error(ctx, CT_E_CONFIG, "recipe must be a JSON object {...}");
    else s = check_model_preset(ctx, root);
    json_apply *ja = s == CT_OK ? calloc(1, sizeof *ja) : NULL;
    if (s == CT_OK && !ja) s = ct_set_error(ctx, CT_E_OOM, "out of memory parsing the recipe");
    if (ja) {
        ja->ctx = ctx;
        ja->r = r;
        s = apply_json(ja, root, "");
        free(ja);
    }
    cJSON_Delete(root);
    return s;
}

ct_status ct_recipe_load_file(ct_context *ctx, const char *path, ct_recipe *r) {
    FILE *f = fopen(path, "rb");
    if (!f) return ct_set_error(ctx, CT_E_IO, "cannot open recipe '%s': %s", path, strerror(errno));
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || n > (1 << 24) || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return ct_set_error(ctx, CT_E_IO, "cannot read recipe '%s' (not a regular file or larger than 16 MiB)", path);
    }
    buf = malloc((size_t)n + 1);
    if (!buf) {
        fclose(f);
        return ct_set_error(ctx, CT_E_OOM, "out of memory reading recipe '%s'", path);
    }
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = 0;
    ct_status s = ct_recipe_parse_json(ctx, buf, r);
    free(buf);
    if (s != CT_OK) {
        char prefix[600];
        snprintf(prefix, sizeof prefix, "%s: ", path);
        ct_wrap_error(ctx, s, prefix, NULL);
    }
    return s;
}

/* What r's keys are compared with: ct_recipe_default with the optimizer's
 * own defaults (optimizer.name resets them). */
static void baseline(const ct_recipe *r, ct_recipe *base) {
    ct_recipe_default(base);
    ct_optim_opts_default(&base->optim, r->optim.kind);
}

/* The recipe's value of key k equals the baseline's. */
static int key_is_default(const ct_recipe *r, const ct_recipe *base, const key_def *k) {
    const char *a = (const char *)r + k->off, *b = (const char *)base + k->off;
    switch (k->type) {
    case K_INT: case K_BOOL: case K_ENUM: return *(const int *)a == *(const int *)b;
    case K_ENUM_OPT: return 1; /* every model takes an optimizer */
    case K_I64: case K_BYTES: return *(const int64_t *)a == *(const int64_t *)b;
    case K_U64: return *(const uint64_t *)a == *(const uint64_t *)b;
    case K_F32: return *(const float *)a == *(const float *)b;
    case K_STR: return !strcmp(a, b);
    case K_LIST: {
        int na = *(const int *)((const char *)r + k->size), nb = *(const int *)((const char *)base + k->size);
        return na == nb && !memcmp(a, b, sizeof(int64_t) * (size_t)(na > 0 ? na : 0));
    }
    }
    return 1;
}

/* The recipe's preset is one of its model's: a CT_E_CONFIG error listing every model's presets otherwise. */
static ct_status check_preset(ct_context *ctx, const ct_recipe *r) {
    if (!r->preset[0]) return CT_OK;
    for (int j = 0; ct_model_preset_name(r->model, j); j++)
        if (!strcmp(r->preset, ct_model_preset_name(r->model, j))) return CT_OK;
    char all[256];
    size_t o = 0;
    all[0] = 0;
    for (int m = 0; m < CT_MODEL_COUNT; m++)
        if (ct_model_preset_name((ct_model_kind)m, 0) && o < sizeof all) {
            if (o) o += (size_t)snprintf(all + o, sizeof all - o, " | ");
            o = preset_names(all, sizeof all, o, (ct_model_kind)m, ", ", 0);
        }
    return ct_set_error(ctx, CT_E_CONFIG, "preset '%s' is not a %s preset (%s)", r->preset, ct_model_name(r->model),
                        all);
}

/* A key set away from its default must apply to the model: never silently ignored. */
static ct_status check_keys_apply(ct_context *ctx, const ct_recipe *r) {
    ct_recipe base;
    baseline(r, &base);
    for (size_t i = 0; i < N_KEYS; i++) {
        const key_def *k = &k_keys[i];
        if (key_applies(k, r->model) || key_is_default(r, &base, k)) continue;
        char ms[512];
        models_list(key_models(k), ms, sizeof ms);
        return ct_set_error(ctx, CT_E_CONFIG,
                            "recipe key '%s' does not apply to model '%s' (it applies to %s); remove it or pick one "
                            "of those models",
                            k->key, ct_model_name(r->model), ms);
    }
    return CT_OK;
}

/* The schedule keys in epochs: each belongs to one schedule and replaces a key in steps. */
static ct_status check_epoch_keys(ct_context *ctx, const ct_recipe *r) {
    const char *sched = ct_recipe_enum_name("schedule", (int)r->schedule);
    if (r->step_size_epochs > 0 && r->step_size > 0)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe keys 'step_size_epochs' and 'step_size' are both set; keep one");
    if (r->schedule == CT_SCHED_STEP && r->step_size < 1 && !(r->step_size_epochs > 0))
        return ct_set_error(ctx, CT_E_CONFIG, "schedule 'step' needs 'step_size_epochs' (epochs between decays, e.g. "
                            "30) or 'step_size' >= 1 (optimizer steps between decays)");
    if (r->step_size_epochs > 0 && r->schedule != CT_SCHED_STEP)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'step_size_epochs' applies to schedule 'step', but the "
                            "schedule is '%s'; set \"schedule\": \"step\" or remove it", sched);
    if ((r->cosine_epochs > 0 || r->cosine_after) && r->schedule != CT_SCHED_COSINE)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s' applies to schedule 'cosine', but the schedule is "
                            "'%s'; set \"schedule\": \"cosine\" or remove it",
                            r->cosine_epochs > 0 ? "cosine_epochs" : "cosine_after", sched);
    return CT_OK;
}

ct_status ct_recipe_validate(ct_context *ctx, const ct_recipe *r) {
    if ((unsigned)r->model >= CT_MODEL_COUNT) return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'model': not a model");
    const char *model = ct_model_name(r->model);
    CT_TRY(check_keys_apply(ctx, r));
    if (r->model == CT_MODEL_MLP && r->n_hidden < 0) return ct_set_error(ctx, CT_E_CONFIG, "mlp needs 'hidden'");
    if (r->model == CT_MODEL_CNN && r->n_channels < 1)
        return ct_set_error(ctx, CT_E_CONFIG, "cnn needs 'channels', e.g. [32, 64]");
    if (r->model >= CT_MODEL_RESNET18 && r->model <= CT_MODEL_RESNET101 && 64 % r->width_div)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'width_div': %d does not divide 64 (resnet's stem width)",
                            r->width_div);
    if (r->warmup_epochs > 0 && r->warmup_steps > 0)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe keys 'warmup_epochs' and 'warmup_steps' are both set; keep one");
    if (r->recompute_every > 0 && r->recompute_blocks > 0)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe keys 'recompute_every' (%d) and 'recompute_blocks' (%d) are both "
                            "set; use one (recompute_blocks: by transformer blocks, recompute_every: by layers)",
                            r->recompute_every, r->recompute_blocks);
    int lm = ct_model_family_of(r->model) == CT_MODEL_FAMILY_TEXT;
    if (lm && r->dataset != CT_DATASET_MOBY_DICK && !r->text_file[0])
        return ct_set_error(ctx, CT_E_CONFIG, "model '%s' trains on text: set dataset 'moby-dick' or 'text_file'",
                            model);
    if (!lm && r->dataset == CT_DATASET_MOBY_DICK) {
        char text[128] = "'";
        size_t o = family_names(text, sizeof text - 1, 1, CT_MODEL_FAMILY_TEXT, "' or '");
        snprintf(text + o, sizeof text - o, "'");
        return ct_set_error(ctx, CT_E_CONFIG, "dataset 'moby-dick' is text: it needs model %s", text);
    }
    if (lm) CT_TRY(check_preset(ctx, r));
    if (lm && r->early_stop_mode == CT_EARLY_STOP_MAX)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'early_stop_mode': 'max' watches the test accuracy, which "
                            "model '%s' does not measure; use 'min' (the validation loss)", model);
    if (r->optim.kind == CT_OPTIM_SGD && r->optim.nesterov && (r->optim.momentum <= 0 || r->optim.dampening != 0))
        return ct_set_error(ctx, CT_E_CONFIG, "optimizer.nesterov needs optimizer.momentum > 0 and dampening 0");
    if (r->scale_min > r->scale_max)
        return ct_set_error(ctx, CT_E_CONFIG, "loss_scale.min_scale %g is larger than loss_scale.max_scale %g",
                            (double)r->scale_min, (double)r->scale_max);
    if (r->min_lr > r->optim.lr)
        return ct_set_error(ctx, CT_E_CONFIG, "min_lr %g is larger than optimizer.lr %g", (double)r->min_lr,
                            (double)r->optim.lr);
    CT_TRY(check_epoch_keys(ctx, r));
    if (r->schedule == CT_SCHED_MULTISTEP && r->n_milestones < 1)
        return ct_set_error(ctx, CT_E_CONFIG, "schedule 'multistep' needs 'milestones', e.g. [1000, 2000]");
    if (r->schedule == CT_SCHED_MULTISTEP)
        for (int i = 1; i < r->n_milestones; i++)
            if (r->milestones[i] <= r->milestones[i - 1])
                return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'milestones' must be increasing (item %d)", i);
    if (r->schedule == CT_SCHED_COSINE_RESTARTS && r->t_0 < 1)
        return ct_set_error(ctx, CT_E_CONFIG, "schedule 'cosine_restarts' needs 't_0' >= 1 (steps of the first cycle)");
    if ((r->schedule == CT_SCHED_ONE_CYCLE || r->schedule == CT_SCHED_PLATEAU) && r->warmup_steps > 0)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'warmup_steps' must be 0 with schedule '%s'",
                            ct_recipe_enum_name("schedule", (int)r->schedule));
    if (r->schedule == CT_SCHED_INV_SQRT && r->warmup_steps < 1)
        return ct_set_error(ctx, CT_E_CONFIG, "schedule 'inverse_sqrt' needs 'warmup_steps' >= 1");
    if (r->bn_stats_once && r->accumulate_steps < 2)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'bn_stats_once' needs accumulate_steps >= 2 (it keeps the "
                            "batchnorm running statistics of all but the last micro-batch of a step)");
    if (r->fit != CT_FIT_OFF && r->memory_budget <= 0)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'fit' (%s) needs memory_budget > 0 (the memory to fit in, "
                            "e.g. \"memory_budget\": \"8G\"); set it or remove fit",
                            r->fit == CT_FIT_AUTO ? "auto" : "max_batch");
    if (r->lr_scaling == CT_LR_SCALING_LINEAR_THEN_SQRT && r->lr_sqrt_from_batch &&
        r->lr_sqrt_from_batch < r->lr_base_batch)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'lr_sqrt_from_batch' (%lld) must be >= lr_base_batch (%lld)",
                            (long long)r->lr_sqrt_from_batch, (long long)r->lr_base_batch);
    return CT_OK;
}

/* ---- the key table, queryable ------------------------------------------------------------ */

static ct_recipe_key_info k_info[sizeof k_keys / sizeof k_keys[0]];
/* the choices of each key split once: k_choice[key][value] is the value's name */
/* the longest choice list is the model's (the table's rows) or one of 16 values in 192 characters */
#define MAX_CHOICES (CT_MODEL_COUNT > 16 ? CT_MODEL_COUNT : 16)
#define CHOICE_LEN (sizeof(CT_MODEL_TABLE(MODEL_CHOICE_)) > 192 ? sizeof(CT_MODEL_TABLE(MODEL_CHOICE_)) : 192)
static char k_choice_buf[sizeof k_keys / sizeof k_keys[0]][CHOICE_LEN];
static const char *k_choice[sizeof k_keys / sizeof k_keys[0]][MAX_CHOICES];
static int k_n_choice[sizeof k_keys / sizeof k_keys[0]];
static pthread_once_t k_info_once = PTHREAD_ONCE_INIT;

static void build_info(void) {
    model_texts();
    for (size_t i = 0; i < N_KEYS; i++) {
        const key_def *k = &k_keys[i];
        ct_recipe_key_info *o = &k_info[i];
        if (k->choices) {
            char *c = k_choice_buf[i];
            snprintf(c, sizeof k_choice_buf[i], "%s", k->choices);
            for (k_n_choice[i] = 1, k_choice[i][0] = c; (c = strchr(c, '|')) && k_n_choice[i] < MAX_CHOICES; c++) {
                *c = 0;
                k_choice[i][k_n_choice[i]++] = c + 1;
            }
        }
        o->key = k->key;
        o->lo = k->lo;
        o->hi = k->hi;
        o->choices = k->type == K_ENUM || k->type == K_ENUM_OPT || (k->type == K_STR && k->choices) ? k->choices : NULL;
        o->models = key_models(k);
        o->flag = k->flag;
        o->help = k->help;
        switch (k->type) {
        case K_INT: case K_I64: o->type = CT_KEY_INT; break;
        case K_U64: o->type = CT_KEY_UINT; break;
        case K_F32: o->type = CT_KEY_FLOAT; break;
        case K_BOOL: o->type = CT_KEY_BOOL; break;
        case K_STR: o->type = k->choices ? CT_KEY_ENUM : CT_KEY_STRING; break;
        case K_ENUM: case K_ENUM_OPT: o->type = CT_KEY_ENUM; break;
        case K_LIST: o->type = CT_KEY_LIST; break;
        case K_BYTES: o->type = CT_KEY_BYTES; break;
        }
    }
}

int ct_recipe_num_keys(void) { return (int)N_KEYS; }

const ct_recipe_key_info *ct_recipe_key_at(int i) {
    if (i < 0 || (size_t)i >= N_KEYS) return NULL;
    pthread_once(&k_info_once, build_info);
    return &k_info[i];
}

const ct_recipe_key_info *ct_recipe_key_find(const char *key) {
    const key_def *k = key ? find_key(key) : NULL;
    return k ? ct_recipe_key_at((int)(k - k_keys)) : NULL;
}

ct_status ct_recipe_key_bounds(const char *key, double *lo, double *hi) {
    const key_def *k = key ? find_key(key) : NULL;
    if (!k || k->type == K_STR || k->type == K_ENUM || k->type == K_ENUM_OPT) return CT_E_INVALID_ARG;
    if (lo) *lo = k->lo;
    if (hi) *hi = k->hi;
    return CT_OK;
}

/* The name of value v of enum key k ("?" when out of range). */
static const char *enum_name(const key_def *k, int v) {
    if (k->type == K_ENUM_OPT) return ct_optim_kind_name((ct_optim_kind)v);
    pthread_once(&k_info_once, build_info);
    size_t i = (size_t)(k - k_keys);
    return k->choices && v >= 0 && v < k_n_choice[i] ? k_choice[i][v] : "?";
}

const char *ct_recipe_enum_name(const char *key, int value) {
    const key_def *k = key ? find_key(key) : NULL;
    return k && k->choices ? enum_name(k, value) : "?";
}

int ct_recipe_is_set(const ct_recipe *r, const char *key) {
    const key_def *k = key ? find_key(key) : NULL;
    if (!k || !r) return -1;
    ct_recipe base;
    baseline(r, &base);
    return !key_is_default(r, &base, k);
}

int ct_recipe_get(const ct_recipe *r, const char *key, char *buf, size_t len) {
    const key_def *k = key ? find_key(key) : NULL;
    if (!k || !r) return -1;
    const char *p = (const char *)r + k->off;
    switch (k->type) {
    case K_INT: case K_BOOL: return k->type == K_BOOL ? snprintf(buf, len, "%s", *(const int *)p ? "true" : "false")
                                                       : snprintf(buf, len, "%d", *(const int *)p);
    case K_I64: case K_BYTES: return snprintf(buf, len, "%lld", (long long)*(const int64_t *)p);
    case K_U64: return snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)p);
    case K_F32: return snprintf(buf, len, "%.9g", (double)*(const float *)p);
    case K_STR: return snprintf(buf, len, "%s", p);
    case K_ENUM: case K_ENUM_OPT: return snprintf(buf, len, "%s", enum_name(k, *(const int *)p));
    case K_LIST: {
        int n = *(const int *)((const char *)r + k->size), o = 0;
        if (len) buf[0] = 0;
        for (int j = 0; j < n && j < CT_RECIPE_MAX_LAYERS; j++)
            o += snprintf(buf + ((size_t)o < len ? (size_t)o : len), (size_t)o < len ? len - (size_t)o : 0,
                          j ? ",%lld" : "%lld", (long long)((const int64_t *)p)[j]);
        return o;
    }
    }
    return -1;
}

/* The log line and the checkpoint use the same table-driven writer, so the
 * printed recipe always shows every key. */
int ct_recipe_to_json(const ct_recipe *r, char *buf, size_t len) { return ct_recipe_to_json_full(r, buf, len); }

/* The shortest decimal that reads back as the same float: JSON numbers are
 * parsed as doubles and then range-checked, so the double must not be the
 * float's exact value (0.99999f as a double is above 0.99999). */
static double float_shortest(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    return strtod(buf, NULL);
}

/* The value of a numeric key as a double. */
static double key_number(const ct_recipe *r, const key_def *k) {
    const char *p = (const char *)r + k->off;
    switch (k->type) {
    case K_INT:
    case K_BOOL: return *(const int *)p;
    case K_I64: return (double)*(const int64_t *)p;
    case K_U64: return (double)*(const uint64_t *)p;
    case K_F32: return *(const float *)p;
    case K_BYTES: return (double)*(const int64_t *)p;
    default: return 0;
    }
}

/* which: 0 every key, 1 the keys that apply to r->model, 2 those that do not, 3 those that apply and differ from
 * the defaults (model and optimizer.name always) */
static int to_json(const ct_recipe *r, int which, char *buf, size_t len);

int ct_recipe_to_json_full(const ct_recipe *r, char *buf, size_t len) { return to_json(r, 0, buf, len); }

int ct_recipe_to_json_applied(const ct_recipe *r, int applies, char *buf, size_t len) {
    return to_json(r, applies == 2 ? 3 : applies ? 1 : 2, buf, len);
}

static int to_json(const ct_recipe *r, int which, char *buf, size_t len) {
    /* a default the key's range excludes (sgd's eps 0) is left out: parsing
     * gives it back, as optimizer.name resets the optimizer's defaults */
    ct_recipe def;
    baseline(r, &def);
    cJSON *root = cJSON_CreateObject();
    if (!root) return -1;
    int ok = 1;
    for (size_t i = 0; i < N_KEYS && ok; i++) {
        const key_def *k = &k_keys[i];
        const char *base = (const char *)r + k->off;
        if (which && (which != 2) != key_applies(k, r->model)) continue;
        if (which == 3 && strcmp(k->key, "model") && strcmp(k->key, "optimizer.name") && key_is_default(r, &def, k))
            continue;
        if (k->type == K_INT || k->type == K_I64 || k->type == K_U64 || k->type == K_F32 || k->type == K_BYTES) {
            double v = key_number(r, k);
            if (v == key_number(&def, k) && !(v >= k->lo && v <= k->hi)) continue;
        }
        cJSON *obj = root;
        const char *name = k->key;
        const char *dot = strchr(name, '.');
        if (dot) { /* "section.key" nests as {"section": {"key": ...}} */
            char sec[32];
            snprintf(sec, sizeof sec, "%.*s", (int)(dot - name), name);
            obj = cJSON_GetObjectItemCaseSensitive(root, sec);
            if (!obj) ok = (obj = cJSON_AddObjectToObject(root, sec)) != NULL;
            name = dot + 1;
        }
        if (!ok) break;
        cJSON *item = NULL;
        switch (k->type) {
        case K_INT: item = cJSON_AddNumberToObject(obj, name, *(const int *)base); break;
        case K_I64: item = cJSON_AddNumberToObject(obj, name, (double)*(const int64_t *)base); break;
        case K_U64: item = cJSON_AddNumberToObject(obj, name, (double)*(const uint64_t *)base); break;
        case K_F32: item = cJSON_AddNumberToObject(obj, name, float_shortest(*(const float *)base)); break;
        case K_BOOL: item = cJSON_AddBoolToObject(obj, name, *(const int *)base != 0); break;
        case K_STR: item = cJSON_AddStringToObject(obj, name, base); break;
        case K_BYTES: item = cJSON_AddNumberToObject(obj, name, (double)*(const int64_t *)base); break;

        case K_ENUM: case K_ENUM_OPT: item = cJSON_AddStringToObject(obj, name, enum_name(k, *(const int *)base)); break;
        case K_LIST: {
            int n = *(const int *)((const char *)r + k->size);
            const int64_t *v = (const int64_t *)base;
            if (n < 1) continue; /* unset (a list needs >= 1 item) */
            item = cJSON_AddArrayToObject(obj, name);
            for (int j = 0; item && j < n && j < CT_RECIPE_MAX_LAYERS; j++) {
                cJSON *e = cJSON_CreateNumber((double)v[j]);
                if (!e || !cJSON_AddItemToArray(item, e)) item = NULL;
            }
            break;
        }
        }
        ok = item != NULL;
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return -1;
    int n = snprintf(buf, len, "%s", text);
    cJSON_free(text);
    return n;
}

void ct_recipe_compile_opts(const ct_recipe *r, ct_compile_opts *co) {
    ct_compile_opts_default(co);
    co->accumulate_grads = r->accumulate_steps > 1;
    co->recompute_every = r->recompute_every;
    co->recompute_blocks = r->recompute_blocks;
    co->recompute_ops = r->recompute_ops == CT_RECOMPUTE_OPS_CHEAP ? CT_RECOMPUTE_CHEAP
                        : r->recompute_ops == CT_RECOMPUTE_OPS_ALL ? CT_RECOMPUTE_ALL
                                                                   : 0;
    co->precision = r->precision;
    co->keep_fp32 = r->keep_fp32;
    co->fusion_level = r->fusion_level;
    co->memory_opt = r->memory_opt;
}
