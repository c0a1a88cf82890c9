/* src/train/fit.c - runs that fit memory by themselves (recipe key fit, with
 * memory_budget). Before the plan is built the trainer asks for the table of
 * candidate configurations (ct_fit_table_build), each with the memory one rank
 * needs (a plan_only compile, the ZeRO arithmetic on top) and an estimated
 * step time (the plan's cost model: FLOPs and bytes), then tries the best one
 * that fits for real (plan, optimizer, one forward + backward under the
 * budget) and takes the next when it runs out of memory (ct_fit_apply).
 *
 *   fit auto:      the global batch (batch_size x accumulate_steps) stays;
 *                  candidates: accumulate_steps (powers of two dividing it),
 *                  recomputation (recompute_blocks for text models,
 *                  recompute_every for the others: 0, 1, 2), zero_stage
 *                  0..CT_FIT_MAX_ZERO_STAGE on more than one rank, and bf16
 *                  for an fp32 recipe with fit_allow_bf16; the fastest whose
 *                  memory is within 90% of the budget.
 *   fit max_batch: the global batch doubled from the recipe's (accumulation
 *                  1) while it fits in 90% of the budget; the largest wins and
 *                  the learning rate follows lr_scaling (ct_train_scaled_lr
 *                  reads the chosen batch); when not even the recipe's batch
 *                  fits without accumulation, as auto.
 *
 * The chosen recipe becomes the run's (R->fitted; fit off in it, so that a
 * checkpoint's recipe resumes the same configuration without searching). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "train_internal.h"

/* The cost model's constants. Only the order of the candidates matters, so they are round numbers of the
 * right size for the CPUs ctrain trains on, not measurements:
 *   FIT_FLOPS   FP32 FLOP/s one rank sustains in its kernels (a few AVX-512 cores at ~30 GFLOP/s each);
 *   FIT_BF16    the speedup of those FLOPs in bf16 (oneDNN's AVX-512 BF16 / AMX matmuls: 2x and more; the
 *               elementwise ops gain little, so 1.5 over the mix); bytes in bf16 are halved by the plan itself;
 *   FIT_MEM_BW  bytes/s the ops and the optimizer's update stream through memory (one socket's DRAM share);
 *   FIT_NET_BW  bytes/s of a collective between ranks: MPI over shared memory on one host reaches a few
 *               GB/s, a 40-100 Gb/s network 5-12; ZeRO 0-2 move 2 (N-1)/N of the gradients (allreduce, or
 *               reduce-scatter + allgather), ZeRO-3 3 (N-1)/N (the parameters gathered in forward and backward);
 *   FIT_MICRO_S seconds a micro-batch costs beyond its FLOPs: reading the batch, the executor's dispatch of
 *               a few hundred nodes, the kernels' start-up (accumulation's overhead per micro-batch). */
#define FIT_FLOPS 1e11
#define FIT_BF16 1.5
#define FIT_MEM_BW 2e10
#define FIT_NET_BW 5e9
#define FIT_MICRO_S 1e-3
#define FIT_HEADROOM 0.9 /* a candidate fits when its memory is at most 90% of memory_budget */
#define FIT_MAX_CANDS 256
#define MIB(x) ((x) / 1048576.0)

/* The process's resident bytes now (/proc/self/status VmRSS; 0 where there is none): the binary, its libraries,
 * the data; with the context's bytes in use, the base every candidate adds its plan to. */
#if defined(__SANITIZE_ADDRESS__)
#define FIT_NO_RSS 1 /* ASan's shadow memory is resident too: the context's bytes alone */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FIT_NO_RSS 1
#endif
#endif
static double resident_bytes(void) {
#ifdef FIT_NO_RSS
    return 0;
#endif
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtod(line + 6, NULL);
    fclose(f);
    return kb * 1024.0;
}

/* The base: the larger of the context's bytes in use and the process's resident bytes (the budget is the
 * process's memory, not only the plan's). */
static double base_bytes(ct_context *ctx) {
    ct_mem_stats ms;
    ct_context_mem_stats(ctx, &ms);
    const double rss = resident_bytes();
    return rss > (double)ms.bytes_in_use ? rss : (double)ms.bytes_in_use;
}

static int is_text(const ct_recipe *r) { return ct_model_family_of(r->model) == CT_MODEL_FAMILY_TEXT; }

/* Builds the task's graph for r and compiles it (plan_only: sizes only). R: the run's tensor group and pipeline
 * stage; NULL for one process (fit's candidates, ctrain eval). */
