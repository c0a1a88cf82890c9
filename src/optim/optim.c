/* src/optim/optim.c - SGD (momentum, dampening, nesterov, weight decay),
 * Adam and AdamW (amsgrad), RMSprop (momentum, centered), Adagrad (lr_decay,
 * initial accumulator) exactly as PyTorch 1.13 defines them, and LAMB as in
 * the LAMB paper / NVIDIA Apex FusedLAMB (Adam moments with bias correction,
 * decoupled weight decay added to the update, per-tensor trust ratio
 * ||w|| / ||u||), over the plan's flat parameter/gradient arenas. State lives
 * in one contiguous arena (layout in include/ctrain/optim.h).
 *
 * Threads: elementwise optimizers split the arena into per-thread chunks of
 * multiples of 64 floats. LAMB walks fixed blocks (LAMB_BLOCK floats, never
 * crossing a tensor boundary) computed at create time; the per-tensor norms
 * are the sums of the blocks' partial sums in block order, so the result does
 * not depend on the thread count. A step allocates nothing.
 *
 * ZeRO (ct_optimizer_set_shard): the state and the update cover the shard
 * [sh_begin, sh_end) only. Elementwise optimizers need nothing else. LAMB's
 * blocks are the whole arena's blocks cut at the shard's ends (the parts
 * inside it); its step sums w^2 and u^2 per tensor over the shard's part (0
 * for tensors outside), hands the 2 x n_tensors sums to the reduce callback
 * (ct_optimizer_set_reduce: the ZeRO trainer's allreduce over the ranks), and
 * applies each tensor's trust ratio from the reduced sums to the shard's
 * part. The optimizer layer calls no communication itself. Without a shard
 * and without a callback the step is exactly the whole-arena LAMB.
 *
 * Parameter groups: every parameter has an lr multiplier and a weight decay
 * (ct_optimizer_set_group, the no_decay_bias_norm switch). The arena is cut
 * into runs of consecutive tensors with equal hyperparameters (tables sized
 * at create time); the fused update runs once per run. Without groups there
 * is one run, the whole arena, exactly as before. LAMB reads its blocks'
 * tensor hyperparameters directly. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ctrain/optim.h"
#include "graph/ir.h"
#include "ctrain/convert.h"
#include "kernels/optim_kernels.h"

#define LAMB_BLOCK 4096

struct ct_optimizer {
    ct_context *ctx;
    ct_plan *plan;
    ct_optim_opts o;
    float *state;
    size_t n, n_state;
    /* ZeRO (ct_optimizer_set_shard): the state covers [sh_begin, sh_end) of the arena only; the whole arena
     * ([0, n)) otherwise. Each state block holds sh_end - sh_begin floats. */
    size_t sh_begin, sh_end;
    uint64_t t;
    /* LAMB: blocks (tensor, begin, length) and their partial sums */
    int n_tensors, n_blocks;
    int *blk_tensor;
    size_t *blk_begin, *blk_len;
    double *blk_sums;  /* 2 per block: sum p^2, sum u^2 */
    float *t_scale;    /* per tensor: lr * trust ratio */
    double *t_sums;    /* per tensor: sum p^2, sum u^2 (over the shard, then reduced) */
    size_t *t_len;     /* per tensor: floats                                          */
    ct_optim_reduce_fn reduce_fn; /* ct_optimizer_set_reduce (NULL: none)             */
    void *reduce_user;
    /* parameter groups: per tensor (arena order) and per run */
    int n_params, n_runs;
    float *grp_lr, *grp_wd;  /* as set by ct_optimizer_set_group            */
    float *eff_wd;           /* grp_wd after the no_decay_bias_norm switch  */
    size_t *t_off;           /* tensor offsets (floats) in the arena        */
    int *t_ndim;
    size_t *run_begin, *run_end;
    float *run_lr, *run_wd;
};

static const char *const k_kind_names[] = {"sgd", "adamw", "adam", "rmsprop", "adagrad", "lamb"};
#define N_KINDS (int)(sizeof k_kind_names / sizeof k_kind_names[0])

const char *ct_optim_kind_name(ct_optim_kind kind) {
    return (int)kind >= 0 && (int)kind < N_KINDS ? k_kind_names[kind] : "invalid";
}

