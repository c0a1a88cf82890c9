/* tests/test_profile.c - the profiler (Chrome trace of a profiled MLP: one
 * op event per executed node per recorded step, exact linear FLOPs, the
 * skip/warmup/record schedule, the bounded buffer, the node hook under it)
 * and the doctor (each KPI threshold on synthetic traces, bad traces,
 * unwritable paths, out of memory). */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <unistd.h>

#include "test.h"
#include "graph/plan.h"
#include "prof/prof_internal.h"

/* realloc, failing on request (g_realloc_fails set): the out-of-memory paths of code that calls realloc itself
 * (the doctor's event lists). This program's realloc comes before the C library's (or the sanitizer's), which it
 * calls otherwise. */
static int g_realloc_fails;
void *realloc(void *p, size_t n) {
    static void *(*next)(void *, size_t);
    if (g_realloc_fails) return NULL;
    if (!next) *(void **)&next = dlsym(RTLD_NEXT, "realloc");
    return next(p, n);
}

static int executed_nodes(const ct_plan *p) {
    int n = 0;
    for (int i = 0; i < p->g.n; i++) {
        ct_op op = p->g.nodes[i].op;
        if (p->pn[i].live && op != CT_OP_INPUT && op != CT_OP_PARAM && op != CT_OP_BUFFER && op != CT_OP_RESHAPE) n++;
    }
    return n;
}

/* FP32 lanes of the context's kernel ISA; the highest "cpu MHz" in /proc/cpuinfo (0 if none) */
static int isa_lanes(ct_context *ctx) {
    ct_isa isa = ct_context_isa(ctx);
    return isa == CT_ISA_AVX512 ? 16 : isa == CT_ISA_AVX2 ? 8 : 1;
}

static double cpuinfo_max_mhz(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    double best = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *c = strchr(line, ':');
        if (!strncmp(line, "cpu MHz", 7) && c && atof(c + 1) > best) best = atof(c + 1);
    }
    if (f) fclose(f);
    return best;
}

