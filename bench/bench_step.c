/* bench/bench_step.c - times one ctrain training step (forward, backward,
 * optimizer update) of a fixed workload through the public API.
 *
 *   bench_step --workload mlp|cnn|gptchar|gpt2|resnet50 [--precision fp32|bf16] [--threads 2]
 *              [--warmup 3] [--steps 10] [--optim adamw|sgd] [--seed 1] [--eval-only] [--quiet]
 *
 * Output (machine-readable, one record per line, key=value fields):
 *   ENV   ...                      context: threads, ISA, oneDNN, optimizer impl
 *   KERNELS ...                    which kernel slot ran each forward node (after warmup)
 *   STEP  i=.. fwd_ms=.. bwd_ms=.. opt_ms=.. step_ms=.. loss=..   (timed steps only)
 *   RESULT workload=.. steps=.. step_ms_median=.. fwd_ms_median=.. ... mfu=.. gflops=..
 *          mfu: --mfu-steps more steps (default 2) with the profiler attached,
 *          judged by the doctor: achieved FLOP/s over the peak of the unit that
 *          ran each op (FP32 FMA, AVX512-BF16 or AMX; ctrain info), -1 unknown
 *          plan_mb=.. (param + grad + buffer + activation + workspace + optimizer state,
 *          from ct_plan_get_stats / ct_optimizer_state) peak_rss_mb=.. (getrusage ru_maxrss)
 * Errors go to stderr and the exit status is non-zero.
 *
 * The optimizer comes from include/ctrain/optim.h. When the library being
 * linked does not provide it yet (bench/Makefile checks with nm and defines
 * CT_BENCH_HAVE_OPTIM), a plain-C update over the flat arenas stands in and
 * ENV says optim_impl=bench_fallback. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ctrain/ctrain.h"
#define BENCH_NAME "bench_step"
#include "bench_util.h"


static double now_ms(void) { return bench_now_ms(); }

static double cpu_ms(void) { /* CPU time of all threads of this process */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Whole-machine CPU accounting from /proc/stat (jiffies): busy = everything
 * but idle and iowait; steal = time the hypervisor gave to other guests.
 * Used to tell how much of the machine other processes took during the
 * timed steps (the machine is shared). Returns 0 when unavailable. */
static int proc_stat(double *busy_s, double *steal_s) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    unsigned long long v[10] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7], &v[8], &v[9]);
    fclose(f);
    if (n < 8) return 0;
    double hz = (double)sysconf(_SC_CLK_TCK);
    *busy_s = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz;
    *steal_s = (double)v[7] / hz;
    return 1;
}

