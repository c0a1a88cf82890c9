/* src/prof/profiler.c - the step profiler: a preallocated buffer of Chrome
 * trace "X" events (ops from the executor, caller events), a skip / warmup /
 * record schedule, per-step metrics (FLOPs, FLOP/s, MFU, data and comm
 * shares, memory) and an atomic JSON writer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/internal.h"
#include "prof_internal.h"

typedef struct {
    double ts, dur;
    int32_t node; /* >= 0: an op event of that node */
    const char *kernel; /* op events: the kernel that ran (a static string) */
    int32_t step;
    char name[48];
    char cat[16];
    char args[128];
} prof_event;

/* The unit whose peak bounds a node's work (from its implementation, see
 * unit_of): AMX tiles, AVX512-BF16 dot products, FP32 FMAs (the rest). */
enum { UNIT_FP32 = 0, UNIT_AVX512_BF16, UNIT_AMX_BF16, UNIT_COUNT };
static const char *const k_unit_names[UNIT_COUNT] = {"fp32_fma", "avx512_bf16", "amx_bf16"};

typedef struct {
    char name[64];
    char impl[48];          /* ct_node_event.impl of the first run */
    int unit;               /* UNIT_* */
    const char *op, *dtype; /* static strings */
    char shape[64];
    double flops, bytes;
    int backward;
    int have;               /* filled from the node's first END event */
} node_info;

struct ct_profiler {
    ct_context *ctx;
    ct_profiler_opts o;
    prof_event *ev;
    size_t n_ev;
    uint64_t dropped;
    int64_t step;      /* index of the current step                     */
    double step_t0;    /* when the current step began                   */
    int ops_on;
    double op_t0;      /* BEGIN time of the running node, -1: not recorded */
    node_info *nodes;
    int n_nodes;
    double peak;                  /* FP32 FMA peak (the MFU of FP32 work)          */
    double unit_peak[UNIT_COUNT]; /* per unit; [UNIT_FP32] == peak                 */
    char peak_src[320];
    double clock_mhz;             /* the core clock the peaks use                  */
    const char *clock_src;        /* where it came from                            */
    double bf16_dot_per_cycle;    /* AVX512-BF16 flops per cycle and core          */
    int have_mem;
    ct_plan_stats mem;
    size_t opt_bytes, budget;
};

double ct_profiler_now_us(void) { return 1e-3 * (double)ct_now_ns(); }

void ct_profiler_opts_default(ct_profiler_opts *o) {
    memset(o, 0, sizeof *o);
    o->skip_steps = 1;
    o->warmup_steps = 2;
    o->record_steps = 5;
    o->max_events = 65536;
}

/* Highest "cpu MHz" in /proc/cpuinfo (the current clock the kernel reports), 0 if none. */
static double cpuinfo_mhz(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[256];
    double best = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "cpu MHz", 7)) continue;
        const char *c = strchr(line, ':');
        double v = c ? atof(c + 1) : 0;
        if (v > best) best = v;
    }
    fclose(f);
    return best;
}

/* The core clock measured: a chain of dependent 64-bit multiplies retires
 * one imul every 3 cycles on every x86-64 core of the last 15 years (Intel
 * since Nehalem, AMD since Zen), so 3 x imuls / seconds is the clock the core
 * runs at now, turbo included (a VM's /proc/cpuinfo reports the base clock:
 * the MFUs from it can pass 100%). Not adds: Golden Cove and later fold a
 * dependent add-immediate chain at rename (measured 6.7-12 "GHz" on an
 * Emerald Rapids). Best of 5 runs of 2M imuls (~2 ms each); a result above
 * 7 GHz is no real clock and is dropped; 0 off x86-64. */