static const char *str_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num_of(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

TEST(profiled_mlp_trace) {
    ct_context *ctx = test_ctx(-1, 1);
    const int64_t B = 16, IN = 20, H = 24, C = 5;
    test_model m;
    CHECK_OK(ctx, test_model_build(ctx, 2, (int64_t[]){B, IN}, 1, (int64_t[]){H}, C, 0.0f, 0.0f, &m));
    ct_profiler_opts po;
    ct_profiler_opts_default(&po);
    po.skip_steps = 1;
    po.warmup_steps = 2;
    po.record_steps = 2;
    ct_profiler *prof;
    CHECK_OK(ctx, ct_profiler_create(ctx, &po, &prof));
    CHECK_OK(ctx, ct_plan_set_profiler(m.plan, prof));
    for (int st = 0; st < 7; st++) {
        double t0 = ct_profiler_now_us();
        ct_profiler_event(prof, "batch", "data", t0, t0 + 1, "{\"batch\": 1}");
        CHECK(ct_profiler_recording(prof) == (st == 3 || st == 4));
        CHECK_OK(ctx, ct_plan_forward(m.plan, 1));
        CHECK_OK(ctx, ct_plan_backward(m.plan));
        ct_profiler_event(prof, "optimizer step", "optimizer", ct_profiler_now_us(), ct_profiler_now_us(), NULL);
        ct_profiler_step(prof);
    }
    int per_step = executed_nodes(m.plan);
    ct_plan_stats ps;
    ct_plan_get_stats(m.plan, &ps);
    ct_profiler_set_memory(prof, &ps, 2 * ps.param_bytes, 0);
    char path[256];
    snprintf(path, sizeof path, "/tmp/ct_test_profile_%d.json", (int)getpid());
    CHECK_OK(ctx, ct_profiler_write(prof, path));
    size_t len;
    char *txt = (char *)test_read_file(path, &len);
    CHECK(txt != NULL);
    cJSON *root = cJSON_Parse(txt);
    CHECK_MSG(root != NULL, "the trace is not valid JSON");
    CHECK(!strcmp(str_of(root, "displayTimeUnit"), "ms"));
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    CHECK(cJSON_IsArray(evs));
    int ops[8] = {0}, steps = 0, data = 0, optim = 0, lin_fwd = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        if (strcmp(str_of(e, "ph"), "X")) continue;
        CHECK(num_of(e, "ts") >= 0 && num_of(e, "dur") >= 0 && num_of(e, "pid") >= 0);
        const char *cat = str_of(e, "cat");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
        if (!strcmp(cat, "op")) {
            int sidx = (int)num_of(a, "step");
            CHECK_MSG(sidx == 3 || sidx == 4, "op event of step %d outside the record window", sidx);
            ops[sidx]++;
            CHECK(str_of(a, "kernel")[0] && strcmp(str_of(a, "kernel"), "none"));
            /* the implementation: oneDNN's name for a oneDNN node (known after its first run), else the slot */
            CHECK(str_of(a, "impl")[0] && !strcmp(str_of(a, "unit"), "fp32_fma"));
            if (!strcmp(str_of(a, "kernel"), "onednn")) CHECK_MSG(strcmp(str_of(a, "impl"), "onednn"), "impl not known");
            else CHECK(!strcmp(str_of(a, "impl"), str_of(a, "kernel")));
            CHECK(num_of(a, "bytes") > 0 && num_of(a, "flops") > 0);
            if (!strcmp(str_of(a, "op"), "linear") && !strcmp(str_of(a, "node"), "fc1")) {
                CHECK(!strcmp(str_of(a, "phase"), "forward"));
                CHECK(!strcmp(str_of(a, "shape"), "[16, 24]") && !strcmp(str_of(a, "dtype"), "f32"));
                CHECK_MSG(num_of(a, "flops") == 2.0 * B * IN * H, "fc1 flops %g", num_of(a, "flops"));
                lin_fwd++;
            }
        } else if (!strcmp(cat, "step")) {
            steps++;
        } else if (!strcmp(cat, "data")) {
            CHECK(num_of(a, "batch") == 1);
            data++;
        } else if (!strcmp(cat, "optimizer")) {
            optim++;
        }
    }
    CHECK_MSG(ops[3] == per_step && ops[4] == per_step, "op events %d, %d; %d nodes run per step", ops[3], ops[4],
              per_step);
    CHECK(steps == 2 && data == 2 && optim == 2 && lin_fwd == 2);
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    CHECK(num_of(md, "recorded_steps") == 2 && num_of(md, "dropped_events") == 0);
    CHECK(num_of(md, "peak_flops") > 0 && num_of(md, "mfu") > 0 && num_of(md, "flops_per_step") > 2.0 * B * IN * H);
    CHECK(strstr(str_of(md, "peak_source"), "MHz") != NULL);
    /* the clock behind the peaks: a real core clock (a dependent add chain read 6.7-12 "GHz" on an Emerald
     * Rapids, whose renamer folds add-immediates), never below what /proc/cpuinfo reports */
    double clk = num_of(md, "clock_mhz");
    CHECK_MSG(clk >= 300 && clk <= 7000, "clock_mhz %g (%s)", clk, str_of(md, "clock_source"));
    CHECK_MSG(clk >= cpuinfo_max_mhz(), "clock_mhz %g below /proc/cpuinfo's %g", clk, cpuinfo_max_mhz());
    CHECK_MSG(fabs(num_of(md, "peak_flops") - 4.0 * isa_lanes(ctx) * clk * 1e6 *
                                                ct_context_num_threads(ctx)) <= 1e-3 * num_of(md, "peak_flops"),
              "peak_flops %g from clock %g", num_of(md, "peak_flops"), clk);
    /* FP32 work only: the unit-aware MFU is the FP32 one */
    CHECK(num_of(md, "mfu_fp32_peak") > 0 && fabs(num_of(md, "mfu") - num_of(md, "mfu_fp32_peak")) <= 1e-6 * num_of(md, "mfu"));
    CHECK(fabs(num_of(md, "effective_peak_flops") - num_of(md, "peak_flops")) <= 1e-6 * num_of(md, "peak_flops"));
    const cJSON *units = cJSON_GetObjectItemCaseSensitive(md, "units");
    CHECK(num_of(cJSON_GetObjectItemCaseSensitive(units, "fp32_fma"), "op_time_us") > 0);
    CHECK(num_of(cJSON_GetObjectItemCaseSensitive(units, "amx_bf16"), "op_time_us") == 0);
    const cJSON *up = cJSON_GetObjectItemCaseSensitive(md, "peak_flops_by_unit");
    /* AMX: 1024 flops per cycle and core; AVX512-BF16: what its dot products measured (64 x their FLOP rate over
       the FMA's: ~128 on AMD Zen 4 / 5, ~32 on Intel Sapphire / Emerald Rapids), 128 nominal without them */
    double unit_scale = clk * 1e6 * ct_context_num_threads(ctx), dpc = num_of(md, "avx512_bf16_flops_per_cycle");
    CHECK_MSG(fabs(num_of(up, "amx_bf16") - 1024 * unit_scale) <= 1e-6 * num_of(up, "amx_bf16"), "amx peak %g",
              num_of(up, "amx_bf16"));
    CHECK_MSG(fabs(num_of(up, "avx512_bf16") - dpc * unit_scale) <= 1e-3 * num_of(up, "avx512_bf16"),
              "avx512_bf16 peak %g, %g flops per cycle", num_of(up, "avx512_bf16"), dpc);
    CHECK_MSG(ct_context_cpu(ctx)->avx512_bf16 ? dpc >= 8 && dpc <= 256 : dpc == 128,
              "avx512_bf16 flops per cycle %g (cpu has avx512_bf16: %d)", dpc, ct_context_cpu(ctx)->avx512_bf16);
    /* which unit an implementation name means */
    CHECK(ct_prof_unit_of("brg:avx512_core_amx") == 2 && ct_prof_unit_of("jit:avx512_core_amx") == 2);
    CHECK(ct_prof_unit_of("brg:avx512_core_bf16") == 1 && ct_prof_unit_of("jit_bf16:avx512_core_bf16") == 1);
    CHECK(ct_prof_unit_of("jit_bf16:avx512_core") == 0 && ct_prof_unit_of("gemm:jit") == 0);
    CHECK(ct_prof_unit_of("avx512") == 0 && ct_prof_unit_of(NULL) == 0);
    CHECK(num_of(md, "comm_share") == 0 && num_of(md, "data_stall_share") >= 0);
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(md, "memory");
    CHECK(num_of(mem, "params_bytes") == (double)ps.param_bytes);
    CHECK(num_of(mem, "optimizer_state_bytes") == 2.0 * (double)ps.param_bytes);
    CHECK(cJSON_GetObjectItemCaseSensitive(mem, "weight_copies_bytes") &&
          num_of(mem, "weight_copies_bytes") == (double)ps.weight_copy_bytes);
    cJSON_Delete(root);
    /* the doctor reads it back */
    ct_doctor_report dr;
    CHECK_OK(ctx, ct_doctor_analyze_file(ctx, path, &dr));
    CHECK(dr.steps == 2 && dr.utilization > 0 && dr.v_memory == CT_VERDICT_UNKNOWN && dr.v_comm == CT_VERDICT_OK);
    /* truncated on disk, wherever the cut falls (inside a string, a number, between tokens) */
    for (int c = 1; c < 64; c++) {
        size_t cut = len * (size_t)c / 64 + (size_t)c % 7;
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        fwrite(txt, 1, cut, f);
        fclose(f);
        CHECK(ct_doctor_analyze_file(ctx, path, &dr) == CT_E_CORRUPT);
        CHECK_MSG(strstr(ct_context_last_error(ctx), "truncated") && strstr(ct_context_last_error(ctx), path),
                  "cut at %zu of %zu: %s", cut, len, ct_context_last_error(ctx));
    }
    free(txt);
    unlink(path);
    CHECK_OK(ctx, ct_plan_set_profiler(m.plan, NULL));
    CHECK_OK(ctx, ct_plan_forward(m.plan, 1)); /* detached: nothing recorded */
    CHECK(ct_profiler_num_events(prof) == (size_t)(2 * per_step + 6));
    ct_profiler_free(prof);
    ct_plan_free(m.plan);
    ct_context_free(ctx);
}