static uint64_t rng_state = 1;
static uint64_t splitmix(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float unif(void) { return (float)((splitmix() >> 40) * (1.0 / 16777216.0)); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(const double *v, int n) {
    if (n <= 0) return NAN;
    double *t = malloc((size_t)n * sizeof *t);
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

/* ---- optimizer: library when available, else a plain-C stand-in ---------------------------- */

typedef struct {
    ct_optim_opts o;
    ct_plan *plan;
#ifdef CT_BENCH_HAVE_OPTIM
    ct_optimizer *opt;
#endif
    float *state; /* fallback: m, v (AdamW) or momentum buffer (SGD) */
    uint64_t t;
} bench_opt;

static const char *opt_impl_name(void) {
#ifdef CT_BENCH_HAVE_OPTIM
    return "ctrain";
#else
    return "bench_fallback";
#endif
}

static void opt_create(ct_context *ctx, ct_plan *p, const ct_optim_opts *o, bench_opt *b) {
    memset(b, 0, sizeof *b);
    b->o = *o;
    b->plan = p;
#ifdef CT_BENCH_HAVE_OPTIM
    DIE_IF(ctx, ct_optimizer_create(p, o, &b->opt));
#else
    (void)ctx;
    size_t n;
    ct_plan_param_arena(p, NULL, NULL, &n);
    b->state = calloc(2 * n, sizeof(float));
    if (!b->state) {
        fprintf(stderr, "bench_step: out of memory\n");
        exit(2);
    }
#endif
}

static void opt_step(ct_context *ctx, bench_opt *b) {
#ifdef CT_BENCH_HAVE_OPTIM
    DIE_IF(ctx, ct_optimizer_step(b->opt)); /* at o.lr */
#else
    (void)ctx;
    float *w, *g;
    size_t n;
    ct_plan_param_arena(b->plan, &w, &g, &n);
    const ct_optim_opts *o = &b->o;
    b->t++;
    if (o->kind == CT_OPTIM_ADAMW) {
        float *m = b->state, *v = b->state + n;
        float bc1 = 1.0f - powf(o->beta1, (float)b->t), bc2 = 1.0f - powf(o->beta2, (float)b->t);
        float step = o->lr / bc1, decay = 1.0f - o->lr * o->weight_decay;
        float rs = 1.0f / sqrtf(bc2);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float gi = g[i];
            m[i] = o->beta1 * m[i] + (1.0f - o->beta1) * gi;
            v[i] = o->beta2 * v[i] + (1.0f - o->beta2) * gi * gi;
            w[i] = w[i] * decay - step * m[i] / (sqrtf(v[i]) * rs + o->eps);
        }
    } else {
        float *mb = b->state;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + o->weight_decay * w[i];
            mb[i] = b->t == 1 ? gi : o->momentum * mb[i] + (1.0f - o->dampening) * gi;
            w[i] -= o->lr * (o->nesterov ? gi + o->momentum * mb[i] : mb[i]);
        }
    }
#endif
}

/* Bytes of optimizer state (moments) the optimizer keeps. */
static size_t opt_state_bytes(bench_opt *b) {
#ifdef CT_BENCH_HAVE_OPTIM
    float *st = NULL;
    size_t n = 0;
    if (ct_optimizer_state(b->opt, &st, &n) != CT_OK) return 0;
    return n * sizeof(float);
#else
    size_t n;
    ct_plan_param_arena(b->plan, NULL, NULL, &n);
    return (b->o.kind == CT_OPTIM_ADAMW ? 2 : 1) * n * sizeof(float);
#endif
}

static double peak_rss_mb(void) { /* Linux: ru_maxrss in KiB */
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return ru.ru_maxrss / 1024.0;
}

static void opt_free(bench_opt *b) {
#ifdef CT_BENCH_HAVE_OPTIM
    ct_optimizer_free(b->opt);
#endif
    free(b->state);
}

/* ---- main ---------------------------------------------------------------------------------- */

static void usage(void) {
    fprintf(stderr,
            "usage: bench_step --workload mlp|cnn|gptchar|gpt2|resnet50 [--precision fp32|bf16|fp16|...] [--threads N] [--warmup N] [--steps N]\n"
            "                  [--optim adamw|sgd] [--seed N] [--budget-s S] [--mfu-steps N] [--fusion-level 0|1|2]\n"
            "                  [--channels-last 0|1] [--dropout P] [--eval-only] [--quiet]\n"
            "  --channels-last: cnn and resnet50 on NHWC activations (1, the recipes' default) or NCHW (0)\n"
            "  --budget-s S: stop after the timed steps took S seconds (at least 3 steps)\n"
            "  --fusion-level N: the plan's fusion level (default 1, as a recipe's; docs/fusion.md)\n"
            "  --dropout P: the gpt and mlp workloads' dropout (default 0; the gpt-char-small recipe trains with 0.2)\n"
            "  --eval-only: time evaluation forwards (training 0) of the training plan, weights fixed: no backward,\n"
            "               no update (bwd_ms and opt_ms 0), no MFU steps; how CT_ONEDNN_PACK_WEIGHTS=1 was measured\n"
            "  mlp: MLP 784-1024-1024-10, batch 256, cross entropy (default optim adamw)\n"
            "  cnn: ct_model_cnn channels [32,64] on 1x28x28, batch 128, 10 classes (default optim sgd)\n"
            "  gptchar: ct_gpt_preset gpt-char-small (6/6/384, vocab 65), batch 8, T 256, dropout 0,\n"
            "           random ids, next-token targets, AdamW lr 1e-3 wd 0.1 (not on 1-D params)\n"
            "  gpt2: ct_gpt_preset gpt2-124m (12/12/768, vocab 50257, wpe 1024), batch 4, T 64, dropout 0,\n"
            "        same loss and optimizer as gptchar\n");
    exit(1);
}

int main(int argc, char **argv) {
    const char *workload = NULL, *optim = NULL, *precision = "fp32";
    int threads = 2, warmup = 3, steps = 10, quiet = 0, mfu_steps = 2, fusion_level = 1; /* the recipes' default */
    int evalonly = 0;
    int channels_last = 1;                                                                /* the recipes' default */
    float dropout = 0.0f; /* the workloads' dropout (bench_util.h) */
    double budget_s = 0; /* > 0: stop timing once this much time went into timed steps (min 3 steps) */
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (!strcmp(a, "--eval-only")) { evalonly = 1; continue; }
        if (!v) usage();
        if (!strcmp(a, "--workload")) workload = v;
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--optim")) optim = v;
        else if (!strcmp(a, "--precision")) precision = v;
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--budget-s")) budget_s = atof(v);
        else if (!strcmp(a, "--mfu-steps")) mfu_steps = atoi(v);
        else if (!strcmp(a, "--fusion-level")) fusion_level = atoi(v);
        else if (!strcmp(a, "--channels-last")) channels_last = atoi(v);
        else if (!strcmp(a, "--dropout")) dropout = (float)atof(v);
        else usage();
        i++;
    }
    if (evalonly) mfu_steps = 0; /* the profiled steps train: their MFU would not be the forwards' */
    if (!workload || steps < 1 || warmup < 0 || threads < 1 || fusion_level < 0 || fusion_level > 2 ||
        (channels_last != 0 && channels_last != 1) || !(dropout >= 0.0f && dropout < 1.0f))
        usage();
    if (!bench_workload_known(workload)) usage();
    const int is_cnn = !strcmp(workload, "cnn"), is_r50 = !strcmp(workload, "resnet50"), is_gpt = !strncmp(workload, "gpt", 3);
    if (!optim) optim = is_cnn || is_r50 ? "sgd" : "adamw";
    rng_state = seed;

    ct_context_opts co;
    ct_context_opts_default(&co);
    co.num_threads = threads;
    co.seed = seed;
    ct_context *ctx = NULL;
    DIE_IF(ctx, ct_context_create(&co, &ctx));

    ct_graph *g;
    DIE_IF(ctx, ct_graph_create(ctx, &g));
    ct_node x, y, logits, loss;
    bench_workload wl;
    bench_workload_graph(ctx, g, workload, channels_last, dropout, &x, &y, &logits, &wl);
    const int64_t batch = wl.batch, n_classes = wl.classes, x_numel = wl.x_numel, seq = wl.seq;
    DIE_IF(ctx, ct_cross_entropy(g, logits, y, 0.0f, -100, &loss));

    ct_plan *p;
    double t0 = now_ms();
    ct_compile_opts copts;
    ct_compile_opts_default(&copts);
    DIE_IF(ctx, ct_precision_parse(ctx, precision, &copts.precision));
    copts.fusion_level = fusion_level;
    DIE_IF(ctx, ct_compile(g, loss, 0, NULL, &copts, &p));
    double compile_ms = now_ms() - t0;

    ct_optim_opts oo;
    if (!strcmp(optim, "adamw")) {
        ct_optim_opts_default(&oo, CT_OPTIM_ADAMW);
        oo.lr = 1e-3f;
        oo.weight_decay = 0.01f;
        if (is_gpt) { /* nanoGPT's configure_optimizers: decay on >= 2-D params only */
            oo.weight_decay = 0.1f;
            oo.no_decay_bias_norm = 1;
        }
    } else if (!strcmp(optim, "sgd")) {
        ct_optim_opts_default(&oo, CT_OPTIM_SGD);
        oo.lr = 1e-3f; /* 1e-2 makes the loss on random data grow fast (both frameworks) */
        oo.momentum = 0.9f;
        oo.weight_decay = 0.0f;
    } else {
        usage();
    }
    bench_opt opt;
    opt_create(ctx, p, &oo, &opt);

    ct_tensor tx, ty;
    DIE_IF(ctx, ct_plan_tensor(p, x, &tx));
    DIE_IF(ctx, ct_plan_tensor(p, y, &ty));
    int32_t *yd = ty.data;
    if (is_gpt) { /* one random sequence of T+1 tokens per row: ids = [0, T), labels = [1, T] */
        int32_t *xi = tx.data;
        for (int64_t b = 0; b < batch; b++) {
            int32_t prev = (int32_t)(splitmix() % (uint64_t)n_classes);
            for (int64_t t = 0; t < seq; t++) {
                int32_t next = (int32_t)(splitmix() % (uint64_t)n_classes);
                xi[b * seq + t] = prev;
                yd[b * seq + t] = next;
                prev = next;
            }
        }
    } else {
        float *xd = tx.data;
        for (int64_t i = 0; i < x_numel; i++) xd[i] = 2.0f * unif() - 1.0f;
        for (int64_t i = 0; i < batch; i++) yd[i] = (int32_t)(splitmix() % (uint64_t)n_classes);
    }

    ct_plan_stats st;
    ct_plan_get_stats(p, &st);
    size_t n_param_floats;
    ct_plan_param_arena(p, NULL, NULL, &n_param_floats);
    size_t state_bytes = opt_state_bytes(&opt);
    size_t plan_bytes = st.param_bytes + st.grad_bytes + st.buffer_bytes + st.activation_bytes + st.workspace_bytes +
                        state_bytes;
    printf("ENV workload=%s precision=%s batch=%lld seq=%lld optim=%s optim_impl=%s threads=%d isa=%s onednn=%d "
           "n_params=%zu n_nodes=%d param_mb=%.1f grad_mb=%.1f buffer_mb=%.1f activation_mb=%.1f workspace_mb=%.1f "
           "optim_state_mb=%.1f plan_mb=%.1f compile_ms=%.1f lowp_native_nodes=%d lowp_copied_nodes=%d\n",
           workload, precision, (long long)batch, (long long)(is_gpt ? seq : 0), optim, opt_impl_name(), ct_context_num_threads(ctx),
           ct_isa_name(ct_context_isa(ctx)), ct_context_use_onednn(ctx), n_param_floats, st.n_nodes,
           st.param_bytes / 1048576.0, st.grad_bytes / 1048576.0, st.buffer_bytes / 1048576.0,
           st.activation_bytes / 1048576.0, st.workspace_bytes / 1048576.0,
           state_bytes / 1048576.0, plan_bytes / 1048576.0, compile_ms, st.n_lowp_native, st.n_lowp_copied);
    if (copts.precision != CT_PRECISION_FP32) { /* how BF16/FP16 matmul/conv run here, and why */
        char how[384];
        int native;
        ct_dtype low = copts.precision == CT_PRECISION_FP16 || copts.precision == CT_PRECISION_FP16_PURE ? CT_F16 : CT_BF16;
        DIE_IF(ctx, ct_context_lowp_native(ctx, low, &native, how, sizeof how));
        printf("LOWP %s matmul/conv: %s\n", ct_dtype_name(low), how);
    }
    fflush(stdout);

    int total = warmup + steps;
    double *tf = calloc((size_t)total, sizeof(double)), *tb = calloc((size_t)total, sizeof(double));
    double *to = calloc((size_t)total, sizeof(double)), *ts = calloc((size_t)total, sizeof(double));
    double *tc = calloc((size_t)total, sizeof(double));
    float loss0 = 0, lossN = 0;
    double timed_ms = 0;
    double busy0 = 0, steal0 = 0, cpu0 = 0, wall0 = 0, busy1 = 0, steal1 = 0;
    int have_stat = 0;
    for (int it = 0; it < total; it++) {
        if (it == warmup) {
            have_stat = proc_stat(&busy0, &steal0);
            cpu0 = cpu_ms();
            wall0 = now_ms();
        }
        double ca = cpu_ms();
        double a = now_ms();
        DIE_IF(ctx, ct_plan_forward(p, !evalonly));
        double b = now_ms();
        if (!evalonly) DIE_IF(ctx, ct_plan_backward(p));
        double c = now_ms();
        if (!evalonly) opt_step(ctx, &opt);
        double d = now_ms();
        tc[it] = cpu_ms() - ca;
        tf[it] = b - a;
        tb[it] = c - b;
        to[it] = d - c;
        ts[it] = d - a;
        float l;
        DIE_IF(ctx, ct_plan_loss(p, &l));
        if (!isfinite(l)) {
            fprintf(stderr, "bench_step: loss is %g at step %d\n", l, it);
            return 3;
        }
        if (it == 0) loss0 = l;
        lossN = l;
        if (it == warmup - 1 || (warmup == 0 && it == 0)) {
            /* kernel choice is final after the first run (fallbacks happen then) */
            char buf[2048];
            int len = 0;
            len += snprintf(buf + len, sizeof buf - (size_t)len, "KERNELS");
            int n_graph = ct_graph_num_nodes(g);
            for (int n = 0; n < n_graph && len < (int)sizeof buf - 64; n++) {
                const char *k = ct_plan_kernel_name(p, n);
                if (!strcmp(k, "none")) continue;
                /* with BF16: "onednn-bf16" (reads BF16 itself) or "convert+onednn-f32" (FP32 copies) */
                char desc[48];
                snprintf(desc, sizeof desc, "%s", ct_plan_kernel_desc(p, n));
                for (char *q = desc; *q; q++) *q = *q == ' ' ? '-' : *q;
                /* oneDNN nodes: the implementation oneDNN runs (brg:avx512_core_amx = AMX tiles) */
                const char *impl = ct_plan_kernel_impl(p, n);
                len += snprintf(buf + len, sizeof buf - (size_t)len, " %s:%s=%s%s%s", ct_node_name(g, n),
                                ct_node_op_name(g, n), desc, strcmp(impl, k) ? "@" : "", strcmp(impl, k) ? impl : "");
            }
            ct_plan_stats now;
            ct_plan_get_stats(p, &now); /* after the first run: fallbacks counted */
            const int *cnt = now.n_backward_by_kernel;
            snprintf(buf + len, sizeof buf - (size_t)len,
                     " | backward_nodes ref=%d avx2=%d avx512=%d onednn=%d | low-precision I/O: native=%d copied=%d",
                     cnt[0], cnt[1], cnt[2], cnt[3], now.n_lowp_native, now.n_lowp_copied);
            printf("%s\n", buf);
        }
        if (it >= warmup && !quiet)
            printf("STEP i=%d fwd_ms=%.3f bwd_ms=%.3f opt_ms=%.3f step_ms=%.3f cpu_ms=%.3f loss=%.5f\n", it - warmup,
                   tf[it], tb[it], to[it], ts[it], tc[it], l);
        fflush(stdout);
        if (it >= warmup) timed_ms += ts[it];
        if (budget_s > 0 && it - warmup + 1 >= 3 && timed_ms > budget_s * 1e3) {
            steps = it - warmup + 1;
            total = it + 1;
            break;
        }
    }
    double others = -1, steal = -1;
    if (have_stat && proc_stat(&busy1, &steal1)) {
        double wall = (now_ms() - wall0) * 1e-3, own = (cpu_ms() - cpu0) * 1e-3;
        others = ((busy1 - busy0) - own) / wall;
        steal = (steal1 - steal0) / wall;
        if (others < 0) others = 0;
    }
    /* MFU: a few more steps with the profiler (not timed above: its per-node
     * events cost a little), judged by the doctor against the units' peaks */
    double mfu = -1, gflops = -1;
    if (mfu_steps > 0) {
        ct_profiler_opts po;
        ct_profiler_opts_default(&po);
        po.skip_steps = 0, po.warmup_steps = 0, po.record_steps = mfu_steps;
        ct_profiler *prof;
        DIE_IF(ctx, ct_profiler_create(ctx, &po, &prof));
        DIE_IF(ctx, ct_plan_set_profiler(p, prof));
        for (int i = 0; i < mfu_steps; i++) {
            DIE_IF(ctx, ct_plan_forward(p, 1));
            DIE_IF(ctx, ct_plan_backward(p));
            opt_step(ctx, &opt);
            ct_profiler_step(prof);
        }
        DIE_IF(ctx, ct_plan_set_profiler(p, NULL));
        char path[] = "/tmp/bench_step_mfu_XXXXXX";
        int fd = mkstemp(path);
        if (fd >= 0) {
            close(fd);
            ct_doctor_report dr;
            if (ct_profiler_write(prof, path) == CT_OK && ct_doctor_analyze_file(ctx, path, &dr) == CT_OK) {
                mfu = dr.utilization;
                gflops = dr.achieved_flops * 1e-9;
            }
            if (!getenv("BENCH_MFU_TRACE") || rename(path, getenv("BENCH_MFU_TRACE"))) unlink(path);
        }
        ct_profiler_free(prof);
    }
    double tmin = ts[warmup];
    for (int i = warmup; i < total; i++) tmin = ts[i] < tmin ? ts[i] : tmin;
    printf("RESULT workload=%s framework=ctrain steps=%d step_ms_median=%.3f fwd_ms_median=%.3f "
           "bwd_ms_median=%.3f opt_ms_median=%.3f step_ms_min=%.3f cpu_ms_median=%.3f loss_first=%.5f loss_last=%.5f "
           "steps_total=%d others_cores=%.2f steal_cores=%.2f n_params=%zu plan_mb=%.1f peak_rss_mb=%.1f mfu=%.4f "
           "gflops=%.1f fusion_level=%d dropout=%g\n",
           workload, steps, median(ts + warmup, steps), median(tf + warmup, steps), median(tb + warmup, steps),
           median(to + warmup, steps), tmin, median(tc + warmup, steps), loss0, lossN, total, others, steal,
           n_param_floats, plan_bytes / 1048576.0, peak_rss_mb(), mfu, gflops, fusion_level, (double)dropout);
    free(tf);
    free(tb);
    free(to);
    free(ts);
    free(tc);
    opt_free(&opt);
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
    return 0;
}
