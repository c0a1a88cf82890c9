/* src/io/recipe.c - recipe keys, JSON parsing (cJSON) and validation. One
 * table lists every key with its type, range and meaning; JSON files and CLI
 * flags both go through set_value, so they validate the same way. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/recipe.h"

typedef enum { K_INT, K_I64, K_U64, K_F32, K_BOOL, K_STR, K_LIST, K_ENUM_OPT } key_type;

typedef struct {
    const char *key;
    key_type type;
    size_t off;       /* offset into ct_recipe                         */
    size_t size;      /* string capacity / list count offset           */
    double lo, hi;    /* inclusive range for numbers / list items      */
    const char *choices; /* "a|b|c" for strings that are enums        */
} key_def;

#define OFF(f) offsetof(ct_recipe, f)
#define SZ(f) sizeof(((ct_recipe *)0)->f)

static const key_def k_keys[] = {
    {"model", K_STR, OFF(model), SZ(model), 0, 0, "mlp|cnn|gpt|bert"},
    {"hidden", K_LIST, OFF(hidden), OFF(n_hidden), 1, 1 << 20, NULL},
    {"channels", K_LIST, OFF(channels), OFF(n_channels), 1, 1 << 16, NULL},
    {"dropout", K_F32, OFF(dropout), 0, 0, 0.999, NULL},
    {"dataset", K_STR, OFF(dataset), SZ(dataset), 0, 0, "mnist|fashion-mnist|moby-dick"},
    {"data_dir", K_STR, OFF(data_dir), SZ(data_dir), 0, 0, NULL},
    {"epochs", K_INT, OFF(epochs), 0, 1, 100000, NULL},
    {"batch_size", K_I64, OFF(batch_size), 0, 1, 1 << 20, NULL},
    {"max_steps", K_I64, OFF(max_steps), 0, 0, 1e15, NULL},
    {"seed", K_U64, OFF(seed), 0, 0, 1.8e19, NULL},
    {"threads", K_INT, OFF(threads), 0, 0, 1024, NULL},
    {"optimizer.name", K_ENUM_OPT, OFF(optim.kind), 0, 0, 0, "sgd|adamw|adam|rmsprop|adagrad|lamb"},
    {"optimizer.lr", K_F32, OFF(optim.lr), 0, 0, 1e3, NULL},
    {"optimizer.weight_decay", K_F32, OFF(optim.weight_decay), 0, 0, 1e3, NULL},
    {"optimizer.momentum", K_F32, OFF(optim.momentum), 0, 0, 0.99999, NULL},
    {"optimizer.dampening", K_F32, OFF(optim.dampening), 0, 0, 1, NULL},
    {"optimizer.nesterov", K_BOOL, OFF(optim.nesterov), 0, 0, 1, NULL},
    {"optimizer.beta1", K_F32, OFF(optim.beta1), 0, 0, 0.99999994, NULL},
    {"optimizer.beta2", K_F32, OFF(optim.beta2), 0, 0, 0.99999994, NULL},
    {"optimizer.eps", K_F32, OFF(optim.eps), 0, 1e-30, 1, NULL},
    {"optimizer.amsgrad", K_BOOL, OFF(optim.amsgrad), 0, 0, 1, NULL},
    {"optimizer.alpha", K_F32, OFF(optim.alpha), 0, 0, 0.99999994, NULL},
    {"optimizer.centered", K_BOOL, OFF(optim.centered), 0, 0, 1, NULL},
    {"optimizer.lr_decay", K_F32, OFF(optim.lr_decay), 0, 0, 1e3, NULL},
    {"optimizer.initial_accumulator_value", K_F32, OFF(optim.initial_accumulator_value), 0, 0, 1e3, NULL},
    {"schedule", K_STR, OFF(schedule), SZ(schedule), 0, 0,
     "constant|cosine|step|multistep|exponential|cosine_restarts|linear|polynomial|one_cycle|inverse_sqrt|plateau"},
    {"warmup_steps", K_INT, OFF(warmup_steps), 0, 0, 1e9, NULL},
    {"min_lr", K_F32, OFF(min_lr), 0, 0, 1e3, NULL},
    {"warmup_start_factor", K_F32, OFF(warmup_start_factor), 0, 0, 1, NULL},
    {"step_size", K_I64, OFF(step_size), 0, 0, 1e15, NULL},
    {"gamma", K_F32, OFF(gamma), 0, 1e-30, 1, NULL},
    {"milestones", K_LIST, OFF(milestones), OFF(n_milestones), 1, 1e15, NULL},
    {"t_0", K_I64, OFF(t_0), 0, 0, 1e15, NULL},
    {"t_mult", K_INT, OFF(t_mult), 0, 1, 1000, NULL},
    {"power", K_F32, OFF(power), 0, 0, 1e3, NULL},
    {"end_factor", K_F32, OFF(end_factor), 0, 0, 1, NULL},
    {"pct_start", K_F32, OFF(pct_start), 0, 1e-6, 0.999999, NULL},
    {"div_factor", K_F32, OFF(div_factor), 0, 1e-6, 1e9, NULL},
    {"final_div_factor", K_F32, OFF(final_div_factor), 0, 1e-6, 1e12, NULL},
    {"anneal", K_STR, OFF(anneal), SZ(anneal), 0, 0, "cos|linear"},
    {"plateau_patience", K_INT, OFF(plateau_patience), 0, 0, 1e9, NULL},
    {"plateau_factor", K_F32, OFF(plateau_factor), 0, 0, 0.999999, NULL},
    {"plateau_threshold", K_F32, OFF(plateau_threshold), 0, 0, 1e3, NULL},
    {"plateau_cooldown", K_INT, OFF(plateau_cooldown), 0, 0, 1e9, NULL},
    {"early_stop_patience", K_INT, OFF(early_stop_patience), 0, 0, 1e9, NULL},
    {"early_stop_min_delta", K_F32, OFF(early_stop_min_delta), 0, 0, 1e9, NULL},
    {"early_stop_mode", K_STR, OFF(early_stop_mode), SZ(early_stop_mode), 0, 0, "min|max"},
    {"early_stop_restore_best", K_BOOL, OFF(early_stop_restore_best), 0, 0, 1, NULL},
    {"label_smoothing", K_F32, OFF(label_smoothing), 0, 0, 0.999, NULL},
    {"log_every", K_INT, OFF(log_every), 0, 1, 1e9, NULL},
    {"accumulate_steps", K_INT, OFF(accumulate_steps), 0, 1, 1e6, NULL},
    {"detect_anomaly", K_BOOL, OFF(detect_anomaly), 0, 0, 1, NULL},
    {"clip_grad_norm", K_F32, OFF(clip_grad_norm), 0, 0, 1e9, NULL},
    {"clip_grad_value", K_F32, OFF(clip_grad_value), 0, 0, 1e9, NULL},
    {"recompute_every", K_INT, OFF(recompute_every), 0, 0, 1e6, NULL},
    {"recompute_ops", K_STR, OFF(recompute_ops), SZ(recompute_ops), 0, 0, "none|cheap|all"},
    {"optimizer.no_decay_bias_norm", K_BOOL, OFF(optim.no_decay_bias_norm), 0, 0, 1, NULL},
    {"preset", K_STR, OFF(preset), SZ(preset), 0, 0, "|gpt-char-small|gpt2-124m|bert-base|bert-large"},
    {"n_layer", K_INT, OFF(n_layer), 0, 0, 1024, NULL},
    {"n_head", K_INT, OFF(n_head), 0, 0, 1024, NULL},
    {"d_model", K_I64, OFF(d_model), 0, 0, 1 << 16, NULL},
    {"context", K_I64, OFF(context), 0, 0, 1 << 20, NULL},
    {"tokenizer", K_STR, OFF(tokenizer), SZ(tokenizer), 0, 0, "char|byte|gpt2"},
    {"text_file", K_STR, OFF(text_file), SZ(text_file), 0, 0, NULL},
    {"bpe_dir", K_STR, OFF(bpe_dir), SZ(bpe_dir), 0, 0, NULL},
    {"val_fraction", K_F32, OFF(val_fraction), 0, 1e-6, 0.999, NULL},
    {"eval_every", K_I64, OFF(eval_every), 0, 0, 1e15, NULL},
    {"eval_batches", K_I64, OFF(eval_batches), 0, 0, 1e15, NULL},
    {"save_dir", K_STR, OFF(save_dir), SZ(save_dir), 0, 0, NULL},
    {"save_every", K_I64, OFF(save_every), 0, 0, 1e15, NULL},
    {"keep_last", K_INT, OFF(keep_last), 0, 0, 1e6, NULL},
    {"metrics_file", K_STR, OFF(metrics_file), SZ(metrics_file), 0, 0, NULL},
    {"profile_dir", K_STR, OFF(profile_dir), SZ(profile_dir), 0, 0, NULL},
    {"prefetch", K_INT, OFF(prefetch), 0, 0, 4096, NULL},
    {"prefetch_threads", K_INT, OFF(prefetch_threads), 0, 1, 256, NULL},
    {"augment", K_BOOL, OFF(augment), 0, 0, 1, NULL},
    {"precision", K_STR, OFF(precision), SZ(precision), 0, 0, "fp32|bf16|fp16|bf16-pure|fp16-pure"},
    {"keep_fp32", K_STR, OFF(keep_fp32), SZ(keep_fp32), 0, 0, NULL},
    {"loss_scale.mode", K_STR, OFF(scale_mode), SZ(scale_mode), 0, 0, "auto|dynamic|static|off"},
    {"loss_scale.init_scale", K_F32, OFF(scale_init), 0, 0, 3.0e38, NULL},
    {"loss_scale.growth_factor", K_F32, OFF(scale_growth_factor), 0, 1, 1e6, NULL},
    {"loss_scale.backoff_factor", K_F32, OFF(scale_backoff_factor), 0, 1e-6, 0.999999, NULL},
    {"loss_scale.growth_interval", K_INT, OFF(scale_growth_interval), 0, 1, 1e9, NULL},
    {"loss_scale.hysteresis", K_INT, OFF(scale_hysteresis), 0, 1, 1e6, NULL},
    {"loss_scale.min_scale", K_F32, OFF(scale_min), 0, 1e-30, 3.0e38, NULL},
    {"loss_scale.max_scale", K_F32, OFF(scale_max), 0, 1e-30, 3.0e38, NULL},
    {"loss_scale.floor_patience", K_INT, OFF(scale_floor_patience), 0, 1, 1e9, NULL},
    {"loss_scale.floor", K_STR, OFF(scale_floor), SZ(scale_floor), 0, 0, "error|stop"},
};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