int ct_optim_kind_parse(const char *name, ct_optim_kind *kind) {
    for (int i = 0; name && i < N_KINDS; i++)
        if (!strcmp(name, k_kind_names[i])) {
            *kind = (ct_optim_kind)i;
            return 1;
        }
    return 0;
}

void ct_optim_opts_default(ct_optim_opts *o, ct_optim_kind kind) {
    memset(o, 0, sizeof *o);
    o->kind = kind;
    switch (kind) {
    case CT_OPTIM_ADAMW:
    case CT_OPTIM_ADAM:
    case CT_OPTIM_LAMB:
        o->lr = 1e-3f;
        o->beta1 = 0.9f;
        o->beta2 = 0.999f;
        o->eps = kind == CT_OPTIM_LAMB ? 1e-6f : 1e-8f;
        o->weight_decay = kind == CT_OPTIM_ADAM ? 0.0f : 0.01f;
        break;
    case CT_OPTIM_RMSPROP:
        o->lr = 0.01f;
        o->alpha = 0.99f;
        o->eps = 1e-8f;
        break;
    case CT_OPTIM_ADAGRAD:
        o->lr = 0.01f;
        o->eps = 1e-10f;
        break;
    default:
        o->lr = 0.01f;
    }
}

static const char *kind_name(ct_optim_kind k) {
    static const char *names[] = {"sgd", "adamw", "adam", "rmsprop", "adagrad", "lamb"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "optimizer";
}

static ct_status validate(ct_context *ctx, const ct_optim_opts *o) {
    if ((unsigned)o->kind > (unsigned)CT_OPTIM_LAMB)
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "optimizer: unknown kind %d (sgd, adamw, adam, rmsprop, adagrad or lamb)", (int)o->kind);
    const char *k = kind_name(o->kind);
    if (!(o->lr >= 0.0f) || !isfinite(o->lr))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: lr %g must be a finite value >= 0", k, (double)o->lr);
    if (!(o->weight_decay >= 0.0f) || !isfinite(o->weight_decay))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: weight_decay %g must be a finite value >= 0", k,
                            (double)o->weight_decay);
    switch (o->kind) {
    case CT_OPTIM_SGD:
        if (!(o->momentum >= 0.0f) || !(o->dampening >= 0.0f && o->dampening <= 1.0f))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "sgd: momentum %g must be >= 0 and dampening %g in [0, 1]",
                                (double)o->momentum, (double)o->dampening);
        if (o->nesterov && (o->momentum <= 0.0f || o->dampening != 0.0f))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "sgd: nesterov needs momentum > 0 and dampening 0");
        break;
    case CT_OPTIM_ADAMW:
    case CT_OPTIM_ADAM:
    case CT_OPTIM_LAMB:
        if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f) || !(o->beta2 >= 0.0f && o->beta2 < 1.0f))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: betas (%g, %g) must be in [0, 1)", k, (double)o->beta1,
                                (double)o->beta2);
        break;
    case CT_OPTIM_RMSPROP:
        if (!(o->alpha >= 0.0f && o->alpha < 1.0f))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "rmsprop: alpha %g must be in [0, 1)", (double)o->alpha);
        if (!(o->momentum >= 0.0f) || !isfinite(o->momentum))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "rmsprop: momentum %g must be a finite value >= 0",
                                (double)o->momentum);
        break;
    case CT_OPTIM_ADAGRAD:
        if (!(o->lr_decay >= 0.0f) || !isfinite(o->lr_decay))
            return ct_set_error(ctx, CT_E_INVALID_ARG, "adagrad: lr_decay %g must be a finite value >= 0",
                                (double)o->lr_decay);
        if (!(o->initial_accumulator_value >= 0.0f) || !isfinite(o->initial_accumulator_value))
            return ct_set_error(ctx, CT_E_INVALID_ARG,
                                "adagrad: initial_accumulator_value %g must be a finite value >= 0",
                                (double)o->initial_accumulator_value);
        break;
    }
    if (o->kind != CT_OPTIM_SGD && (!(o->eps > 0.0f) || !isfinite(o->eps)))
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: eps %g must be a finite value > 0", k, (double)o->eps);
    return CT_OK;
}