static double measured_mhz(void) {
#if defined(__x86_64__)
    double best = 0;
    for (int r = 0; r < 5; r++) {
        uint64_t x = 3, n = 1 << 18; /* 8 imuls per iteration */
        double t0 = ct_profiler_now_us();
        __asm__ volatile("1:\n\t"
                         "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
                         "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
                         "dec %1\n\tjnz 1b"
                         : "+r"(x), "+r"(n)
                         :
                         : "cc");
        double us = ct_profiler_now_us() - t0;
        double mhz = us > 0 ? 3.0 * 8.0 * (1 << 18) / us : 0;
        if (mhz > best) best = mhz;
    }
    return best <= 7000 ? best : 0;
#else
    return 0;
#endif
}

static void compute_peak(ct_profiler *p) {
    ct_isa isa = ct_context_isa(p->ctx);
    int threads = ct_context_num_threads(p->ctx);
    int lanes = isa == CT_ISA_AVX512 ? 16 : isa == CT_ISA_AVX2 ? 8 : 1;
    const char *isa_txt = isa == CT_ISA_AVX512 ? "AVX-512 FMA" : isa == CT_ISA_AVX2 ? "AVX2+FMA" : "scalar (ref)";
    double mhz = cpuinfo_mhz(), meas = measured_mhz();
    const char *clk = "/proc/cpuinfo 'cpu MHz' (max over CPUs)";
    if (meas > mhz) { /* the higher clock: MFUs are never overstated by a base clock */
        mhz = meas;
        clk = "a timed chain of dependent multiplies (3 cycles each)";
    }
    if (mhz <= 0) {
        mhz = 2000;
        clk = "an assumed 2000 MHz (/proc/cpuinfo has no 'cpu MHz')";
    }
    p->clock_mhz = mhz;
    p->clock_src = clk;
    /* BF16 units: AVX512-BF16 vdpbf16ps, the AVX-512 FMA's 64 flops per cycle scaled by the measured
     * dot-product / FMA FLOP rate (~2 on AMD Zen 4 / 5: 128; ~0.5 on Intel Sapphire / Emerald Rapids: 32;
     * 128 nominal without AVX512-BF16), AMX TMUL (1024 BF16 flops per cycle per core, Sapphire Rapids) */
    double dot = ct_cpu_bf16_dot_ratio();
    p->bf16_dot_per_cycle = dot > 0 ? 64.0 * dot : 128.0;
    p->unit_peak[UNIT_AVX512_BF16] = p->bf16_dot_per_cycle * mhz * 1e6 * threads;
    p->unit_peak[UNIT_AMX_BF16] = 1024.0 * mhz * 1e6 * threads;
    if (p->o.peak_flops > 0) {
        p->peak = p->unit_peak[UNIT_FP32] = p->o.peak_flops;
        snprintf(p->peak_src, sizeof p->peak_src, "given by the caller (ct_profiler_opts.peak_flops)");
        return;
    }
    p->peak = p->unit_peak[UNIT_FP32] = 2.0 * lanes * 2.0 * mhz * 1e6 * threads;
    snprintf(p->peak_src, sizeof p->peak_src,
             "%s: 2 FMA units x %d fp32 lanes x 2 flops x %.0f MHz from %s x %d threads (cores used)", isa_txt,
             lanes, mhz, clk, threads);
}

ct_status ct_profiler_create(ct_context *ctx, const ct_profiler_opts *opts, ct_profiler **out) {
    if (!ctx || !out) return CT_E_INVALID_ARG;
    *out = NULL;
    ct_profiler_opts o;
    if (opts) o = *opts;
    else ct_profiler_opts_default(&o);
    if (o.skip_steps < 0 || o.warmup_steps < 0 || o.record_steps < 0 || o.max_events < 1 ||
        o.max_events > ((size_t)1 << 26))
        return ct_set_error(ctx, CT_E_INVALID_ARG,
                            "profiler: skip %d, warmup %d, record %d must be >= 0 and max_events %zu in 1..2^26",
                            o.skip_steps, o.warmup_steps, o.record_steps, o.max_events);
    ct_profiler *p = calloc(1, sizeof *p);
    if (!p) return ct_set_error(ctx, CT_E_OOM, "profiler: out of memory");
    p->ev = malloc(o.max_events * sizeof *p->ev);
    if (!p->ev) {
        free(p);
        return ct_set_error(ctx, CT_E_OOM, "profiler: cannot allocate %zu events (%zu bytes); lower max_events",
                            o.max_events, o.max_events * sizeof(prof_event));
    }
    /* touch every page now: recording then never page-faults (measured: ~5x cheaper events) */
    memset(p->ev, 0, o.max_events * sizeof *p->ev);
    p->ctx = ctx;
    p->o = o;
    p->ops_on = 1;
    p->step_t0 = ct_profiler_now_us();
    compute_peak(p);
    *out = p;
    return CT_OK;
}