void ct_recipe_default(ct_recipe *r) {
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "mlp");
    r->n_hidden = 2;
    r->hidden[0] = r->hidden[1] = 1024;
    r->n_channels = 2;
    r->channels[0] = 32;
    r->channels[1] = 64;
    snprintf(r->dataset, sizeof r->dataset, "mnist");
    r->epochs = 10;
    r->batch_size = 128;
    ct_optim_opts_default(&r->optim, CT_OPTIM_ADAMW);
    snprintf(r->schedule, sizeof r->schedule, "cosine");
    r->gamma = 0.1f;
    r->t_mult = 1;
    r->power = 1.0f;
    r->pct_start = 0.3f;
    r->div_factor = 25.0f;
    r->final_div_factor = 1e4f;
    snprintf(r->anneal, sizeof r->anneal, "cos");
    r->plateau_patience = 10;
    r->plateau_factor = 0.1f;
    r->plateau_threshold = 1e-4f;
    r->log_every = 100;
    r->accumulate_steps = 1;
    snprintf(r->early_stop_mode, sizeof r->early_stop_mode, "min");
    snprintf(r->recompute_ops, sizeof r->recompute_ops, "none");
    snprintf(r->precision, sizeof r->precision, "fp32");
    snprintf(r->scale_mode, sizeof r->scale_mode, "auto");
    snprintf(r->scale_floor, sizeof r->scale_floor, "error");
    r->scale_growth_factor = 2.0f; /* ct_scaler_opts_default's values */
    r->scale_backoff_factor = 0.5f;
    r->scale_growth_interval = 2000;
    r->scale_hysteresis = 1;
    r->scale_min = 1.0f;
    r->scale_max = 16777216.0f;
    r->scale_floor_patience = 10;
    snprintf(r->tokenizer, sizeof r->tokenizer, "char");
    r->val_fraction = 0.1f;
    r->eval_every = 100;
    r->eval_batches = 20;
    r->keep_last = 3;
    r->prefetch = 4;
    r->prefetch_threads = 1;
}