static size_t state_blocks(const ct_optim_opts *o) {
    switch (o->kind) {
    case CT_OPTIM_SGD: return o->momentum != 0.0f ? 1 : 0;
    case CT_OPTIM_ADAMW:
    case CT_OPTIM_ADAM: return o->amsgrad ? 3 : 2;
    case CT_OPTIM_RMSPROP: return 1 + (o->momentum > 0.0f) + (o->centered != 0);
    case CT_OPTIM_ADAGRAD: return 1;
    case CT_OPTIM_LAMB: return 2;
    }
    return 0;
}

/* LAMB's blocks: each tensor cut into LAMB_BLOCK floats from its start (as
 * the whole arena), then every block cut to the shard [sh_begin, sh_end)
 * (those outside it dropped): never more blocks than the whole arena's, so
 * the tables sized by lamb_setup hold any shard's. */
static void lamb_blocks(ct_optimizer *o) {
    int nb = 0;
    for (int i = 0; i < o->n_tensors; i++) {
        const size_t off = o->t_off[i], len = o->t_len[i];
        for (size_t b = 0; b < len; b += LAMB_BLOCK) {
            const size_t blen = CT_MIN(len - b, (size_t)LAMB_BLOCK);
            const size_t lo = CT_MAX(off + b, o->sh_begin), hi = CT_MIN(off + b + blen, o->sh_end);
            if (lo >= hi) continue;
            o->blk_tensor[nb] = i;
            o->blk_begin[nb] = lo;
            o->blk_len[nb] = hi - lo;
            nb++;
        }
    }
    o->n_blocks = nb;
}

/* The tables of lamb_blocks, sized for the whole arena's blocks (after groups_setup: t_off). */
static ct_status lamb_setup(ct_optimizer *o) {
    int nt = ct_plan_num_params(o->plan), nb = 0;
    size_t kt = (size_t)(nt ? nt : 1);
    CT_TRY(ct_alloc(o->ctx, kt * sizeof(size_t), (void **)&o->t_len));
    for (int i = 0; i < nt; i++) {
        ct_tensor v;
        CT_TRY(ct_plan_param_info(o->plan, i, NULL, &v, NULL));
        o->t_len[i] = (size_t)ct_tensor_numel(&v);
        nb += (int)((o->t_len[i] + LAMB_BLOCK - 1) / LAMB_BLOCK);
    }
    size_t k = (size_t)(nb ? nb : 1);
    CT_TRY(ct_alloc(o->ctx, k * sizeof(int), (void **)&o->blk_tensor));
    CT_TRY(ct_alloc(o->ctx, k * sizeof(size_t), (void **)&o->blk_begin));
    CT_TRY(ct_alloc(o->ctx, k * sizeof(size_t), (void **)&o->blk_len));
    CT_TRY(ct_alloc(o->ctx, 2 * k * sizeof(double), (void **)&o->blk_sums));
    CT_TRY(ct_alloc(o->ctx, kt * sizeof(float), (void **)&o->t_scale));
    CT_TRY(ct_alloc(o->ctx, 2 * kt * sizeof(double), (void **)&o->t_sums));
    o->n_tensors = nt;
    lamb_blocks(o);
    return CT_OK;
}

/* Effective weight decay per tensor and the runs of equal hyperparameters
 * covering [0, n): a run starts at its first tensor's offset (the first at
 * 0) and ends where the next begins (the last at n), padding included. */
static void build_runs(ct_optimizer *o) {
    int np = o->n_params, nr = 0;
    for (int i = 0; i < np; i++)
        o->eff_wd[i] = o->o.no_decay_bias_norm && o->t_ndim[i] == 1 ? 0.0f : o->grp_wd[i];
    for (int i = 0; i < np; i++) {
        if (nr && o->run_lr[nr - 1] == o->grp_lr[i] && o->run_wd[nr - 1] == o->eff_wd[i]) continue;
        o->run_begin[nr] = nr ? o->t_off[i] : 0;
        if (nr) o->run_end[nr - 1] = o->t_off[i];
        o->run_lr[nr] = o->grp_lr[i];
        o->run_wd[nr] = o->eff_wd[i];
        nr++;
    }
    if (!nr) { /* no parameters: one empty run */
        o->run_begin[0] = 0;
        o->run_lr[0] = 1.0f;
        o->run_wd[0] = o->o.weight_decay;
        nr = 1;
    }
    o->run_end[nr - 1] = o->n;
    o->n_runs = nr;
}