/* The generic node hook the profiler is built on: BEGIN/END pairs for every
 * executed node, in order, with the kernel that ran and the cost model. */
typedef struct {
    int begins, ends, open, bad_order, backward, linear;
    double linear_flops;
} hook_log;

static void log_node(void *user, const ct_node_event *ev) {
    hook_log *l = user;
    if (ev->kind == CT_NODE_BEGIN) {
        l->bad_order += l->open != -1;
        l->open = ev->node;
        l->begins++;
        return;
    }
    l->bad_order += l->open != ev->node || ev->status != CT_OK || !ev->kernel || !strcmp(ev->kernel, "none");
    l->open = -1;
    l->ends++;
    l->backward += ev->backward;
    if (!strcmp(ev->op, "linear") && ev->ndim == 2) {
        l->linear++;
        l->linear_flops += ev->flops;
    }
}

TEST(node_hook_events) {
    ct_context *ctx = test_ctx(-1, 1);
    const int64_t B = 8, IN = 6, H = 4, C = 3;
    test_model m;
    CHECK_OK(ctx, test_model_build(ctx, 2, (int64_t[]){B, IN}, 1, (int64_t[]){H}, C, 0.0f, 0.0f, &m));
    hook_log l = {0};
    l.open = -1;
    ct_plan_set_node_hook(m.plan, log_node, &l);
    CHECK_OK(ctx, ct_plan_forward(m.plan, 1));
    CHECK_OK(ctx, ct_plan_backward(m.plan));
    CHECK(l.begins == executed_nodes(m.plan) && l.ends == l.begins);
    CHECK(l.bad_order == 0 && l.backward > 0);
    CHECK(l.linear == 2 && l.linear_flops == 2.0 * B * (IN * H + H * C));
    ct_plan_set_node_hook(m.plan, NULL, NULL);
    CHECK_OK(ctx, ct_plan_forward(m.plan, 1));
    CHECK(l.ends == l.begins && l.begins == executed_nodes(m.plan));
    ct_plan_free(m.plan);
    ct_context_free(ctx);
}