ct_status ct_task_plan(ct_context *ctx, ct_run *R, ct_task *t, const ct_recipe *r, int plan_only, ct_plan **out) {
    ct_graph *g;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_node loss = CT_NONE, keep[8];
    int n_keep = 0;
    ct_status s = R ? ct_graph_set_tensor_group(g, R->tp) : CT_OK; /* tensor parallel: this rank's part */
    if (s == CT_OK) s = t->build(t, g, r, &loss, &n_keep, keep);
    ct_compile_opts co;
    ct_recipe_compile_opts(r, &co);
    co.plan_only = plan_only;
    ct_stage_opts so; /* pipeline parallel: this rank's pieces of the model */
    if (s == CT_OK && R && R->pipe) s = ct_pp_stage_opts(R, g, &so);
    if (R && R->pipe) co.stage = &so;
    ct_fusion_rules *rules = NULL;
    if (s == CT_OK && r->fusion_rules[0]) s = ct_fusion_rules_load(ctx, r->fusion_rules, &rules);
    co.fusion_rules = rules;
    if (s == CT_OK) s = ct_compile(g, loss, n_keep, keep, &co, out);
    ct_fusion_rules_free(rules);
    ct_graph_free(g);
    return s;
}

/* What one rank's plan for recipe `local` takes (a plan_only compile), and its largest parameter. */
static ct_status compile_stats(ct_context *ctx, ct_task *t, const ct_recipe *local, ct_plan_stats *ps, double *largest) {
    ct_plan *p = NULL;
    CT_TRY(ct_task_plan(ctx, NULL, t, local, 1, &p));
    ct_plan_get_stats(p, ps);
    *largest = 0;
    for (int i = 0; i < ct_plan_num_params(p); i++) {
        ct_tensor v;
        memset(&v, 0, sizeof v);
        if (ct_plan_param_info(p, i, NULL, &v, NULL) == CT_OK && (double)ct_tensor_numel(&v) * 4 > *largest)
            *largest = (double)ct_tensor_numel(&v) * 4;
    }
    ct_plan_free(p);
    return CT_OK;
}

void ct_train_zero_estimate(const ct_recipe *r, const ct_plan_stats *ps, double largest, int world,
                            ct_zero_estimate *out) {
    const int z = world > 1 ? r->zero_stage : 0;
    const double N = world > 1 ? world : 1, par = (double)ps->param_bytes, grad = (double)ps->grad_bytes;
    const double state = par * ct_run_optim_state_per_param(&r->optim);
    const double bucket = fmin((double)r->bucket_size_mb * 1048576.0, grad), unit = fmax(largest, fmin(bucket, par));
    out->params = z >= 3 ? par / N : par;
    out->params_peak = z >= 3 ? fmin(par, par / N + 2.0 * unit) : par;
    out->grads_between = z >= 2 ? grad / N : grad;
    out->grads_peak = z >= 2 ? fmin(grad, grad / N + 2.0 * bucket + (r->accumulate_steps > 1 ? grad / N : 0.0)) : grad;
    out->state = z >= 1 ? state / N : state;
    out->copies = (double)ps->weight_copy_bytes;
}

/* Bytes one rank holds for candidate c on `world` ranks (ct_train_zero_estimate's peaks) and its estimated step
 * time. */
static void cost(ct_fit_cand *c, const ct_plan_stats *ps, double largest, double base, int world) {
    const int z = world > 1 ? c->r.zero_stage : 0;
    const double N = world, par = (double)ps->param_bytes, grad = (double)ps->grad_bytes;
    const double state = par * ct_run_optim_state_per_param(&c->r.optim);
    const double act = (double)ps->activation_bytes + (double)ps->workspace_bytes;
    ct_zero_estimate ze;
    ct_train_zero_estimate(&c->r, ps, largest, world, &ze);
    c->bytes = base + (double)ps->buffer_bytes + act + ze.copies + ze.params_peak + ze.grads_peak + ze.state;
    const double lowp = c->r.precision == CT_PRECISION_FP32 ? 1.0 : FIT_BF16;
    /* backward's FLOPs hold the recomputed forward nodes (the recompute pass puts them into the graph) */
    const double micro = (ps->flops_forward + ps->flops_backward) / (FIT_FLOPS * lowp) + ps->bytes_moved / FIT_MEM_BW +
                         FIT_MICRO_S;
    const double update = (3.0 * par + 2.0 * state) / FIT_MEM_BW / (z >= 1 ? N : 1.0);
    const double comm = world > 1 ? (z >= 3 ? 3.0 : 2.0) * (N - 1) / N * grad / FIT_NET_BW : 0.0;
    c->step_s = c->r.accumulate_steps * micro + update + comm;
    c->fits = c->bytes <= FIT_HEADROOM * (double)c->r.memory_budget;
    c->tried = -1;
}