static ct_status groups_setup(ct_optimizer *o) {
    int np = ct_plan_num_params(o->plan);
    size_t k = (size_t)np + 1;
    CT_TRY(ct_alloc(o->ctx, k * sizeof(float), (void **)&o->grp_lr));
    CT_TRY(ct_alloc(o->ctx, k * sizeof(float), (void **)&o->grp_wd));
    CT_TRY(ct_alloc(o->ctx, k * sizeof(float), (void **)&o->eff_wd));
    CT_TRY(ct_alloc(o->ctx, k * sizeof(size_t), (void **)&o->t_off));
    CT_TRY(ct_alloc(o->ctx, k * sizeof(int), (void **)&o->t_ndim));
    CT_TRY(ct_alloc(o->ctx, k * sizeof(size_t), (void **)&o->run_begin));
    CT_TRY(ct_alloc(o->ctx, k * sizeof(size_t), (void **)&o->run_end));
    CT_TRY(ct_alloc(o->ctx, k * sizeof(float), (void **)&o->run_lr));
    CT_TRY(ct_alloc(o->ctx, k * sizeof(float), (void **)&o->run_wd));
    float *pa;
    ct_plan_param_arena(o->plan, &pa, NULL, NULL);
    for (int i = 0; i < np; i++) {
        ct_tensor v;
        CT_TRY(ct_plan_param_info(o->plan, i, NULL, &v, NULL));
        o->t_off[i] = (size_t)((float *)v.data - pa);
        o->t_ndim[i] = v.ndim;
        o->grp_lr[i] = 1.0f;
        o->grp_wd[i] = o->o.weight_decay;
    }
    o->n_params = np;
    build_runs(o);
    return CT_OK;
}

ct_status ct_optimizer_set_group(ct_optimizer *o, const char *prefix, float lr_scale, float weight_decay) {
    if (!o || !prefix) return CT_E_INVALID_ARG;
    const char *k = kind_name(o->o.kind);
    if (!(lr_scale >= 0.0f) || !isfinite(lr_scale))
        return ct_set_error(o->ctx, CT_E_INVALID_ARG, "%s: group '%s': lr_scale %g must be a finite value >= 0", k,
                            prefix, (double)lr_scale);
    if (weight_decay != weight_decay || weight_decay == INFINITY)
        return ct_set_error(o->ctx, CT_E_INVALID_ARG,
                            "%s: group '%s': weight_decay %g must be finite (>= 0, or < 0 to keep the current one)", k,
                            prefix, (double)weight_decay);
    size_t pl = strlen(prefix);
    int hits = 0;
    for (int i = 0; i < o->n_params; i++) {
        const char *name = NULL;
        ct_plan_param_info(o->plan, i, &name, NULL, NULL);
        if (!name || strncmp(name, prefix, pl)) continue;
        hits++;
        o->grp_lr[i] = lr_scale;
        if (weight_decay >= 0.0f) o->grp_wd[i] = weight_decay;
    }
    if (!hits)
        return ct_set_error(o->ctx, CT_E_INVALID_ARG, "%s: group '%s': no parameter name starts with '%s'", k, prefix,
                            prefix);
    build_runs(o);
    return CT_OK;
}

ct_status ct_optimizer_param_hp(const ct_optimizer *o, int i, float *lr_scale, float *weight_decay) {
    if (!o || i < 0 || i >= o->n_params) return CT_E_INVALID_ARG;
    if (lr_scale) *lr_scale = o->grp_lr[i];
    if (weight_decay) *weight_decay = o->eff_wd[i];
    return CT_OK;
}

ct_status ct_optimizer_create(ct_plan *plan, const ct_optim_opts *opts, ct_optimizer **out) {
    return ct_optimizer_create_shard(plan, opts, 0, SIZE_MAX, out);
}