void ct_profiler_free(ct_profiler *p) {
    if (!p) return;
    free(p->nodes);
    free(p->ev);
    free(p);
}

/* ---- the plan's node events ------------------------------------------------------------------ */

/* oneDNN names the ISA of its implementation: "brg:avx512_core_amx",
 * "jit:avx512_core_amx" (AMX), "brg:avx512_core_bf16" (AVX512-BF16); the
 * emulated BF16 of plain AVX-512 ("jit_bf16:avx512_core", "gemm:jit") and
 * every SIMD / reference kernel compute with FP32 FMAs. */
int ct_prof_unit_of(const char *impl) {
    if (!impl) return UNIT_FP32;
    if (strstr(impl, "amx")) return UNIT_AMX_BF16;
    if (strstr(impl, "avx512_core_bf16")) return UNIT_AVX512_BF16;
    return UNIT_FP32;
}

/* The node hook (ct_plan_set_node_hook): BEGIN takes the time when ops are
 * recorded, END caches the node's description once and records the event. */
static void on_node(void *user, const ct_node_event *ev) {
    ct_profiler *p = user;
    if (ev->kind == CT_NODE_BEGIN) {
        p->op_t0 = ct_prof_ops_active(p) ? ct_profiler_now_us() : -1.0;
        return;
    }
    double t0 = p->op_t0;
    p->op_t0 = -1.0;
    if (ev->node < 0 || ev->node >= p->n_nodes) return;
    if (t0 >= 0.0 && ev->status == CT_OK) ct_prof_op(p, ev->node, ev->kernel, t0);
    node_info *n = &p->nodes[ev->node];
    if (n->have) return;
    snprintf(n->name, sizeof n->name, "%s", ev->name);
    snprintf(n->impl, sizeof n->impl, "%s", ev->impl ? ev->impl : "none");
    n->unit = ct_prof_unit_of(ev->impl);
    n->op = ev->op;
    n->dtype = ct_dtype_name(ev->dtype);
    ct_shape_str(ev->ndim, ev->shape, n->shape, sizeof n->shape);
    n->flops = ev->flops;
    n->bytes = ev->bytes;
    n->backward = ev->backward;
    n->have = 1;
}

ct_status ct_plan_set_profiler(ct_plan *plan, ct_profiler *p) {
    if (!plan) return CT_E_INVALID_ARG;
    ct_plan_set_node_hook(plan, NULL, NULL);
    if (!p) return CT_OK;
    ct_plan_stats st;
    ct_plan_get_stats(plan, &st);
    node_info *ni = calloc(st.n_nodes > 0 ? (size_t)st.n_nodes : 1, sizeof *ni);
    if (!ni) return ct_set_error(p->ctx, CT_E_OOM, "profiler: out of memory caching %d nodes", st.n_nodes);
    free(p->nodes);
    p->nodes = ni;
    p->n_nodes = st.n_nodes;
    p->op_t0 = -1.0;
    ct_plan_set_node_hook(plan, on_node, p);
    return CT_OK;
}

/* ---- recording ---------------------------------------------------------------------------------- */

int ct_profiler_recording(const ct_profiler *p) {
    if (!p) return 0;
    int64_t start = (int64_t)p->o.skip_steps + p->o.warmup_steps;
    return p->step >= start && (p->o.record_steps == 0 || p->step < start + p->o.record_steps);
}