/* Appends the candidates of recipe v with each zero stage (one compile: the stage does not change the plan). */
static ct_status add(ct_context *ctx, ct_task *t, const ct_recipe *v, int world, double base, ct_fit_table *ft) {
    ct_recipe local = *v;
    local.batch_size = v->batch_size / world;
    ct_plan_stats ps;
    double largest = 0;
    ct_status s = compile_stats(ctx, t, &local, &ps, &largest);
    if (s != CT_OK) return s;
    /* ZeRO takes neither gradient compression nor sync_batchnorm (trainer.c): then the recipe's stage only */
    const int zs = world > 1 && v->grad_compression == CT_GRAD_COMPRESSION_NONE && !v->sync_batchnorm;
    const int z0 = zs ? 0 : v->zero_stage, z1 = zs ? CT_FIT_MAX_ZERO_STAGE : v->zero_stage;
    for (int z = z0; z <= z1 && ft->n < FIT_MAX_CANDS; z++) {
        ct_fit_cand *c = &ft->c[ft->n];
        c->r = *v;
        c->r.zero_stage = z;
        c->order = ft->n;
        cost(c, &ps, largest, base, world);
        ft->n++;
    }
    return CT_OK;
}

/* fit auto: the same global batch G = batch_size x accumulate_steps with accumulation a (the powers of two
 * dividing G up to 1024, and the recipe's own), recomputation 0, 1, 2 (a recomputation the model cannot take is
 * left out) and the precisions allowed. */
static ct_status enum_auto(ct_context *ctx, ct_task *t, const ct_recipe *r, int world, double base, ct_fit_table *ft) {
    const int64_t G = r->batch_size * r->accumulate_steps;
    const int n_prec = r->precision == CT_PRECISION_FP32 && r->fit_allow_bf16 ? 2 : 1;
    int64_t accs[16];
    int n_acc = 0;
    for (int64_t p = 1; p <= G && p <= 1024; p *= 2) {
        if (r->accumulate_steps > p / 2 && r->accumulate_steps < p) accs[n_acc++] = r->accumulate_steps;
        accs[n_acc++] = p;
    }
    for (int i = 0; i < n_acc; i++) {
        if (G % accs[i] || (G / accs[i]) % world) continue;
        for (int rc = 0; rc <= 2; rc++)
            for (int pi = 0; pi < n_prec; pi++) {
                ct_recipe v = *r;
                v.accumulate_steps = (int)accs[i];
                v.batch_size = G / accs[i];
                v.recompute_blocks = is_text(r) ? rc : 0;
                v.recompute_every = is_text(r) ? 0 : rc;
                if (pi) v.precision = CT_PRECISION_BF16;
                ct_status s = add(ctx, t, &v, world, base, ft);
                if (s != CT_OK && rc > 0) ct_context_clear_error(ctx); /* e.g. a graph without blocks */
                else CT_TRY(s);
            }
    }
    return CT_OK;
}

/* fit max_batch: G x 2^k without accumulation while it fits (the first that does not ends the list). */
static ct_status enum_max(ct_context *ctx, ct_task *t, const ct_recipe *r, int world, double base, ct_fit_table *ft) {
    const int64_t G = r->batch_size * r->accumulate_steps;
    for (int k = 0; k <= 12 && G << k <= ((int64_t)1 << 30); k++) {
        ct_recipe v = *r;
        v.batch_size = G << k;
        v.accumulate_steps = 1;
        if (v.batch_size % world) continue;
        CT_TRY(add(ctx, t, &v, world, base, ft));
        if (!ft->c[ft->n - 1].fits) break;
    }
    return CT_OK;
}

static int by_time(const void *a, const void *b) {
    const ct_fit_cand *x = a, *y = b;
    if (x->step_s != y->step_s) return x->step_s < y->step_s ? -1 : 1;
    return x->order - y->order;
}