ct_status ct_optimizer_create_shard(ct_plan *plan, const ct_optim_opts *opts, size_t begin, size_t end,
                                    ct_optimizer **out) {
    if (!plan || !opts || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    ct_context *ctx = ct_plan_context(plan);
    CT_TRY(validate(ctx, opts));
    ct_optimizer *o = calloc(1, sizeof *o);
    if (!o) return ct_set_error(ctx, CT_E_OOM, "optimizer: out of memory");
    o->ctx = ctx;
    o->plan = plan;
    o->o = *opts;
    ct_plan_param_arena(plan, NULL, NULL, &o->n);
    o->sh_begin = 0;
    o->sh_end = o->n;
    if (end != SIZE_MAX || begin != 0) { /* ZeRO: the state of [begin, end) only */
        const size_t n = o->n;
        if (begin > end || end > n) {
            free(o);
            return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: shard [%zu, %zu) of the %zu-float arena: out of range",
                                kind_name(opts->kind), begin, end, n);
        }
        o->sh_begin = begin;
        o->sh_end = end;
    }
    o->n_state = state_blocks(opts) * (o->sh_end - o->sh_begin);
    ct_status s = ct_alloc(ctx, o->n_state * sizeof(float), (void **)&o->state);
    if (s == CT_OK) s = groups_setup(o);
    if (s == CT_OK && opts->kind == CT_OPTIM_LAMB) s = lamb_setup(o);
    if (s != CT_OK) {
        ct_optimizer_free(o);
        return s;
    }
    memset(o->state, 0, o->n_state * sizeof(float));
    if (opts->kind == CT_OPTIM_ADAGRAD)
        for (size_t i = 0; i < o->sh_end - o->sh_begin; i++) o->state[i] = opts->initial_accumulator_value;
    *out = o;
    return CT_OK;
}

void ct_optimizer_free(ct_optimizer *o) {
    if (!o) return;
    ct_free(o->ctx, o->state);
    ct_free(o->ctx, o->blk_tensor);
    ct_free(o->ctx, o->blk_begin);
    ct_free(o->ctx, o->blk_len);
    ct_free(o->ctx, o->blk_sums);
    ct_free(o->ctx, o->t_scale);
    ct_free(o->ctx, o->t_sums);
    ct_free(o->ctx, o->t_len);
    ct_free(o->ctx, o->grp_lr);
    ct_free(o->ctx, o->grp_wd);
    ct_free(o->ctx, o->eff_wd);
    ct_free(o->ctx, o->t_off);
    ct_free(o->ctx, o->t_ndim);
    ct_free(o->ctx, o->run_begin);
    ct_free(o->ctx, o->run_end);
    ct_free(o->ctx, o->run_lr);
    ct_free(o->ctx, o->run_wd);
    free(o);
}

uint64_t ct_optimizer_steps(const ct_optimizer *o) { return o->t; }

ct_status ct_optimizer_state(ct_optimizer *o, float **state, size_t *n) {
    if (state) *state = o->state;
    if (n) *n = o->n_state;
    return CT_OK;
}

/* ---- the step -------------------------------------------------------------------------- */

#define PICK(name) (isa >= CT_ISA_AVX512 ? ct_##name##_avx512 : isa >= CT_ISA_AVX2 ? ct_##name##_avx2 : ct_##name##_ref)
/* Each thread's chunk [b, e) of the run; with weight copies (wc: the run's
 * BF16/FP16 copy), in blocks of WCAST_BLOCK floats, each cast right after
 * its update while it is in L1/L2 (elementwise updates: the same values). */
#define WCAST_BLOCK 4096
#define FOR_CHUNKS(body)                                                                       \
    _Pragma("omp parallel for num_threads(nth) schedule(static)") for (int t_ = 0; t_ < nth; t_++) { \
        size_t c0_ = (size_t)t_ * chunk, c1_ = CT_MIN(n, c0_ + chunk);                         \
        for (size_t b = c0_; b < c1_; b += blk_) {                                             \
            size_t e = CT_MIN(c1_, b + blk_);                                                  \
            body;                                                                              \
            if (wc) cast_copy(p + b, wc + b, e - b, wdt, isa);                                 \
        }                                                                                      \
    }
#define AT(ptr) ((ptr) ? (ptr) + b : NULL)

/* LAMB over the shard's blocks (the whole arena's without a shard): moments and the blocks' partial sums,
 * the per-tensor sums in block order (reduced over the ranks by the callback), the trust ratios, the update.
 * The state blocks cover the shard: element a of the arena is state[a - sh_begin]. */