TEST(bounded_buffer_counts_drops) {
    ct_context *ctx = test_ctx(-1, 1);
    test_model m;
    CHECK_OK(ctx, test_model_build(ctx, 2, (int64_t[]){8, 12}, 1, (int64_t[]){16}, 4, 0.0f, 0.0f, &m));
    ct_profiler_opts po;
    ct_profiler_opts_default(&po);
    po.skip_steps = po.warmup_steps = po.record_steps = 0; /* record everything */
    po.max_events = 10;
    ct_profiler *prof;
    CHECK_OK(ctx, ct_profiler_create(ctx, &po, &prof));
    CHECK_OK(ctx, ct_plan_set_profiler(m.plan, prof));
    for (int st = 0; st < 3; st++) {
        CHECK_OK(ctx, ct_plan_forward(m.plan, 1));
        CHECK_OK(ctx, ct_plan_backward(m.plan));
        ct_profiler_step(prof);
    }
    int per_step = executed_nodes(m.plan);
    CHECK(ct_profiler_num_events(prof) == 10);
    CHECK(ct_profiler_dropped(prof) == (uint64_t)(3 * (per_step + 1) - 10));
    char path[256];
    snprintf(path, sizeof path, "/tmp/ct_test_profile_b%d.json", (int)getpid());
    CHECK_OK(ctx, ct_profiler_write(prof, path));
    char *txt = (char *)test_read_file(path, NULL);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL;
    CHECK(root != NULL);
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    CHECK(num_of(md, "dropped_events") == (double)ct_profiler_dropped(prof));
    CHECK(num_of(md, "max_events") == 10 && strstr(str_of(md, "dropped_note"), "max_events"));
    /* + process_name and the 5 tracks' thread_name */
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "traceEvents")) == 16);
    cJSON_Delete(root);
    free(txt);
    unlink(path);
    /* invalid options */
    po.max_events = 0;
    ct_profiler *bad = NULL;
    CHECK(ct_profiler_create(ctx, &po, &bad) == CT_E_INVALID_ARG && bad == NULL);
    ct_plan_free(m.plan);
    ct_profiler_free(prof);
    ct_context_free(ctx);
}

TEST(unwritable_dir_is_io_error) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_profiler *prof;
    CHECK_OK(ctx, ct_profiler_create(ctx, NULL, &prof));
    const char *path = "/nonexistent-ctrain-dir/sub/trace.json";
    CHECK(ct_profiler_write(prof, path) == CT_E_IO);
    CHECK_MSG(strstr(ct_context_last_error(ctx), path) != NULL, "%s", ct_context_last_error(ctx));
    ct_profiler_free(prof);
    ct_context_free(ctx);
}

/* A synthetic trace: one 1000 us step holding an op of `flops`, a data and a
 * comm event; peak 1e9 FLOP/s (1e6 flops per step = 100%); memory / budget in MiB. */
static char *synth(double flops, double data_us, double comm_us, double mem, double budget) {
    char *b = malloc(2048);
    snprintf(b, 2048,
             "{\"traceEvents\": ["
             "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 1, \"tid\": 1},"
             "{\"ph\": \"X\", \"name\": \"step 0\", \"cat\": \"step\", \"ts\": 0, \"dur\": 1000, \"pid\": 1, \"tid\": 1},"
             "{\"ph\": \"X\", \"name\": \"batch\", \"cat\": \"data\", \"ts\": 0, \"dur\": %g, \"pid\": 1, \"tid\": 1},"
             "{\"ph\": \"X\", \"name\": \"linear\", \"cat\": \"op\", \"ts\": 100, \"dur\": 500, \"pid\": 1, \"tid\": 1,"
             " \"args\": {\"flops\": %g}},"
             "{\"ph\": \"X\", \"name\": \"bucket 0\", \"cat\": \"comm\", \"ts\": 600, \"dur\": %g, \"pid\": 1, \"tid\": 2}],"
             "\"displayTimeUnit\": \"ms\", \"metadata\": {\"peak_flops\": 1e9, \"memory\": {\"total_bytes\": %.17g, "
             "\"budget_bytes\": %.17g}}}",
             data_us, flops, comm_us, mem * 1048576, budget * 1048576);
    return b;
}

static int doctor_on(ct_context *ctx, char *json, ct_doctor_report *r) {
    ct_status s = ct_doctor_analyze_json(ctx, json, strlen(json), r);
    free(json);
    return s == CT_OK;
}