static const key_def *find_key(const char *key) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(k_keys[i].key, key)) return &k_keys[i];
    return NULL;
}

static ct_status unknown_key(ct_context *ctx, const char *key) {
    char list[1024];
    size_t o = 0;
    for (size_t i = 0; i < N_KEYS && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", k_keys[i].key);
    return ct_set_error(ctx, CT_E_CONFIG, "unknown recipe key '%s'; valid keys: %s (see docs/recipes.md)", key, list);
}

static int in_choices(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *c = choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && !strncmp(c, v, n)) return 1;
        if (!bar) break;
        c = bar + 1;
    }
    return 0;
}

static ct_status set_number(ct_context *ctx, ct_recipe *r, const key_def *k, double v) {
    char *base = (char *)r + k->off;
    if (!isfinite(v) || v < k->lo || v > k->hi)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': value %g is out of range [%g, %g]", k->key, v, k->lo,
                            k->hi);
    if ((k->type == K_INT || k->type == K_I64 || k->type == K_U64) && v != floor(v))
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': value %g must be an integer", k->key, v);
    switch (k->type) {
    case K_INT: *(int *)base = (int)v; break;
    case K_I64: *(int64_t *)base = (int64_t)v; break;
    case K_U64: *(uint64_t *)base = (uint64_t)v; break;
    case K_F32: *(float *)base = (float)v; break;
    case K_BOOL: *(int *)base = v != 0; break;
    default: return CT_E_INTERNAL;
    }
    return CT_OK;
}