static ct_status lamb_step(ct_optimizer *o, float *p, const float *g, float lr, ct_isa isa, int nth) {
    const ct_optim_opts *op = &o->o;
    ct_lamb_hp hp = {op->beta1, op->beta2, op->eps, op->weight_decay,
                     (float)(1.0 - pow((double)op->beta1, (double)o->t)),
                     (float)(1.0 - pow((double)op->beta2, (double)o->t))};
    const size_t sb = o->sh_begin;
    float *m = o->state, *v = o->state + (o->sh_end - sb);
    void (*f1)(const float *, const float *, float *, float *, size_t, const ct_lamb_hp *, double *) = PICK(lamb1);
    void (*f2)(float *, const float *, const float *, size_t, const ct_lamb_hp *, float) = PICK(lamb2);
    int nb = o->n_blocks;
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int k = 0; k < nb; k++) {
        size_t b = o->blk_begin[k];
        ct_lamb_hp th = hp;
        th.weight_decay = o->eff_wd[o->blk_tensor[k]];
        o->blk_sums[2 * k] = o->blk_sums[2 * k + 1] = 0;
        f1(p + b, g + b, m + (b - sb), v + (b - sb), o->blk_len[k], &th, o->blk_sums + 2 * k);
    }
    for (int i = 0; i < 2 * o->n_tensors; i++) o->t_sums[i] = 0; /* tensors outside the shard: 0 */
    for (int k = 0; k < nb;) { /* blocks of one tensor are consecutive */
        int i = o->blk_tensor[k];
        double pp = 0, uu = 0;
        for (; k < nb && o->blk_tensor[k] == i; k++) {
            pp += o->blk_sums[2 * k];
            uu += o->blk_sums[2 * k + 1];
        }
        o->t_sums[2 * i] = pp;
        o->t_sums[2 * i + 1] = uu;
    }
    if (o->reduce_fn) { /* ZeRO: every rank's part of every tensor */
        /* its failure (a rank lost: the comm layer's message stays in the context) ends the step with the
         * moments already updated: the run stops */
        CT_TRY(o->reduce_fn(o->reduce_user, o->t_sums, 2 * (size_t)o->n_tensors));
    }
    for (int i = 0; i < o->n_tensors; i++) {
        double wn = sqrt(o->t_sums[2 * i]), un = sqrt(o->t_sums[2 * i + 1]);
        double trust = wn > 0 && un > 0 ? wn / un : 1.0;
        o->t_scale[i] = (float)((double)(lr * o->grp_lr[i]) * trust);
    }
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int k = 0; k < nb; k++) {
        size_t b = o->blk_begin[k];
        ct_lamb_hp th = hp;
        th.weight_decay = o->eff_wd[o->blk_tensor[k]];
        f2(p + b, m + (b - sb), v + (b - sb), o->blk_len[k], &th, o->t_scale[o->blk_tensor[k]]);
    }
    return CT_OK;
}

static void cast_copy(const float *src, uint16_t *dst, size_t n, ct_dtype dt, ct_isa isa) {
    if (dt == CT_BF16) ct_f32_to_bf16_n(src, dst, n, isa);
    else ct_f32_to_f16_n(src, dst, n, isa);
}

/* The elementwise update of one run [rb, rb + n) with learning rate lr and
 * weight decay wd, split into per-thread chunks of multiples of 64 floats;
 * wa (NULL: none): the plan's weight copies (dtype wdt), written in the same
 * pass. */