/* max_batch: the largest global batch first (then faster, then the list's order). */
static int by_batch(const void *a, const void *b) {
    const ct_fit_cand *x = a, *y = b;
    int64_t gx = x->r.batch_size * x->r.accumulate_steps, gy = y->r.batch_size * y->r.accumulate_steps;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (gx != gy) return gx > gy ? -1 : 1;
    return by_time(a, b);
}

ct_status ct_fit_table_build(ct_context *ctx, const ct_recipe *r, ct_task *t, int world, double base,
                             ct_fit_table *ft) {
    memset(ft, 0, sizeof *ft);
    ft->chosen = -1;
    ft->base = base;
    ft->world = world;
    ft->mode = r->fit;
    if (!(ft->c = calloc(FIT_MAX_CANDS, sizeof *ft->c))) return ct_set_error(ctx, CT_E_OOM, "out of memory");
    ct_status s = CT_OK;
    if (r->fit == CT_FIT_MAX_BATCH) {
        s = enum_max(ctx, t, r, world, base, ft);
        if (s == CT_OK && (ft->n == 0 || !ft->c[0].fits)) { /* not even the recipe's batch without accumulation */
            ft->n = 0;
            ft->mode = CT_FIT_AUTO;
        }
    }
    if (s == CT_OK && ft->mode == CT_FIT_AUTO) s = enum_auto(ctx, t, r, world, base, ft);
    if (s == CT_OK && ft->n == 0)
        s = ct_set_error(ctx, CT_E_CONFIG, "fit: no candidate configuration: batch_size %lld x accumulate_steps %d "
                         "does not divide by the %d ranks", (long long)r->batch_size, r->accumulate_steps, world);
    if (s != CT_OK) {
        ct_fit_table_free(ft);
        return ct_wrap_error(ctx, s, "fit: ", NULL);
    }
    qsort(ft->c, (size_t)ft->n, sizeof *ft->c, ft->mode == CT_FIT_MAX_BATCH ? by_batch : by_time);
    return CT_OK;
}

void ct_fit_table_free(ct_fit_table *ft) {
    free(ft->c);
    ft->c = NULL;
    ft->n = 0;
}

/* "recompute_blocks 1" / "recompute_every 2" / "no recompute" */
static const char *rc_name(const ct_recipe *r, char *buf, size_t len) {
    if (r->recompute_blocks > 0) snprintf(buf, len, "recompute_blocks %d", r->recompute_blocks);
    else if (r->recompute_every > 0) snprintf(buf, len, "recompute_every %d", r->recompute_every);
    else snprintf(buf, len, "no recompute");
    return buf;
}

void ct_fit_table_print(const ct_fit_table *ft, const ct_recipe *r, FILE *f) {
    if (!f) return;
    const double budget = (double)r->memory_budget;
    fprintf(f, "fit %s: memory_budget %.1f MiB, a candidate fits in %.0f%% of it (%.1f MiB); the process "
            "holds %.1f MiB now (resident; every candidate adds its plan to it); %d rank%s; %d candidates, %s first (* chosen):\n",
            r->fit == CT_FIT_MAX_BATCH ? "max_batch" : "auto", MIB(budget), 100 * FIT_HEADROOM,
            MIB(FIT_HEADROOM * budget), MIB(ft->base), ft->world, ft->world == 1 ? "" : "s", ft->n,
            ft->mode == CT_FIT_MAX_BATCH ? "the largest batch that fits" : "the fastest");
    fprintf(f, "     %-22s %-19s %-6s %-9s %12s %12s  %s\n", "batch/rank x accum", "recompute", "zero", "precision",
            "memory MiB", "est. ms/step", "");
    for (int i = 0; i < ft->n; i++) {
        const ct_fit_cand *c = &ft->c[i];
        char b[48], rc[32], tr[80] = "";
        snprintf(b, sizeof b, "%lld x %d", (long long)(c->r.batch_size / ft->world), c->r.accumulate_steps);
        if (c->tried >= 0)
            snprintf(tr, sizeof tr, " (tried: %s, %.1f MiB resident)", c->tried ? "fits" : "out of memory", MIB(c->rss));
        fprintf(f, "  %c  %-22s %-19s %-6d %-9s %12.1f %12.1f  %s%s\n", i == ft->chosen ? '*' : ' ', b,
                rc_name(&c->r, rc, sizeof rc), c->r.zero_stage, ct_recipe_enum_name("precision", (int)c->r.precision),
                MIB(c->bytes), 1e3 * c->step_s, c->fits ? "fits" : "too big", tr);
    }
}