TEST(doctor_thresholds) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_doctor_report r;
    CHECK(doctor_on(ctx, synth(0.8e6, 10, 100, 80, 100), &r)); /* healthy */
    CHECK(r.v_compute == CT_VERDICT_OK && r.v_memory == CT_VERDICT_OK && r.v_comm == CT_VERDICT_OK &&
          r.v_data == CT_VERDICT_OK);
    CHECK(fabs(r.utilization - 0.8) < 1e-9 && fabs(r.memory_share - 0.8) < 1e-9);
    CHECK(fabs(r.comm_share - 0.1) < 1e-9 && fabs(r.data_share - 0.01) < 1e-9 && r.steps == 1 && r.events == 4);
    CHECK(doctor_on(ctx, synth(0.1e6, 10, 0, 80, 100), &r)); /* low utilization */
    CHECK(r.v_compute == CT_VERDICT_WARN && r.v_memory == CT_VERDICT_OK && fabs(r.utilization - 0.1) < 1e-9);
    CHECK(doctor_on(ctx, synth(0.8e6, 10, 0, 95, 100), &r)); /* memory too close to the budget */
    CHECK(r.v_memory == CT_VERDICT_WARN && r.v_compute == CT_VERDICT_OK);
    CHECK(doctor_on(ctx, synth(0.8e6, 10, 0, 30, 100), &r)); /* memory under-used */
    CHECK(r.v_memory == CT_VERDICT_WARN);
    CHECK(doctor_on(ctx, synth(0.8e6, 10, 0, 30, 0), &r)); /* no budget set */
    CHECK(r.v_memory == CT_VERDICT_UNKNOWN);
    CHECK(doctor_on(ctx, synth(0.8e6, 10, 300, 80, 100), &r)); /* communication 30% */
    CHECK(r.v_comm == CT_VERDICT_WARN && r.v_data == CT_VERDICT_OK && fabs(r.comm_share - 0.3) < 1e-9);
    CHECK(doctor_on(ctx, synth(0.8e6, 100, 0, 80, 100), &r)); /* data stall 10% */
    CHECK(r.v_data == CT_VERDICT_WARN && r.v_comm == CT_VERDICT_OK && fabs(r.data_share - 0.1) < 1e-9);
    /* op events of steps the trace does not time (e.g. an evaluation) are not counted */
    const char *other = "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"step\", \"ts\": 0, \"dur\": 1000, "
                        "\"args\": {\"step\": 3}}, {\"ph\": \"X\", \"cat\": \"op\", \"ts\": 1, \"dur\": 1, "
                        "\"args\": {\"step\": 3, \"flops\": 5}}, {\"ph\": \"X\", \"cat\": \"op\", \"ts\": 2000, "
                        "\"dur\": 1, \"args\": {\"step\": 4, \"flops\": 7}}], \"metadata\": {\"peak_flops\": 1e9}}";
    CHECK_OK(ctx, ct_doctor_analyze_json(ctx, other, strlen(other), &r));
    CHECK(r.flops == 5 && r.steps == 1 && r.step_time_us == 1000);
    /* the printed verdicts carry the values and the advice */
    CHECK(doctor_on(ctx, synth(0.1e6, 100, 300, 95, 100), &r));
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(f != NULL);
    ct_doctor_print(&r, f);
    fclose(f);
    CHECK_MSG(strstr(buf, "10.0%") && strstr(buf, "batch size") && strstr(buf, "leaks") && strstr(buf, "overlap_communication") &&
                  strstr(buf, "prefetch") && strstr(buf, "95.0%") && strstr(buf, "30.0%"),
              "%s", buf);
    ct_context_free(ctx);
}

/* A trace of n_steps step events plus the amp events in `amp` (JSON
 * objects, comma-separated), as the trainer writes them. */
static char *amp_trace(int n_steps, const char *amp) {
    size_t cap = 256 + (size_t)n_steps * 96 + strlen(amp);
    char *b = malloc(cap);
    size_t o = (size_t)snprintf(b, cap, "{\"traceEvents\": [");
    for (int i = 0; i < n_steps; i++)
        o += (size_t)snprintf(b + o, cap - o, "%s{\"name\": \"step\", \"ph\": \"X\", \"cat\": \"step\", \"ts\": %d, "
                              "\"dur\": 1000, \"args\": {\"step\": %d}}", i ? ", " : "", i * 1000, i);
    snprintf(b + o, cap - o, "%s%s]}", amp[0] && n_steps ? ", " : "", amp);
    return b;
}

#define AMP_EV(name, scale, bad)                                                                                      \
    "{\"name\": \"" name "\", \"ph\": \"X\", \"cat\": \"amp\", \"ts\": 1, \"dur\": 1, \"args\": {\"scale\": " scale ", " \
    "\"first_nonfinite\": \"" bad "\"}}"