static ct_status set_string(ct_context *ctx, ct_recipe *r, const key_def *k, const char *v) {
    if (k->choices && !in_choices(k->choices, v))
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': '%s' is not one of %s", k->key, v, k->choices);
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
    const key_def *k = find_key(key);
    if (!k) return unknown_key(ctx, key);
    if (k->type == K_STR || k->type == K_ENUM_OPT) return set_string(ctx, r, k, value);
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

static ct_status apply_json(ct_context *ctx, const cJSON *obj, const char *prefix, ct_recipe *r) {
    /* optimizer.name first so the kind's defaults do not override later keys */
    for (int pass = 0; pass < 2; pass++) {
        for (const cJSON *it = obj->child; it; it = it->next) {
            char key[128];
            snprintf(key, sizeof key, "%s%s", prefix, it->string ? it->string : "");
            int is_name = !strcmp(key, "optimizer.name");
            if ((pass == 0) != is_name && !cJSON_IsObject(it)) continue;
            if (cJSON_IsObject(it)) {
                if (pass == 1) continue;
                /* sections: {"optimizer": {...}}, {"loss_scale": {...}} */
                if (prefix[0] || (strcmp(it->string, "optimizer") && strcmp(it->string, "loss_scale")))
                    return unknown_key(ctx, key);
                char sub[64];
                snprintf(sub, sizeof sub, "%s.", it->string);
                CT_TRY(apply_json(ctx, it, sub, r));
                continue;
            }
            const key_def *k = find_key(key);
            if (!k) return unknown_key(ctx, key);
            if (k->type == K_STR || k->type == K_ENUM_OPT) {
                if (!cJSON_IsString(it))
                    return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s' must be a string", key);
                CT_TRY(set_string(ctx, r, k, it->valuestring));
            } else if (k->type == K_LIST) {
                double v[CT_RECIPE_MAX_LAYERS + 1];
                int n = 0;
                if (!cJSON_IsArray(it))
                    return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s' must be an array of sizes", key);
                for (const cJSON *e = it->child; e; e = e->next) {
                    if (!cJSON_IsNumber(e))
                        return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s': item %d is not a number", key, n);
                    if (n > CT_RECIPE_MAX_LAYERS) { n++; break; }
                    v[n++] = e->valuedouble;
                }
                CT_TRY(set_list(ctx, r, k, v, n));
            } else if (k->type == K_BOOL) {
                if (!cJSON_IsBool(it)) return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s' must be true or false", key);
                CT_TRY(set_number(ctx, r, k, cJSON_IsTrue(it)));
            } else {
                if (!cJSON_IsNumber(it)) return ct_set_error(ctx, CT_E_CONFIG, "recipe key '%s' must be a number", key);
                CT_TRY(set_number(ctx, r, k, it->valuedouble));
            }
        }
    }
    return CT_OK;
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
    else s = apply_json(ctx, root, "", r);
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
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ct_context_last_error(ctx));
        const char *colon = strstr(msg, ": ");
        ct_set_error(ctx, s, "%s: %s", path, colon ? colon + 2 : msg);
    }
    return s;
}