int ct_prof_ops_active(const ct_profiler *p) { return p->ops_on && ct_profiler_recording(p); }

static prof_event *push(ct_profiler *p) {
    if (p->n_ev >= p->o.max_events) {
        p->dropped++;
        return NULL;
    }
    prof_event *e = &p->ev[p->n_ev++];
    e->node = -1;
    e->kernel = NULL;
    e->step = (int32_t)p->step; /* op events touch only the first cache line; callers fill the strings */
    return e;
}

void ct_prof_op(ct_profiler *p, int node, const char *kernel, double t0_us) {
    double t1 = ct_profiler_now_us();
    if (node < 0 || node >= p->n_nodes) return;
    prof_event *e = push(p);
    if (!e) return;
    e->ts = t0_us;
    e->dur = t1 - t0_us;
    e->node = node;
    e->kernel = kernel;
}

void ct_profiler_event(ct_profiler *p, const char *name, const char *cat, double t0_us, double t1_us,
                       const char *args_json) {
    if (!p || !ct_profiler_recording(p)) return;
    prof_event *e = push(p);
    if (!e) return;
    e->ts = t0_us;
    e->dur = t1_us > t0_us ? t1_us - t0_us : 0;
    snprintf(e->name, sizeof e->name, "%s", name ? name : "event");
    snprintf(e->cat, sizeof e->cat, "%s", cat ? cat : "user");
    if (args_json && strlen(args_json) < sizeof e->args) snprintf(e->args, sizeof e->args, "%s", args_json);
    else e->args[0] = 0;
}

void ct_profiler_step(ct_profiler *p) {
    if (!p) return;
    double now = ct_profiler_now_us();
    if (ct_profiler_recording(p)) {
        prof_event *e = push(p);
        if (e) {
            e->ts = p->step_t0;
            e->dur = now - p->step_t0;
            snprintf(e->name, sizeof e->name, "step %lld", (long long)p->step);
            snprintf(e->cat, sizeof e->cat, "step");
            snprintf(e->args, sizeof e->args, "{\"step\": %lld}", (long long)p->step);
        }
    }
    p->step++;
    p->step_t0 = now;
}

void ct_profiler_set_ops_enabled(ct_profiler *p, int on) {
    if (!p) return;
    if (on && !p->ops_on) p->step_t0 = ct_profiler_now_us(); /* paused time is not step time */
    p->ops_on = on != 0;
}

void ct_profiler_set_memory(ct_profiler *p, const ct_plan_stats *st, size_t opt_bytes, size_t budget) {
    if (!p || !st) return;
    p->have_mem = 1;
    p->mem = *st;
    p->opt_bytes = opt_bytes;
    p->budget = budget;
}

size_t ct_profiler_num_events(const ct_profiler *p) { return p ? p->n_ev : 0; }
uint64_t ct_profiler_dropped(const ct_profiler *p) { return p ? p->dropped : 0; }

double ct_profiler_peak_flops(const ct_profiler *p, const char **source) {
    if (source) *source = p ? p->peak_src : "";
    return p ? p->peak : 0;
}

/* ---- writer ----------------------------------------------------------------------------------- */

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

typedef struct {
    double t0, dur, flops, data, comm;
    double unit_us[UNIT_COUNT], unit_flops[UNIT_COUNT]; /* op time and FLOPs per unit */
    int64_t step;
    int have;
} step_acc;

/* What the units could have done in a step of dur us: the FP32 peak for the
 * whole step, raised to a BF16 unit's peak for the time its ops ran. */
static double step_capacity(const ct_profiler *p, const step_acc *s) {
    double cap = s->dur * 1e-6 * p->unit_peak[UNIT_FP32];
    for (int u = 1; u < UNIT_COUNT; u++) cap += s->unit_us[u] * 1e-6 * (p->unit_peak[u] - p->unit_peak[UNIT_FP32]);
    return cap;
}