/* The "chosen: ..." line: what the run trains with, and why. */
void ct_fit_describe(const ct_fit_table *ft, const ct_recipe *orig, char *buf, size_t len) {
    const ct_fit_cand *c = &ft->c[ft->chosen];
    const int64_t g0 = orig->batch_size * orig->accumulate_steps, g = c->r.batch_size * c->r.accumulate_steps;
    char rc[32];
    snprintf(buf, len, "fit: chose batch_size %lld x accumulate_steps %d (global batch %lld%s), %s, zero_stage %d, "
             "precision %s: %.1f MiB, est. %.1f ms/step; %s\n",
             (long long)c->r.batch_size, c->r.accumulate_steps, (long long)g, g == g0 ? ", as the recipe's" : "",
             rc_name(&c->r, rc, sizeof rc), c->r.zero_stage, ct_recipe_enum_name("precision", (int)c->r.precision),
             MIB(c->bytes), 1e3 * c->step_s,
             ft->mode == CT_FIT_MAX_BATCH ? "the largest global batch that fits (lr by lr_scaling)"
                                          : "the fastest that fits");
}

ct_status ct_train_fit_report(ct_context *ctx, const ct_recipe *r, ct_task *t, int world, FILE *out) {
    if (!ctx || !r || !t || world < 1) return CT_E_INVALID_ARG;
    if (r->fit == CT_FIT_OFF || r->memory_budget <= 0)
        return ct_set_error(ctx, CT_E_CONFIG, "fit report: the recipe needs fit auto or max_batch and memory_budget");
    ct_fit_table ft;
    CT_TRY(ct_fit_table_build(ctx, r, t, world, base_bytes(ctx), &ft));
    for (int i = 0; i < ft.n && ft.chosen < 0; i++)
        if (ft.c[i].fits) ft.chosen = i;
    ct_fit_table_print(&ft, r, out);
    if (ft.chosen >= 0) {
        char line[512];
        ct_fit_describe(&ft, r, line, sizeof line);
        fprintf(out, "%s", line);
    } else fprintf(out, "fit: nothing fits (the run would stop with E60003)\n");
    ct_fit_table_free(&ft);
    return CT_OK;
}

/* One training forward + backward and one eval forward of the task's first
 * batch on plan p, with the running statistics left alone: kernels allocate
 * their layout buffers on first use, which no plan statistic shows. Weights,
 * buffers and the optimizer are untouched; the gradient arena is overwritten
 * (or, accumulating, zeroed by the loop before its first step), and the
 * loop restarts the epoch, so the run is the same as without it. */
ct_status ct_run_first_use(ct_task *t, ct_plan *p) {
    int64_t rows = 0;
    ct_status s = t->start_epoch(t, 0, 0);
    if (s == CT_OK) s = t->next_batch(t, 0, 0, &rows);
    ct_plan_set_update_running_stats(p, 0);
    if (s == CT_OK) s = ct_plan_forward(p, 1);
    if (s == CT_OK) s = ct_plan_backward(p);
    if (s == CT_OK) s = ct_plan_forward(p, 0);
    ct_plan_set_update_running_stats(p, 1);
    return s;
}

/* Candidate c for real on this rank under the budget: the plan, the optimizer state (ZeRO: this rank's share,
 * as ct_zero_optimizer_create keeps it), the kernels' first use. 1 when it all fits in the context's budget and
 * the process's resident bytes then (c->rss: the libraries' and the kernels' memory outside the context too,
 * e.g. oneDNN's code and scratch, the threads' stacks) are within memory_budget. */
static int trial(ct_run *R, ct_fit_cand *c) {
    ct_context *ctx = R->ctx;
    ct_plan *p = NULL;
    ct_optimizer *opt = NULL;
    void *state = NULL;
    ct_status s = ct_task_plan(ctx, NULL, R->task, &R->local, 0, &p);
    if (s == CT_OK && (R->world == 1 || c->r.zero_stage == 0)) s = ct_optimizer_create(p, &c->r.optim, &opt);
    else if (s == CT_OK) {
        ct_plan_stats ps;
        ct_plan_get_stats(p, &ps);
        size_t n = ps.param_bytes * (size_t)ct_run_optim_state_per_param(&c->r.optim) / (size_t)R->world;
        if (n) s = ct_alloc(ctx, n, &state);
    }
    if (s == CT_OK) s = R->task->bind(R->task, p);
    if (s == CT_OK) s = ct_run_first_use(R->task, p);
    c->rss = resident_bytes();
    if (s == CT_OK && c->rss > (double)c->r.memory_budget) s = CT_E_OOM; /* 0: not known */
    ct_free(ctx, state);
    ct_optimizer_free(opt);
    ct_plan_free(p);
    ct_context_clear_error(ctx);
    return s == CT_OK;
}