ct_status ct_recipe_validate(ct_context *ctx, const ct_recipe *r) {
    if (!strcmp(r->model, "mlp") && r->n_hidden < 0) return ct_set_error(ctx, CT_E_CONFIG, "mlp needs 'hidden'");
    if (!strcmp(r->model, "cnn") && r->n_channels < 1)
        return ct_set_error(ctx, CT_E_CONFIG, "cnn needs 'channels', e.g. [32, 64]");
    int lm = !strcmp(r->model, "gpt") || !strcmp(r->model, "bert");
    if (lm && strcmp(r->dataset, "moby-dick") && !r->text_file[0])
        return ct_set_error(ctx, CT_E_CONFIG, "model '%s' trains on text: set dataset 'moby-dick' or 'text_file'",
                            r->model);
    if (!lm && !strcmp(r->dataset, "moby-dick"))
        return ct_set_error(ctx, CT_E_CONFIG, "dataset 'moby-dick' is text: it needs model 'gpt' or 'bert'");
    if (lm && r->preset[0] && strncmp(r->preset, r->model, strlen(r->model)))
        return ct_set_error(ctx, CT_E_CONFIG, "preset '%s' is not a %s preset (gpt-char-small, gpt2-124m | bert-base, "
                            "bert-large)", r->preset, r->model);
    if (r->optim.kind == CT_OPTIM_SGD && r->optim.nesterov && (r->optim.momentum <= 0 || r->optim.dampening != 0))
        return ct_set_error(ctx, CT_E_CONFIG, "optimizer.nesterov needs optimizer.momentum > 0 and dampening 0");
    if (r->scale_min > r->scale_max)
        return ct_set_error(ctx, CT_E_CONFIG, "loss_scale.min_scale %g is larger than loss_scale.max_scale %g",
                            (double)r->scale_min, (double)r->scale_max);
    if (r->min_lr > r->optim.lr)
        return ct_set_error(ctx, CT_E_CONFIG, "min_lr %g is larger than optimizer.lr %g", (double)r->min_lr,
                            (double)r->optim.lr);
    if (!strcmp(r->schedule, "step") && r->step_size < 1)
        return ct_set_error(ctx, CT_E_CONFIG, "schedule 'step' needs 'step_size' >= 1 (steps between decays)");
    if (!strcmp(r->schedule, "multistep") && r->n_milestones < 1)
        return ct_set_error(ctx, CT_E_CONFIG, "schedule 'multistep' needs 'milestones', e.g. [1000, 2000]");
    if (!strcmp(r->schedule, "multistep"))
        for (int i = 1; i < r->n_milestones; i++)
            if (r->milestones[i] <= r->milestones[i - 1])
                return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'milestones' must be increasing (item %d)", i);
    if (!strcmp(r->schedule, "cosine_restarts") && r->t_0 < 1)
        return ct_set_error(ctx, CT_E_CONFIG, "schedule 'cosine_restarts' needs 't_0' >= 1 (steps of the first cycle)");
    if ((!strcmp(r->schedule, "one_cycle") || !strcmp(r->schedule, "plateau")) && r->warmup_steps > 0)
        return ct_set_error(ctx, CT_E_CONFIG, "recipe key 'warmup_steps' must be 0 with schedule '%s'", r->schedule);
    if (!strcmp(r->schedule, "inverse_sqrt") && r->warmup_steps < 1)
        return ct_set_error(ctx, CT_E_CONFIG, "schedule 'inverse_sqrt' needs 'warmup_steps' >= 1");
    return CT_OK;
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
    default: return 0;
    }
}

int ct_recipe_to_json_full(const ct_recipe *r, char *buf, size_t len) {
    /* a default the key's range excludes (sgd's eps 0) is left out: parsing
     * gives it back, as optimizer.name resets the optimizer's defaults */
    ct_recipe baseline;
    ct_recipe_default(&baseline);
    ct_optim_opts_default(&baseline.optim, r->optim.kind);
    cJSON *root = cJSON_CreateObject();
    if (!root) return -1;
    int ok = 1;
    for (size_t i = 0; i < N_KEYS && ok; i++) {
        const key_def *k = &k_keys[i];
        const char *base = (const char *)r + k->off;
        if (k->type == K_INT || k->type == K_I64 || k->type == K_U64 || k->type == K_F32) {
            double v = key_number(r, k);
            if (v == key_number(&baseline, k) && !(v >= k->lo && v <= k->hi)) continue;
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
        case K_ENUM_OPT: item = cJSON_AddStringToObject(obj, name, ct_optim_kind_name(*(const ct_optim_kind *)base)); break;
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