/* An event's track (Chrome trace tid): ops and caller events on the training track (1), unless their
 * category has a track of its own. */
static int track_of(const prof_event *e) {
    if (e->node >= 0) return 1;
    static const char *const cats[4] = {"comm", "comm_bucket", "pipeline", "pipeline_comm"};
    for (int t = 0; t < 4; t++)
        if (!strcmp(e->cat, cats[t])) return t + 2;
    return 1;
}

static void write_events(ct_profiler *p, FILE *f, double base, int pid) {
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 1, \"args\": {\"name\": \"ctrain\"}}",
            pid);
    /* the tracks: the training thread, its waits for communication, the gradient buckets' allreduces, the
     * pipeline's micro-batches (and its schedule) and its sends and receives */
    static const char *const tracks[5] = {"training", "communication (blocking)", "gradient buckets (allreduce)",
                                          "pipeline micro-batches", "pipeline sends and receives"};
    for (int t = 0; t < 5; t++)
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                pid, t + 1, tracks[t]);
    for (size_t i = 0; i < p->n_ev; i++) {
        const prof_event *e = &p->ev[i];
        fprintf(f, ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, ", pid,
                track_of(e), e->ts - base, e->dur);
        if (e->node >= 0) {
            const node_info *n = &p->nodes[e->node];
            fprintf(f, "\"name\": ");
            json_str(f, n->op);
            fprintf(f, ", \"cat\": \"op\", \"args\": {\"op\": ");
            json_str(f, n->op);
            fprintf(f, ", \"node\": ");
            json_str(f, n->name);
            fprintf(f,
                    ", \"phase\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"flops\": %.0f, \"bytes\": %.0f, "
                    "\"kernel\": \"%s\", \"impl\": ",
                    n->backward ? "backward" : "forward", n->dtype, n->shape, n->flops, n->bytes,
                    e->kernel ? e->kernel : "none");
            json_str(f, n->impl);
            fprintf(f, ", \"unit\": \"%s\", \"step\": %d}}", k_unit_names[n->unit], e->step);
        } else {
            fprintf(f, "\"name\": ");
            json_str(f, e->name);
            fprintf(f, ", \"cat\": ");
            json_str(f, e->cat);
            fprintf(f, ", \"args\": ");
            cJSON *a = e->args[0] ? cJSON_Parse(e->args) : NULL;
            if (a && cJSON_IsObject(a)) fputs(e->args, f);
            else fprintf(f, "{}");
            cJSON_Delete(a);
            fputc('}', f);
        }
    }
}