/* The doctor's loss-scale story from a hand-written trace. */
TEST(doctor_loss_scale_summary) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_doctor_report r;
    /* the trainer's events: growth; overflow that backs off (the scale went down); overflow tolerated by
     * hysteresis (the scale kept); growth */
    char *t = amp_trace(20, AMP_EV("loss scale grown", "131072", "") ", " AMP_EV("overflow: update skipped", "65536",
                                                                                  "fc2.weight") ", "
                            AMP_EV("overflow: update skipped", "65536", "fc1.bias") ", "
                            AMP_EV("loss scale grown", "131072", ""));
    CHECK_OK(ctx, ct_doctor_analyze_json(ctx, t, strlen(t), &r));
    free(t);
    CHECK(r.steps == 20 && r.amp.events == 4);
    CHECK_MSG(r.amp.overflows == 2 && r.amp.backoffs == 1 && r.amp.growths == 2 && r.amp.final_scale == 131072,
              "%lld overflows %lld backoffs %lld growths, scale %g", (long long)r.amp.overflows,
              (long long)r.amp.backoffs, (long long)r.amp.growths, r.amp.final_scale);
    CHECK(!strcmp(r.amp.first_nonfinite, "fc2.weight"));
    CHECK(r.v_amp == CT_VERDICT_WARN); /* 2 of 20 steps overflowed: 10% */
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(f != NULL);
    ct_doctor_print(&r, f);
    fclose(f);
    CHECK_MSG(strstr(buf, "[warn] loss scale: 2 overflows (updates skipped), 1 backoff, 2 growths in 20 recorded steps") &&
                  strstr(buf, "final scale 131072") && strstr(buf, "first non-finite tensor 'fc2.weight'") &&
                  strstr(buf, "keep_fp32"),
              "%s", buf);
    /* explicit args.event, one event per scaler record: counted as said; one overflow in 40 steps is fine */
    t = amp_trace(40, "{\"name\": \"amp\", \"ph\": \"X\", \"cat\": \"amp\", \"ts\": 1, \"dur\": 1, \"args\": "
                      "{\"event\": \"overflow\", \"scale\": 1024, \"first_nonfinite\": \"emb.weight\"}}, "
                      "{\"name\": \"amp\", \"ph\": \"X\", \"cat\": \"amp\", \"ts\": 1, \"dur\": 1, \"args\": "
                      "{\"event\": \"backoff\", \"scale\": 512, \"first_nonfinite\": \"emb.weight\"}}");
    CHECK_OK(ctx, ct_doctor_analyze_json(ctx, t, strlen(t), &r));
    free(t);
    CHECK(r.amp.overflows == 1 && r.amp.backoffs == 1 && r.amp.growths == 0 && r.amp.final_scale == 512);
    CHECK(!strcmp(r.amp.first_nonfinite, "emb.weight") && r.v_amp == CT_VERDICT_OK);
    /* at the floor: a warning whatever the share */
    t = amp_trace(100, AMP_EV("overflow: update skipped", "1", "fc1.weight"));
    CHECK_OK(ctx, ct_doctor_analyze_json(ctx, t, strlen(t), &r));
    free(t);
    CHECK(r.amp.overflows == 1 && r.amp.backoffs == 0 && r.v_amp == CT_VERDICT_WARN);
    /* no amp events: unknown, and said so */
    t = amp_trace(5, "");
    CHECK_OK(ctx, ct_doctor_analyze_json(ctx, t, strlen(t), &r));
    free(t);
    CHECK(r.v_amp == CT_VERDICT_UNKNOWN && r.amp.events == 0 && r.amp.final_scale == -1 && !r.amp.first_nonfinite[0]);
    memset(buf, 0, sizeof buf);
    f = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(f != NULL);
    ct_doctor_print(&r, f);
    fclose(f);
    CHECK_MSG(strstr(buf, "[n/a]  loss scale: no amp events"), "%s", buf);
    ct_context_free(ctx);
}

TEST(doctor_bad_traces) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_doctor_report r;
    const char *notjson = "this is not a trace\n";
    CHECK(ct_doctor_analyze_json(ctx, notjson, strlen(notjson), &r) == CT_E_CORRUPT);
    CHECK(strstr(ct_context_last_error(ctx), "not valid JSON"));
    const char *trunc = "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1, \"dur\"";
    CHECK(ct_doctor_analyze_json(ctx, trunc, strlen(trunc), &r) == CT_E_CORRUPT);
    CHECK(strstr(ct_context_last_error(ctx), "truncated"));
    const char *noev = "{\"displayTimeUnit\": \"ms\", \"events\": []}";
    CHECK(ct_doctor_analyze_json(ctx, noev, strlen(noev), &r) == CT_E_CONFIG);
    CHECK(strstr(ct_context_last_error(ctx), "traceEvents"));
    const char *arr = "[1, 2, 3]";
    CHECK(ct_doctor_analyze_json(ctx, arr, strlen(arr), &r) == CT_E_CONFIG);
    CHECK(ct_doctor_analyze_json(ctx, "", 0, &r) == CT_E_CORRUPT);
    CHECK(ct_doctor_analyze_file(ctx, "/nonexistent-ctrain-dir/trace.json", &r) == CT_E_IO);
    CHECK(strstr(ct_context_last_error(ctx), "/nonexistent-ctrain-dir/trace.json"));
    /* an empty but valid trace reads, with unknown KPIs */
    const char *empty = "{\"traceEvents\": []}";
    CHECK_OK(ctx, ct_doctor_analyze_json(ctx, empty, strlen(empty), &r));
    CHECK(r.v_compute == CT_VERDICT_UNKNOWN && r.v_memory == CT_VERDICT_UNKNOWN && r.events == 0);
    ct_context_free(ctx);
}