/* The run's recipe becomes candidate c's (R->fitted): the task again for its batch, this rank's share. */
static ct_status take(ct_run *R, const ct_fit_cand *c) {
    R->fitted = c->r;
    R->fitted.fit = CT_FIT_OFF; /* a checkpoint's recipe resumes this configuration as it is */
    R->r = &R->fitted;
    if (R->task->free) R->task->free(R->task);
    R->task = NULL;
    CT_TRY(is_text(R->r) ? ct_task_text_create(R->ctx, R->r, &R->task) : ct_task_image_create(R->ctx, R->r, &R->task));
    if (!R->task) /* the create functions set it whenever they return CT_OK */
        return ct_set_error(R->ctx, CT_E_INTERNAL, "fit: no task was created for a candidate; please report this");
    return ct_dp_setup(R->ctx, R->comm, R->task, R->r, &R->local);
}

/* The smallest candidate's need, for the error when nothing fits. */
static ct_status nothing_fits(ct_run *R, const ct_fit_table *ft, const ct_recipe *r) {
    int m = 0;
    for (int i = 1; i < ft->n; i++)
        if (ft->c[i].bytes < ft->c[m].bytes) m = i;
    const ct_fit_cand *c = &ft->c[m];
    char rc[32];
    return ct_set_error(R->ctx, CT_E_OOM,
                        "fit %s: no configuration fits in memory_budget %.1f MiB: the smallest of the %d candidates "
                        "(batch_size %lld x accumulate_steps %d, %s, zero_stage %d, precision %s) needs %.1f MiB%s; "
                        "raise memory_budget to at least %.0f MiB or use a smaller model",
                        r->fit == CT_FIT_MAX_BATCH ? "max_batch" : "auto", MIB((double)r->memory_budget), ft->n,
                        (long long)c->r.batch_size, c->r.accumulate_steps, rc_name(&c->r, rc, sizeof rc),
                        c->r.zero_stage, ct_recipe_enum_name("precision", (int)c->r.precision), MIB(c->bytes),
                        c->fits ? " (in the model) but its trial step ran out of memory" : "",
                        ceil(MIB(c->bytes) / FIT_HEADROOM) + 1);
}

ct_status ct_fit_apply(ct_run *R) {
    const ct_recipe *r = R->r;
    if (R->o->task || R->pipe || R->tp || r->deterministic)
        return ct_set_error(R->ctx, CT_E_CONFIG, "recipe key 'fit' works with the built-in tasks without %s; remove "
                            "fit (memory_budget alone checks the plan)",
                            R->o->task ? "a custom task" : r->deterministic ? "deterministic: true"
                                                                            : "tensor or pipeline parallelism");
    ct_fit_table ft;
    CT_TRY(ct_fit_table_build(R->ctx, r, R->task, R->world, base_bytes(R->ctx), &ft));
    ct_status s = CT_OK;
    /* tests (tests/fit_test.sh): CT_FIT_TRIAL_OOM=N makes the first N trials count as out of memory */
    const char *env = getenv("CT_FIT_TRIAL_OOM");
    int forced = env ? atoi(env) : 0;
    for (int i = 0; i < ft.n && ft.chosen < 0 && s == CT_OK; i++) {
        if (!ft.c[i].fits) continue;
        s = take(R, &ft.c[i]);
        double ok = s == CT_OK ? trial(R, &ft.c[i]) : 0;
        if (forced-- > 0) ok = 0;
        if (s == CT_OK && R->world > 1) s = ct_comm_allreduce_f64(R->comm, &ok, 1, CT_REDUCE_MIN); /* every rank's */
        ft.c[i].tried = ok > 0;
        if (s == CT_OK && ok > 0) ft.chosen = i;
    }
    if (R->out && !R->o->quiet) ct_fit_table_print(&ft, r, R->out);
    if (s == CT_OK && ft.chosen < 0) s = nothing_fits(R, &ft, r);
    if (s == CT_OK) {
        char line[512];
        ct_fit_describe(&ft, r, line, sizeof line);
        ct_run_say(R, "%s", line);
    }
    ct_fit_table_free(&ft);
    return s;
}