static void update_run(ct_optimizer *o, float *pa, const float *ga, size_t rb, size_t n, float lr, float wd, ct_isa isa,
                       int nth, uint16_t *wa, ct_dtype wdt) {
    const ct_optim_opts *op = &o->o;
    size_t na = o->sh_end - o->sh_begin, sb = rb - o->sh_begin; /* state blocks cover the shard */
    float *p = pa + rb;
    const float *g = ga + rb;
    uint16_t *wc = wa ? wa + rb : NULL;
    float *s0 = o->state + sb, *s1 = o->state + na + sb, *s2 = o->state + 2 * na + sb;
    /* chunks are multiples of 64 floats so every thread's slice stays aligned */
    size_t chunk = ct_align_up((n + (size_t)nth - 1) / (size_t)nth, 64), blk_ = wc ? WCAST_BLOCK : CT_MAX(chunk, 1);
    switch (op->kind) {
    case CT_OPTIM_ADAMW:
    case CT_OPTIM_ADAM: {
        double t = (double)o->t;
        double bc1 = 1.0 - pow((double)op->beta1, t), bc2 = 1.0 - pow((double)op->beta2, t);
        int dec = op->kind == CT_OPTIM_ADAMW;
        ct_adam_hp hp = {lr, op->beta1, op->beta2, op->eps, wd, (float)((double)lr / bc1),
                         (float)sqrt(bc2), (float)(1.0 - (double)lr * (double)wd), op->amsgrad != 0,
                         dec};
        void (*fn)(float *, const float *, float *, float *, float *, size_t, const ct_adam_hp *) = PICK(adam);
        float *vm = op->amsgrad ? s2 : NULL;
        FOR_CHUNKS(fn(p + b, g + b, s0 + b, s1 + b, AT(vm), e - b, &hp))
        break;
    }
    case CT_OPTIM_RMSPROP: {
        ct_rmsprop_hp hp = {lr, op->alpha, op->eps, wd, op->momentum, op->centered != 0};
        void (*fn)(float *, const float *, float *, float *, float *, size_t, const ct_rmsprop_hp *) = PICK(rmsprop);
        float *buf = op->momentum > 0.0f ? s1 : NULL;
        float *gavg = op->centered ? (buf ? s2 : s1) : NULL;
        FOR_CHUNKS(fn(p + b, g + b, s0 + b, AT(buf), AT(gavg), e - b, &hp))
        break;
    }
    case CT_OPTIM_ADAGRAD: {
        ct_adagrad_hp hp = {(float)((double)lr / (1.0 + (double)(o->t - 1) * (double)op->lr_decay)), op->eps, wd};
        void (*fn)(float *, const float *, float *, size_t, const ct_adagrad_hp *) = PICK(adagrad);
        FOR_CHUNKS(fn(p + b, g + b, s0 + b, e - b, &hp))
        break;
    }
    case CT_OPTIM_LAMB: break; /* lamb_step */
    default: {
        ct_sgd_hp hp = {lr, op->momentum, op->dampening, wd, op->nesterov, o->t == 1};
        void (*fn)(float *, const float *, float *, size_t, const ct_sgd_hp *) = PICK(sgd);
        float *buf = o->n_state ? s0 : NULL;
        FOR_CHUNKS(fn(p + b, g + b, AT(buf), e - b, &hp))
        break;
    }
    }
}

/* One update with the optimizer's current learning rate (o->o.lr, from
 * opts.lr, changed by ct_optimizer_set_lr; always finite and >= 0). */
static ct_status step(ct_optimizer *o, int use_ref) {
    if (!o) return CT_E_INVALID_ARG;
    const float lr = o->o.lr;
    float *p, *g;
    size_t n;
    ct_plan_param_arena(o->plan, &p, &g, &n);
    ct_isa isa = use_ref ? CT_ISA_REF : ct_context_isa(o->ctx);
    int nth = ct_context_num_threads(o->ctx);
    /* mixed precision: the plan's BF16/FP16 weight copies are written in the
     * update pass when this step updates the whole arena (a ZeRO shard does
     * not: the gathered parameters are cast by the next forward; lamb's
     * two-stage update neither) */
    ct_dtype wdt = CT_F32;
    uint16_t *wa = o->o.kind != CT_OPTIM_LAMB && o->sh_begin == 0 && o->sh_end == n ? ct_plan_weight_copies(o->plan, &wdt)
                                                                                     : NULL;
    if (o->o.kind == CT_OPTIM_LAMB && !o->reduce_fn && (o->sh_begin != 0 || o->sh_end != n))
        return ct_set_error(o->ctx, CT_E_STATE,
                            "lamb: sharded over [%zu, %zu) of the %zu-float arena (ZeRO) without a reduce function: "
                            "its trust ratios need every rank's part of each tensor; call ct_optimizer_set_reduce "
                            "with a sum over the ranks (an allreduce) before stepping",
                            o->sh_begin, o->sh_end, n);
    o->t++;
    if (o->o.kind == CT_OPTIM_LAMB) {
        CT_TRY(lamb_step(o, p, g, lr, isa, nth));
    } else if (o->n_runs == 1) { /* no groups: the whole arena (or the shard), all threads */
        update_run(o, p, g, o->sh_begin, o->sh_end - o->sh_begin, lr * o->run_lr[0], o->run_wd[0], isa, nth, wa, wdt);
    } else {
        for (int r = 0; r < o->n_runs; r++) {
            size_t rb = CT_MAX(o->run_begin[r], o->sh_begin), re = CT_MIN(o->run_end[r], o->sh_end);
            if (rb >= re) continue; /* outside this rank's shard */
            size_t len = re - rb;
            /* small runs use fewer threads (the update is elementwise) */
            size_t want = (len + 16383) / 16384;
            int nt = want < (size_t)nth ? (int)(want ? want : 1) : nth;
            update_run(o, p, g, rb, len, lr * o->run_lr[r], o->run_wd[r], isa, nt, wa, wdt);
        }
    }
    if (wa) ct_plan_weight_copies_written(o->plan); /* runs are contiguous and cover the arena */
    ct_plan_set_step(o->plan, o->t);
    return CT_OK;
}