/* Counts in the trace's metadata are doubles in JSON: one past the int64
 * range saturates and a negative one reads as 0 (the plain cast this
 * replaced was undefined: on x86 1e300 came out as INT64_MIN). */
TEST(doctor_huge_counts) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_doctor_report r;
    const struct { const char *v; int64_t want; } cases[] = {
        {"1e300", INT64_MAX}, {"9.3e18", INT64_MAX}, {"1e999", INT64_MAX}, {"-1e300", 0}, {"-5", 0}, {"3", 3},
        {"9.2e18", (int64_t)9.2e18},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char t[256];
        snprintf(t, sizeof t, "{\"traceEvents\": [], \"metadata\": {\"dropped_events\": %s}}", cases[i].v);
        CHECK_OK(ctx, ct_doctor_analyze_json(ctx, t, strlen(t), &r));
        CHECK_MSG(r.dropped == cases[i].want, "dropped_events %s read as %lld", cases[i].v, (long long)r.dropped);
    }
    ct_context_free(ctx);
}

/* Each category on its track: ops and caller events on "training" (tid 1), comm 2, comm_bucket 3,
 * pipeline 4 ("pipeline micro-batches"), pipeline_comm 5 ("pipeline sends and receives"). */
TEST(tracks_by_category) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_profiler_opts po;
    ct_profiler_opts_default(&po);
    po.skip_steps = po.warmup_steps = po.record_steps = 0;
    ct_profiler *prof;
    CHECK_OK(ctx, ct_profiler_create(ctx, &po, &prof));
    const char *cats[] = {"data", "comm", "comm_bucket", "pipeline", "pipeline_comm", "optimizer"};
    const int want[] = {1, 2, 3, 4, 5, 1};
    double t = ct_profiler_now_us();
    for (int i = 0; i < 6; i++) ct_profiler_event(prof, cats[i], cats[i], t + i, t + i + 1, NULL);
    ct_profiler_step(prof);
    char path[256];
    snprintf(path, sizeof path, "/tmp/ct_test_profile_t%d.json", (int)getpid());
    CHECK_OK(ctx, ct_profiler_write(prof, path));
    char *txt = (char *)test_read_file(path, NULL);
    cJSON *root = txt ? cJSON_Parse(txt) : NULL;
    CHECK(root != NULL);
    const cJSON *e;
    int seen = 0, names = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "traceEvents")) {
        const char *ph = str_of(e, "ph");
        if (ph && !strcmp(ph, "M") && !strcmp(str_of(e, "name"), "thread_name")) {
            const char *tn = str_of(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
            int tid = (int)num_of(e, "tid");
            names += (tid == 4 && !strcmp(tn, "pipeline micro-batches")) +
                     (tid == 5 && !strcmp(tn, "pipeline sends and receives")) + (tid == 1 && !strcmp(tn, "training"));
            continue;
        }
        const char *cat = str_of(e, "cat");
        for (int i = 0; cat && i < 6; i++)
            if (!strcmp(cat, cats[i])) {
                CHECK_MSG((int)num_of(e, "tid") == want[i], "%s on track %g", cat, num_of(e, "tid"));
                seen++;
            }
    }
    CHECK(seen == 6 && names == 3);
    cJSON_Delete(root);
    free(txt);
    unlink(path);
    ct_profiler_free(prof);
    ct_context_free(ctx);
}

/* A pipeline rank's trace: two 1200 us steps, each with a "pipeline schedule" of 1000 us; compute
 * ("forward/backward mb") 700 us in the first, 900 us in the second: bubble 1 - 1600 / 2000 = 20%;
 * receives 150 + 50 us inside the schedules: 200 / 2400 of step time. An evaluation's forward and
 * receive outside the schedules and a send marker do not count. */
static char *pp_trace(double ideal) {
    char *b = malloc(4096);
#define PEV(name, cat, ts, dur) "{\"ph\": \"X\", \"name\": \"" #name "\", \"cat\": \"" #cat "\", \"ts\": " #ts ", \"dur\": " #dur "}, "
    snprintf(b, 4096,
             "{\"traceEvents\": ["
             PEV(step, step, 0, 1200) PEV(step, step, 2000, 1200)
             "{\"ph\": \"X\", \"name\": \"pipeline schedule\", \"cat\": \"pipeline\", \"ts\": 100, \"dur\": 1000, "
             "\"args\": {\"bubble\": 0.21, \"ideal\": %g}}, "
             "{\"ph\": \"X\", \"name\": \"pipeline schedule\", \"cat\": \"pipeline\", \"ts\": 2100, \"dur\": 1000, "
             "\"args\": {\"bubble\": 0.21, \"ideal\": %g}}, "
             PEV(backward mb 1 (piece 0), pipeline, 800, 200) PEV(forward mb 0 (piece 0), pipeline, 100, 150)
             PEV(forward mb 1 (piece 0), pipeline, 300, 150) PEV(backward mb 0 (piece 0), pipeline, 500, 200)
             PEV(receive gradients, pipeline_comm, 250, 50) PEV(receive gradients, pipeline_comm, 700, 100)
             PEV(send activations, pipeline_comm, 260, 1)
             PEV(forward mb 0 (piece 0), pipeline, 2100, 500) PEV(backward mb 0 (piece 0), pipeline, 2600, 400)
             PEV(receive gradients, pipeline_comm, 3000, 50)
             PEV(forward mb 0 (piece 0), pipeline, 4000, 500) PEV(receive activations, pipeline_comm, 4500, 100)
             "{\"ph\": \"X\", \"name\": \"linear\", \"cat\": \"op\", \"ts\": 100, \"dur\": 10, \"args\": {\"flops\": 1}}"
             "], \"metadata\": {\"peak_flops\": 1e9}}",
             ideal, ideal);
#undef PEV
    return b;
}