static void write_metadata(ct_profiler *p, FILE *f) {
    /* per recorded step: its time and what ran inside it */
    int64_t first = (int64_t)p->o.skip_steps + p->o.warmup_steps;
    int64_t nsteps = p->step - first;
    if (nsteps < 0) nsteps = 0;
    if (p->o.record_steps > 0 && nsteps > p->o.record_steps) nsteps = p->o.record_steps;
    step_acc *sa = calloc((size_t)nsteps + 1, sizeof *sa);
    double tot_t = 0, tot_f = 0, tot_d = 0, tot_c = 0, tot_cap = 0, unit_us[UNIT_COUNT] = {0},
           unit_f[UNIT_COUNT] = {0};
    int n_have = 0;
    if (sa) {
        for (size_t i = 0; i < p->n_ev; i++) {
            const prof_event *e = &p->ev[i];
            int64_t k = e->step - first;
            if (k < 0 || k >= nsteps) continue;
            step_acc *s = &sa[k];
            if (e->node >= 0) {
                const node_info *n = &p->nodes[e->node];
                s->flops += n->flops;
                s->unit_us[n->unit] += e->dur;
                s->unit_flops[n->unit] += n->flops;
            }
            else if (!strcmp(e->cat, "step")) s->dur = e->dur, s->have = 1;
            else if (!strcmp(e->cat, "data")) s->data += e->dur;
            else if (!strcmp(e->cat, "comm")) s->comm += e->dur;
        }
    }
    fprintf(f, "\"metadata\": {\n  \"generator\": \"ctrain profiler\",\n");
    fprintf(f, "  \"schedule\": {\"skip_steps\": %d, \"warmup_steps\": %d, \"record_steps\": %d},\n",
            p->o.skip_steps, p->o.warmup_steps, p->o.record_steps);
    fprintf(f, "  \"events\": %zu, \"max_events\": %zu, \"dropped_events\": %llu,\n", p->n_ev, p->o.max_events,
            (unsigned long long)p->dropped);
    if (p->dropped)
        fprintf(f, "  \"dropped_note\": \"the event buffer was full: %llu events were not recorded; raise "
                   "max_events or record fewer steps\",\n", (unsigned long long)p->dropped);
    fprintf(f, "  \"isa\": \"%s\", \"onednn\": %s, \"threads\": %d,\n", ct_isa_name(ct_context_isa(p->ctx)),
            ct_context_use_onednn(p->ctx) ? "true" : "false", ct_context_num_threads(p->ctx));
    fprintf(f, "  \"peak_flops\": %.6g,\n  \"peak_source\": ", p->peak);
    json_str(f, p->peak_src);
    fprintf(f, ",\n  \"clock_mhz\": %.10g, \"clock_source\": ", p->clock_mhz);
    json_str(f, p->clock_src);
    fprintf(f, ",\n  \"avx512_bf16_flops_per_cycle\": %.4g", p->bf16_dot_per_cycle);
    fprintf(f, ",\n  \"peak_flops_by_unit\": {");
    for (int u = 0; u < UNIT_COUNT; u++) fprintf(f, "%s\"%s\": %.17g", u ? ", " : "", k_unit_names[u], p->unit_peak[u]);
    fprintf(f, "},\n  \"unit_note\": \"each op's unit is read from its implementation (impl): oneDNN's "
               "*avx512_core_amx* run on AMX tiles, *avx512_core_bf16* on AVX512-BF16, everything else (SIMD and "
               "reference kernels, emulated BF16) on FP32 FMAs; mfu divides the FLOPs by what the units could do "
               "in the step: the FP32 peak, raised to a BF16 unit's peak while its ops ran (mfu_fp32_peak: against "
               "the FP32 peak only)\",\n");
    fprintf(f, "  \"steps\": [");
    for (int64_t k = 0; sa && k < nsteps; k++) {
        const step_acc *s = &sa[k];
        if (!s->have) continue;
        double fs = s->dur > 0 ? s->flops / (s->dur * 1e-6) : 0, cap = step_capacity(p, s);
        fprintf(f, "%s\n    {\"step\": %lld, \"time_us\": %.3f, \"flops\": %.0f, \"flops_per_s\": %.6g, \"mfu\": %.6g, "
                "\"mfu_fp32_peak\": %.6g, \"data_us\": %.3f, \"data_share\": %.6g, \"comm_share\": %.6g}",
                n_have ? "," : "", (long long)(first + k), s->dur, s->flops, fs, cap > 0 ? s->flops / cap : 0,
                p->peak > 0 ? fs / p->peak : 0, s->data, s->dur > 0 ? s->data / s->dur : 0,
                s->dur > 0 ? s->comm / s->dur : 0);
        n_have++;
        tot_cap += cap;
        for (int u = 0; u < UNIT_COUNT; u++) {
            unit_us[u] += s->unit_us[u];
            unit_f[u] += s->unit_flops[u];
        }
        tot_t += s->dur;
        tot_f += s->flops;
        tot_d += s->data;
        tot_c += s->comm;
    }
    double ach = tot_t > 0 ? tot_f / (tot_t * 1e-6) : 0;
    fprintf(f, "\n  ],\n  \"recorded_steps\": %d, \"flops_per_step\": %.0f, \"achieved_flops_per_s\": %.6g, "
            "\"mfu\": %.6g, \"mfu_fp32_peak\": %.6g, \"effective_peak_flops\": %.6g,\n", n_have,
            n_have ? tot_f / n_have : 0, ach, tot_cap > 0 ? tot_f / tot_cap : 0, p->peak > 0 ? ach / p->peak : 0,
            tot_t > 0 ? tot_cap / (tot_t * 1e-6) : p->peak);
    fprintf(f, "  \"units\": {");
    for (int u = 0; u < UNIT_COUNT; u++)
        fprintf(f, "%s\"%s\": {\"op_time_us\": %.3f, \"flops\": %.0f, \"flops_per_s\": %.6g, \"util\": %.6g}",
                u ? ", " : "", k_unit_names[u], unit_us[u], unit_f[u], unit_us[u] > 0 ? unit_f[u] / (unit_us[u] * 1e-6) : 0,
                unit_us[u] > 0 && p->unit_peak[u] > 0 ? unit_f[u] / (unit_us[u] * 1e-6) / p->unit_peak[u] : 0);
    fprintf(f, "},\n");
    fprintf(f, "  \"data_stall_share\": %.6g, \"comm_share\": %.6g,\n", tot_t > 0 ? tot_d / tot_t : 0,
            tot_t > 0 ? tot_c / tot_t : 0);
    fprintf(f, "  \"comm_note\": \"communication events (cat comm, one per gradient bucket) have a place in the "
               "trace but nothing emits them yet (single process): the share is 0\",\n");
    fprintf(f, "  \"flops_note\": \"estimates: matmul/linear 2*M*N*K (bias not counted), conv 2*out*C/g*KH*KW, "
               "attention 4*B*T*T*D forward and 10*B*T*T*D backward (halved when causal), other ops 1 per output "
               "element\",\n");
    if (p->have_mem) {
        const ct_plan_stats *m = &p->mem;
        double total = (double)m->param_bytes + (double)m->grad_bytes + (double)m->buffer_bytes +
                       (double)p->opt_bytes + (double)m->weight_copy_bytes + (double)m->activation_bytes +
                       (double)m->workspace_bytes;
        fprintf(f, "  \"memory\": {\"params_bytes\": %zu, \"grads_bytes\": %zu, \"buffers_bytes\": %zu, "
                "\"optimizer_state_bytes\": %zu, \"weight_copies_bytes\": %zu, \"activations_bytes\": %zu, "
                "\"workspace_bytes\": %zu, \"total_bytes\": %.0f, \"budget_bytes\": %zu},\n",
                m->param_bytes, m->grad_bytes, m->buffer_bytes, p->opt_bytes, m->weight_copy_bytes,
                m->activation_bytes, m->workspace_bytes, total, p->budget);
    }
    fprintf(f, "  \"time_unit\": \"us\"\n}");
    free(sa);
}

ct_status ct_profiler_write(ct_profiler *p, const char *path) {
    if (!p || !path) return CT_E_INVALID_ARG;
    char tmp[4200];
    int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp)
        return ct_set_error(p->ctx, CT_E_IO, "profiler: trace path '%s' is too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return ct_set_error(p->ctx, CT_E_IO, "profiler: cannot write the trace '%s': %s; check that its directory "
                            "exists and is writable", path, strerror(errno));
    double base = p->n_ev ? p->ev[0].ts : 0;
    for (size_t i = 1; i < p->n_ev; i++)
        if (p->ev[i].ts < base) base = p->ev[i].ts;
    fprintf(f, "{\"displayTimeUnit\": \"ms\",\n\"traceEvents\": [\n");
    write_events(p, f, base, (int)getpid());
    fprintf(f, "\n],\n");
    write_metadata(p, f);
    fprintf(f, "\n}\n");
    int bad = ferror(f);
    if (fclose(f) != 0) bad = 1;
    if (bad || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return ct_set_error(p->ctx, CT_E_IO, "profiler: writing the trace '%s' failed: %s", path, strerror(err));
    }
    return CT_OK;
}