static ct_status step_flushed(ct_optimizer *o, int ref) {
    if (!o) return CT_E_INVALID_ARG;
    ct_fp_scope fp;
    ct_fp_enter(o->ctx, &fp);
    ct_status s = step(o, ref);
    ct_fp_leave(&fp);
    return s;
}
ct_status ct_optimizer_step(ct_optimizer *o) { return step_flushed(o, 0); }
ct_status ct_optimizer_step_ref(ct_optimizer *o) { return step_flushed(o, 1); }

ct_status ct_optimizer_set_lr(ct_optimizer *o, float lr) {
    if (!o) return CT_E_INVALID_ARG;
    if (!(lr >= 0.0f) || !isfinite(lr))
        return ct_set_error(o->ctx, CT_E_INVALID_ARG, "%s: lr %g must be a finite value >= 0 (the lr is unchanged)",
                            ct_optim_kind_name(o->o.kind), (double)lr);
    o->o.lr = lr;
    return CT_OK;
}

float ct_optimizer_lr(const ct_optimizer *o) { return o ? o->o.lr : 0.0f; }

ct_status ct_optimizer_set_steps(ct_optimizer *o, uint64_t steps) {
    if (!o) return CT_E_INVALID_ARG;
    o->t = steps;
    ct_plan_set_step(o->plan, steps);
    return CT_OK;
}

ct_status ct_optimizer_get_opts(const ct_optimizer *o, ct_optim_opts *out) {
    if (!o || !out) return CT_E_INVALID_ARG;
    *out = o->o;
    return CT_OK;
}

ct_status ct_optimizer_set_shard(ct_optimizer *o, size_t begin, size_t end) {
    if (!o) return CT_E_INVALID_ARG;
    if (begin > end || end > o->n)
        return ct_set_error(o->ctx, CT_E_INVALID_ARG, "%s: shard [%zu, %zu) is not inside the %zu-float arena",
                            ct_optim_kind_name(o->o.kind), begin, end, o->n);
    const size_t nb = state_blocks(&o->o), len = end - begin, old_len = o->sh_end - o->sh_begin;
    float *ns = NULL;
    CT_TRY(ct_alloc(o->ctx, CT_MAX(nb * len, (size_t)1) * sizeof(float), (void **)&ns));
    const float init = o->o.kind == CT_OPTIM_ADAGRAD ? o->o.initial_accumulator_value : 0.0f;
    for (size_t b = 0; b < nb; b++) /* what the old state holds of the new range is kept, the rest starts fresh */
        for (size_t i = 0; i < len; i++) {
            size_t a = begin + i;
            ns[b * len + i] = a >= o->sh_begin && a < o->sh_end ? o->state[b * old_len + (a - o->sh_begin)] : init;
        }
    ct_free(o->ctx, o->state);
    o->state = ns;
    o->sh_begin = begin;
    o->sh_end = end;
    o->n_state = nb * len;
    if (o->o.kind == CT_OPTIM_LAMB) lamb_blocks(o); /* the blocks cut to the new shard */
    return CT_OK;
}

ct_status ct_optimizer_set_reduce(ct_optimizer *o, ct_optim_reduce_fn fn, void *user) {
    if (!o) return CT_E_INVALID_ARG;
    o->reduce_fn = fn;
    o->reduce_user = fn ? user : NULL;
    return CT_OK;
}

void ct_optimizer_shard(const ct_optimizer *o, size_t *begin, size_t *end) {
    if (begin) *begin = o ? o->sh_begin : 0;
    if (end) *end = o ? o->sh_end : 0;
}