TEST(doctor_pipeline_bubble) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_doctor_report r;
    CHECK(doctor_on(ctx, pp_trace(0.15), &r));
    CHECK_MSG(r.pipeline_steps == 2 && fabs(r.pipeline_bubble - 0.2) < 1e-9 && fabs(r.pipeline_ideal - 0.15) < 1e-9 &&
                  fabs(r.pipeline_bubble_args - 0.21) < 1e-9,
              "%d schedules, bubble %g ideal %g args %g", r.pipeline_steps, r.pipeline_bubble, r.pipeline_ideal,
              r.pipeline_bubble_args);
    CHECK_MSG(fabs(r.pipeline_comm_share - 200.0 / 2400.0) < 1e-9 && r.pipeline_recv_us == 200 &&
                  r.pipeline_busy_us == 1600 && r.pipeline_time_us == 2000,
              "comm %g recv %g busy %g", r.pipeline_comm_share, r.pipeline_recv_us, r.pipeline_busy_us);
    CHECK(r.v_pipeline == CT_VERDICT_OK && r.steps == 2);
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(f != NULL);
    ct_doctor_print(&r, f);
    fclose(f);
    CHECK_MSG(strstr(buf, "[ok]   pipeline bubble 20.0% of the schedule (ideal 15.0%") && strstr(buf, "21.0%") &&
                  strstr(buf, "pipeline communication 8.3% of step time") && strstr(buf, "50% of the bubble") &&
                  !strstr(buf, "single process"),
              "%s", buf);
    /* the same trace against a smaller ideal: more than 10 points over it */
    CHECK(doctor_on(ctx, pp_trace(0.05), &r));
    CHECK(r.v_pipeline == CT_VERDICT_WARN && fabs(r.pipeline_bubble - 0.2) < 1e-9);
    memset(buf, 0, sizeof buf);
    f = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(f != NULL);
    ct_doctor_print(&r, f);
    fclose(f);
    CHECK_MSG(strstr(buf, "[warn] pipeline bubble 20.0%") && strstr(buf, "micro_batches") &&
                  strstr(buf, "interleaved") && strstr(buf, "pipeline_stages") && strstr(buf, "pipeline_split"),
              "%s", buf);
    /* no schedule events: no pipeline verdict and no line */
    CHECK(doctor_on(ctx, synth(0.8e6, 10, 100, 80, 100), &r));
    CHECK(r.pipeline_steps == 0 && r.v_pipeline == CT_VERDICT_UNKNOWN && r.pipeline_bubble == -1);
    memset(buf, 0, sizeof buf);
    f = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(f != NULL);
    ct_doctor_print(&r, f);
    fclose(f);
    CHECK_MSG(!strstr(buf, "pipeline"), "%s", buf);
    ct_context_free(ctx);
}

/* Out of memory for the pipeline events' lists (every realloc fails): CT_E_OOM. A failed realloc grew a list's
 * capacity without its memory, so the next event of the list was written through NULL. */
TEST(doctor_pipeline_out_of_memory) {
    ct_context *ctx = test_ctx(-1, 1);
    char *json = pp_trace(0.15);
    ct_doctor_report r;
    g_realloc_fails = 1;
    ct_status s = ct_doctor_analyze_json(ctx, json, strlen(json), &r);
    g_realloc_fails = 0;
    free(json);
    CHECK_MSG(s == CT_E_OOM && strstr(ct_context_last_error(ctx), "out of memory reading the pipeline events"),
              "%s: %s", ct_status_name(s), ct_context_last_error(ctx));
    ct_context_free(ctx);
}

TEST_MAIN(T(profiled_mlp_trace), T(node_hook_events), T(bounded_buffer_counts_drops), T(unwritable_dir_is_io_error), T(doctor_thresholds),
          T(doctor_loss_scale_summary), T(doctor_bad_traces), T(doctor_huge_counts),
          T(tracks_by_category), T(doctor_pipeline_bubble), T(doctor_pipeline_out_of_memory))
