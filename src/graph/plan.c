/* src/graph/plan.c - ct_compile (autodiff and the ordered list of graph
 * passes: liveness, kernel selection, memory planning (planner.c),
 * allocation) and the executor that runs the plan's forward and backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "ctrain/convert.h"
#include "kernels/kernels.h"
#include "plan.h"

/* ---- pass: autodiff ------------------------------------------------------------ */

static ct_status ensure_exclusive(ct_plan *p, ct_node *gnode, const uint8_t *claimed) {
    ct_graph *g = &p->g;
    const ct_node_def *d = &g->nodes[*gnode];
    if (d->op != CT_OP_RESHAPE && (d->flags & CT_NODE_BACKWARD) && !claimed[*gnode]) return CT_OK;
    ct_node c;
    CT_TRY(ct_scale(g, *gnode, 1.0f, &c));
    g->nodes[c].flags |= CT_NODE_BACKWARD;
    *gnode = c;
    return CT_OK;
}

static ct_status pass_autodiff(ct_plan *p) {
    ct_graph *g = &p->g;
    if (p->loss == CT_NONE) return CT_OK;
    const ct_node_def *L = &g->nodes[p->loss];
    if (L->ndim != 0 || L->dtype != CT_F32)
        return ct_set_error(p->ctx, CT_E_SHAPE, "compile: the loss '%s' must be an f32 scalar", L->name);
    CT_TRY(ct_input(g, "loss.grad", CT_F32, 0, NULL, &p->seed));
    int n_fwd = g->n;
    ct_node *grads = malloc((size_t)n_fwd * sizeof *grads);
    uint8_t *req = calloc((size_t)n_fwd, 1);
    if (!grads || !req) {
        free(grads);
        free(req);
        return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory in autodiff");
    }
    ct_status s = ct_autodiff(g, p->loss, p->seed, grads, req);
    for (int i = 0; s == CT_OK && i < p->n_params; i++) p->param_grads[i] = grads[p->params[i]];
    free(grads);
    free(req);
    CT_TRY(s);
    uint8_t *claimed = calloc((size_t)g->n + (size_t)p->n_params, 1);
    if (!claimed) return ct_set_error(p->ctx, CT_E_OOM, "compile: out of memory in autodiff");
    for (int i = 0; i < p->n_params && s == CT_OK; i++) {
        if (p->param_grads[i] == CT_NONE) continue;
        s = ensure_exclusive(p, &p->param_grads[i], claimed);
        if (s == CT_OK) claimed[p->param_grads[i]] = 1;
    }
    free(claimed);
    return s;
}

/* ---- pass: liveness (dead-node elimination) ----------------------------------- */

static ct_status pass_liveness(ct_plan *p) {
    ct_graph *g = &p->g;
    ct_plan_node *pn = p->pn;
    if (p->loss != CT_NONE) pn[p->loss].live = 1;
    for (int i = 0; i < p->n_outputs; i++) pn[p->outputs[i]].live = 1;
    for (int i = 0; i < p->n_params; i++) {
        pn[p->params[i]].live = 1;
        if (p->param_grads[i] != CT_NONE) pn[p->param_grads[i]].live = 1;
    }
    for (int i = g->n - 1; i >= 0; i--) {
        const ct_node_def *d = &g->nodes[i];
        if (d->op == CT_OP_INPUT || d->op == CT_OP_BUFFER) pn[i].live = 1; /* always addressable */
        if (!pn[i].live) continue;
        for (int j = 0; j < d->n_in; j++) pn[d->in[j]].live = 1;
    }
    return CT_OK;
}

/* ---- pass: kernel selection ---------------------------------------------------------- */

static int slot_allowed(const ct_context *ctx, int slot) {
    switch (slot) {
    case CT_KERNEL_ONEDNN: return ct_context_use_onednn(ctx);
    case CT_KERNEL_AVX512: return ct_context_isa(ctx) >= CT_ISA_AVX512;
    case CT_KERNEL_AVX2: return ct_context_isa(ctx) >= CT_ISA_AVX2;
    default: return 1;
    }
}

static const int k_slot_order[] = {CT_KERNEL_ONEDNN, CT_KERNEL_AVX512, CT_KERNEL_AVX2, CT_KERNEL_REF};
_Static_assert(sizeof k_slot_order / sizeof k_slot_order[0] == CT_KERNEL_SLOTS, "every kernel slot has a place in the order");

/* Picks the best allowed kernel for node i strictly after `after` in the
 * preference order (-1: from the top). Returns 0 when none is left. */
static int pick_kernel(ct_plan *p, int i, int after) {
    const ct_op_info *info = ct_op_table(p->g.nodes[i].op);
    int start = 0;
    if (after >= 0)
        for (int k = 0; k < CT_KERNEL_SLOTS; k++)
            if (k_slot_order[k] == after) start = k + 1;
    for (int k = start; k < CT_KERNEL_SLOTS; k++) {
        int s = k_slot_order[k];
        if (info->kernel[s] && slot_allowed(p->ctx, s)) {
            p->pn[i].slot = s;
            p->pn[i].kernel = info->kernel[s];
            return 1;
        }
    }
    return 0;
}

/* Mixed precision: a kernel without low-precision I/O reads an FP32 copy of
 * a BF16/FP16 input j, unless it reads only that input's saved state. */
static int copies_input(const ct_op_info *info, int j) {
    return !info->lowp_native && !(info->state_inputs & (1u << j));
}

/* Bytes of the FP32 copies node d needs when its kernel gets FP32 views of
 * its low-precision I/O; *low: whether it has any. */
static size_t cvt_bytes_of(const ct_graph *g, const ct_node_def *d, int *low) {
    const ct_op_info *info = ct_op_table(d->op);
    size_t cvt = 0;
    *low = 0;
    if (info->lowp_native) return 0;
    if (ct_dtype_is_low(d->dtype)) {
        *low = 1;
        cvt += ct_align_up((size_t)ct_node_numel(d) * sizeof(float), CT_ALIGN);
    }
    for (int j = 0; j < d->n_in; j++) {
        const ct_node_def *in = &g->nodes[d->in[j]];
        if (!ct_dtype_is_low(in->dtype)) continue;
        *low = 1;
        if (copies_input(info, j)) cvt += ct_align_up((size_t)ct_node_numel(in) * sizeof(float), CT_ALIGN);
    }
    return cvt;
}

/* Node i can run on oneDNN's BF16 primitives: its op's oneDNN kernel reads
 * BF16 (ct_op_info.onednn_bf16), that kernel was picked, every data input
 * is BF16 and the output BF16 or FP32 (a weight gradient). */
static int bf16_native_ok(const ct_plan *p, int i) {
    const ct_node_def *d = &p->g.nodes[i];
    const ct_op_info *info = ct_op_table(d->op);
    if (!info->onednn_bf16 || p->pn[i].slot != CT_KERNEL_ONEDNN) return 0;
    if (d->dtype != CT_BF16 && d->dtype != CT_F32) return 0;
    for (int j = 0; j < d->n_in; j++) { /* integer inputs (a key mask) are never converted */
        ct_dtype dt = p->g.nodes[d->in[j]].dtype;
        if (!(info->state_inputs & (1u << j)) && ct_dtype_is_float(dt) && dt != CT_BF16) return 0;
    }
    return 1;
}

/* Node i's AVX2 / AVX-512 kernel reads and writes BF16 / FP16 itself
 * (ct_op_info.simd_lowp, simd/simd_lowp.h): that kernel was picked and its
 * low-precision I/O is one 16-bit dtype (a plan's autocast makes only one). */
static int lowp_simd_ok(const ct_plan *p, int i) {
    const ct_node_def *d = &p->g.nodes[i];
    const ct_op_info *info = ct_op_table(d->op);
    if (!info->simd_lowp || (p->pn[i].slot != CT_KERNEL_AVX2 && p->pn[i].slot != CT_KERNEL_AVX512)) return 0;
    ct_dtype low = ct_dtype_is_low(d->dtype) ? d->dtype : CT_F32;
    for (int j = 0; j < d->n_in; j++) {
        ct_dtype dt = p->g.nodes[d->in[j]].dtype;
        if ((info->state_inputs & (1u << j)) || !ct_dtype_is_low(dt)) continue;
        if (low != CT_F32 && dt != low) return 0;
        low = dt;
    }
    return 1;
}

static ct_status pass_select_kernels(ct_plan *p) {
    ct_graph *g = &p->g;
    /* BF16 plans: do matmul/linear/conv run natively in this context?
     * BF16 and FP16 plans: do the SIMD kernels read the 16-bit dtype (on any
     * CPU, unless CT_BF16_NATIVE=0, which turns both off)? */
    int bf16_native = 0, lowp_simd = 0;
    if (p->precision == CT_PRECISION_BF16 || p->precision == CT_PRECISION_BF16_PURE)
        CT_TRY(ct_context_lowp_native(p->ctx, CT_BF16, &bf16_native, NULL, 0)); /* also checks CT_BF16_NATIVE */
    if (p->precision != CT_PRECISION_FP32) {
        const char *env = getenv("CT_BF16_NATIVE");
        lowp_simd = !(env && !strcmp(env, "0"));
    }
    for (int i = 0; i < g->n; i++) {
        ct_op op = g->nodes[i].op;
        p->pn[i].slot = -1;
        if (!p->pn[i].live || op == CT_OP_INPUT || op == CT_OP_PARAM || op == CT_OP_BUFFER || op == CT_OP_RESHAPE)
            continue;
        if (!pick_kernel(p, i, -1))
            return ct_set_error(p->ctx, CT_E_UNSUPPORTED, "compile: no kernel for op '%s' (node '%s')",
                                ct_op_table(op)->name, g->nodes[i].name);
        const ct_op_info *info = ct_op_table(op);
        const ct_node_def *d = &g->nodes[i];
        p->pn[i].aux_bytes = info->aux_bytes ? info->aux_bytes(g, d) : 0;
        p->pn[i].ws_bytes = info->ws_bytes ? info->ws_bytes(g, d) : 0;
        if (p->pn[i].ws_bytes > p->ws_bytes) p->ws_bytes = p->pn[i].ws_bytes;
        /* kernels without low-precision I/O get FP32 views and copies (see run_node) */
        int low;
        size_t cvt = cvt_bytes_of(g, d, &low);
        /* a oneDNN kernel only for native BF16 I/O: the next kernel unless this node runs so */
        if (info->onednn_lowp_only && p->pn[i].slot == CT_KERNEL_ONEDNN && !(low && bf16_native && bf16_native_ok(p, i)) &&
            !pick_kernel(p, i, CT_KERNEL_ONEDNN))
            return ct_set_error(p->ctx, CT_E_UNSUPPORTED, "compile: no kernel for op '%s' (node '%s')",
                                ct_op_table(op)->name, g->nodes[i].name);
        p->pn[i].lowp_native =
            (uint8_t)(low && ((bf16_native && bf16_native_ok(p, i)) || (lowp_simd && lowp_simd_ok(p, i))));
        if (p->pn[i].lowp_native) { /* the kernel reads and writes BF16 / FP16 itself */
            cvt = 0;
            low = 0;
        }
        p->pn[i].lowp_io = (uint8_t)low;
        p->pn[i].cvt_bytes = cvt;
        if (cvt > p->cvt_bytes) p->cvt_bytes = cvt;
    }
    return CT_OK;
}

/* ---- pass: allocation and parameter initialization ------------------------------------- */

/* Counter-based: element i's value depends only on (seed, stream, i), so the
 * loops run threaded with the same result (GPT-2's 124M values: seconds
 * single-threaded). */
static void init_values(float *x, int64_t numel, ct_init init, int64_t fan_in, float std, uint64_t seed,
                        uint64_t stream, int nth) {
    nth = numel >= (1 << 16) ? nth : 1;
    switch (init) {
    case CT_INIT_ZEROS: memset(x, 0, (size_t)numel * sizeof *x); break;
    case CT_INIT_ONES: for (int64_t i = 0; i < numel; i++) x[i] = 1.0f; break;
    case CT_INIT_KAIMING_UNIFORM: {
        float b = 1.0f / sqrtf((float)(fan_in > 0 ? fan_in : 1));
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
        for (int64_t i = 0; i < numel; i++) x[i] = (2.0f * ct_rand_uniform(seed, stream, (uint64_t)i) - 1.0f) * b;
        break;
    }
    case CT_INIT_NORMAL:
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
        for (int64_t i = 0; i < numel; i++) {
            float u1 = ct_rand_uniform(seed, stream, 2 * (uint64_t)i), u2 = ct_rand_uniform(seed, stream, 2 * (uint64_t)i + 1);
            x[i] = std * sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.2831853f * u2);
        }
        break;
    }
}

static ct_status pass_allocate(ct_plan *p) {
    ct_graph *g = &p->g;
    ct_plan_node *pn = p->pn;
    size_t pb = p->n_param_floats * sizeof(float), bb = p->n_buffer_floats * sizeof(float);
    CT_TRY(ct_alloc(p->ctx, pb, (void **)&p->param_arena));
    CT_TRY(ct_alloc(p->ctx, pb, (void **)&p->grad_arena));
    CT_TRY(ct_alloc(p->ctx, bb, (void **)&p->buffer_arena));
    CT_TRY(ct_alloc(p->ctx, p->act_bytes, (void **)&p->act_arena));
    if (p->wcast_bytes) {
        CT_TRY(ct_alloc(p->ctx, p->wcast_bytes, (void **)&p->wcast_arena));
        memset(p->wcast_arena, 0, p->wcast_bytes);
    }
    CT_TRY(ct_alloc(p->ctx, p->ws_bytes, &p->ws));
    memset(p->param_arena, 0, pb);
    memset(p->grad_arena, 0, pb);
    memset(p->buffer_arena, 0, bb);
    memset(p->act_arena, 0, p->act_bytes);
    for (int i = 0; i < g->n; i++) {
        switch (pn[i].arena) {
        case CT_ARENA_PARAM: pn[i].data = (char *)p->param_arena + pn[i].offset; break;
        case CT_ARENA_GRAD: pn[i].data = (char *)p->grad_arena + pn[i].offset; break;
        case CT_ARENA_BUFFER: pn[i].data = (char *)p->buffer_arena + pn[i].offset; break;
        case CT_ARENA_ACT: pn[i].data = p->act_arena + pn[i].offset; break;
        case CT_ARENA_WCAST: pn[i].data = (char *)p->wcast_arena + pn[i].offset; break;
        default: break;
        }
        if (pn[i].aux_bytes) pn[i].aux = p->act_arena + pn[i].aux_offset;
    }
    for (int i = 0; i < g->n; i++)
        if (pn[i].arena == CT_ARENA_ALIAS) pn[i].data = pn[pn[i].root].data;
    uint64_t seed = ct_context_seed(p->ctx);
    const int nth = ct_context_num_threads(p->ctx);
    for (int i = 0; i < p->n_params; i++) {
        const ct_node_def *d = &g->nodes[p->params[i]];
        init_values(pn[p->params[i]].data, ct_node_numel(d), d->init, d->fan_in, d->fa[0] > 0 ? d->fa[0] : 0.02f, seed,
                    0x5EED000000ull + (uint64_t)i, nth);
    }
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == CT_OP_BUFFER)
            init_values(pn[i].data, ct_node_numel(&g->nodes[i]), g->nodes[i].init, 0, 0.02f, seed, 0, nth);
    return CT_OK;
}

/* The ordered list of graph passes. */
static const struct {
    const char *name;
    ct_pass_fn fn;
} k_passes[] = {
    {"autocast", ct_pass_autocast},
    {"autodiff", pass_autodiff},
    {"recompute", ct_pass_recompute},
    {"fusion", ct_pass_fusion},
    {"liveness", pass_liveness},
    {"select_kernels", pass_select_kernels},
    {"plan_memory", ct_pass_plan_memory},
    {"allocate", pass_allocate},
};

void ct_compile_opts_default(ct_compile_opts *o) {
    o->precision = CT_PRECISION_FP32;
    o->keep_fp32 = NULL;
    o->build_backward = 1;
    o->init_params = 1;
    o->accumulate_grads = 0;
    o->recompute_every = 0;
    o->recompute_ops = 0;
    o->plan_only = 0;
    o->fusion_level = 0; /* the library's plans stay as they were; recipes default to 1 */
    o->fusion_rules = NULL;
    o->memory_opt = 1;
}

ct_status ct_compile(ct_graph *src, ct_node loss, int n_outputs, const ct_node *outputs, const ct_compile_opts *opts,
                     ct_plan **out) {
    if (!src || !out || n_outputs < 0 || (n_outputs && !outputs)) return CT_E_INVALID_ARG;
    *out = NULL;
    ct_context *ctx = src->ctx;
    ct_compile_opts dflt;
    if (!opts) {
        ct_compile_opts_default(&dflt);
        opts = &dflt;
    }
    if (loss != CT_NONE) CT_TRY(ct_graph_check_node(src, loss, "compile"));
    for (int i = 0; i < n_outputs; i++) CT_TRY(ct_graph_check_node(src, outputs[i], "compile"));
    ct_plan *p = calloc(1, sizeof *p);
    if (!p) return ct_set_error(ctx, CT_E_OOM, "compile: out of memory");
    p->ctx = ctx;
    p->g.ctx = ctx;
    p->loss = opts->build_backward ? loss : CT_NONE;
    p->seed = CT_NONE;
    p->loss_scale = 1.0f;
    p->accumulate_grads = opts->accumulate_grads != 0;
    p->recompute_every = opts->recompute_every;
    p->recompute_ops = opts->recompute_ops;
    p->plan_only = opts->plan_only;
    p->precision = opts->precision;
    p->fusion_level = opts->fusion_level;
    p->fusion_rules = opts->fusion_rules;
    p->memory_opt = opts->memory_opt;
    p->n_user = src->n;
    ct_status s = CT_OK;
    if ((unsigned)opts->precision >= CT_PRECISION_COUNT)
        s = ct_set_error(ctx, CT_E_INVALID_ARG, "compile: precision %d is not a ct_precision", (int)opts->precision);
    if (s == CT_OK && (opts->fusion_level < 0 || opts->fusion_level > 2))
        s = ct_set_error(ctx, CT_E_INVALID_ARG, "compile: fusion_level %d must be 0, 1 or 2", opts->fusion_level);
    if (s == CT_OK && opts->keep_fp32 && opts->keep_fp32[0]) {
        p->keep_fp32 = malloc(strlen(opts->keep_fp32) + 1);
        if (!p->keep_fp32) s = ct_set_error(ctx, CT_E_OOM, "compile: out of memory");
        else strcpy(p->keep_fp32, opts->keep_fp32);
    }
    /* snapshot the graph */
    if (s == CT_OK) {
        p->g.nodes = malloc(sizeof(ct_node_def) * (size_t)(src->n ? src->n : 1));
        p->outputs = malloc(sizeof(ct_node) * (size_t)(n_outputs + 1));
        if (!p->g.nodes || !p->outputs) s = ct_set_error(ctx, CT_E_OOM, "compile: out of memory");
    }
    if (s == CT_OK) {
        memcpy(p->g.nodes, src->nodes, sizeof(ct_node_def) * (size_t)src->n);
        p->g.n = p->g.cap = src->n;
        p->n_fwd = src->n;
        p->n_outputs = n_outputs;
        if (n_outputs) memcpy(p->outputs, outputs, sizeof(ct_node) * (size_t)n_outputs);
        if (loss != CT_NONE) p->outputs[p->n_outputs++] = loss;
        for (int i = 0; i < src->n; i++) p->n_params += src->nodes[i].op == CT_OP_PARAM;
        p->params = malloc(sizeof(ct_node) * (size_t)(p->n_params + 1));
        p->param_grads = malloc(sizeof(ct_node) * (size_t)(p->n_params + 1));
        p->param_off = malloc(sizeof(size_t) * (size_t)(p->n_params + 1));
        if (!p->params || !p->param_grads || !p->param_off) s = ct_set_error(ctx, CT_E_OOM, "compile: out of memory");
    }
    if (s == CT_OK) {
        int k = 0;
        for (int i = 0; i < src->n; i++)
            if (src->nodes[i].op == CT_OP_PARAM) {
                p->params[k] = i;
                p->param_grads[k++] = CT_NONE;
            }
    }
    for (size_t i = 0; s == CT_OK && i < sizeof k_passes / sizeof k_passes[0]; i++) {
        if (k_passes[i].fn == pass_liveness) { /* node count is final after autodiff */
            p->pn = calloc((size_t)(p->g.n ? p->g.n : 1), sizeof *p->pn); /* calloc(0) may be NULL */
            if (!p->pn) s = ct_set_error(ctx, CT_E_OOM, "compile: out of memory");
        }
        if (p->plan_only && k_passes[i].fn == pass_allocate) break;
        if (s == CT_OK) s = k_passes[i].fn(p);
    }
    p->fusion_rules = NULL; /* the caller's: read during compile only; the copy serves ct_plan_add_shape */
    if (s == CT_OK && opts->fusion_rules && !(p->rules_copy = ct_fusion_rules_clone(opts->fusion_rules)))
        s = ct_set_error(p->ctx, CT_E_OOM, "out of memory copying the fusion rules");
    if (s == CT_OK && !opts->init_params && p->n_param_floats) /* no params: no arena */
        memset(p->param_arena, 0, p->n_param_floats * sizeof(float));
    if (s != CT_OK) {
        ct_plan_free(p);
        return s;
    }
    *out = p;
    return CT_OK;
}

void ct_plan_free(ct_plan *p) {
    if (!p) return;
    for (int v = 0; v < p->n_variants; v++) ct_plan_free(p->variants[v]);
    free(p->variants);
    ct_fusion_rules_free(p->rules_copy);
    if (p->pn) {
        for (int i = 0; i < p->g.n; i++) {
            const ct_op_info *info = ct_op_table(p->g.nodes[i].op);
            if (p->pn[i].cache && info->cache_free) info->cache_free(p->pn[i].cache);
        }
    }
    ct_free(p->ctx, p->param_arena);
    ct_free(p->ctx, p->grad_arena);
    ct_free(p->ctx, p->buffer_arena);
    ct_free(p->ctx, p->act_arena);
    ct_free(p->ctx, p->wcast_arena);
    ct_free(p->ctx, p->ws);
    ct_free(p->ctx, p->cvt_spill);
    ct_scratch_release(p->ctx, &p->scratch);
    free(p->keep_fp32);
    free(p->user_map);
    free(p->pn);
    free(p->g.nodes);
    free(p->outputs);
    free(p->params);
    free(p->param_grads);
    free(p->param_off);
    free(p->fused_group);
    free(p->groups);
    free(p->rule_hits);
    free(p);
}

/* ---- executor -------------------------------------------------------------------------------- */

/* The graph whose shapes the executor runs: the selected variant's
 * (ct_plan_set_shape) or the compiled one. */
static const ct_graph *run_graph(const ct_plan *p) { return p->variant ? &p->variants[p->variant - 1]->g : &p->g; }

/* Node n's value in this plan's memory with the selected shapes: a variant's
 * smaller tensor is the contiguous row-major prefix of the buffer planned
 * for the maximum. */
static ct_tensor node_tensor(const ct_plan *p, ct_node n) {
    const ct_node_def *d = &run_graph(p)->nodes[n];
    return ct_tensor_make(p->pn[n].data, d->dtype, d->ndim, d->shape);
}

/* Node i's kernel cache slot for the selected shapes: oneDNN primitives are
 * built for one shape, so every variant has its own. */
static void **cache_slot(ct_plan *p, int i) { return p->variant ? &p->variants[p->variant - 1]->pn[i].cache : &p->pn[i].cache; }

/* Node i changes kernel (a fallback): the caches of every shape belong to
 * the old kernel. */
static void drop_caches(ct_plan *p, int i) {
    const ct_op_info *info = ct_op_table(p->g.nodes[i].op);
    for (int v = -1; v < p->n_variants; v++) {
        ct_plan_node *pn = v < 0 ? &p->pn[i] : &p->variants[v]->pn[i];
        if (pn->cache && info->cache_free) info->cache_free(pn->cache);
        pn->cache = NULL;
    }
}

/* Anomaly mode: the first node whose f32 output holds NaN/inf is an error
 * that names the op and gives statistics of its inputs. */
static int64_t first_nonfinite(const ct_tensor *t) {
    int64_t n = ct_tensor_numel(t);
    if (ct_dtype_is_low(t->dtype)) { /* all-ones exponent: inf or NaN */
        const uint16_t *h = t->data, e = t->dtype == CT_BF16 ? 0x7f80 : 0x7c00;
        for (int64_t j = 0; j < n; j++)
            if ((h[j] & e) == e) return j;
        return -1;
    }
    if (t->dtype != CT_F32) return -1;
    const float *x = t->data;
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(x[j])) return j;
    return -1;
}

static float element_f32(const ct_tensor *t, int64_t j) {
    switch (t->dtype) {
    case CT_BF16: return ct_bf16_to_f32(((const uint16_t *)t->data)[j]);
    case CT_F16: return ct_f16_to_f32(((const uint16_t *)t->data)[j]);
    default: return ((const float *)t->data)[j];
    }
}

static ct_status check_anomaly(ct_plan *p, int i) {
    const ct_node_def *d = &run_graph(p)->nodes[i];
    ct_tensor out = node_tensor(p, i);
    int64_t bad = first_nonfinite(&out);
    if (bad < 0) return CT_OK;
    char msg[768], shape[96];
    float v = element_f32(&out, bad);
    int o = snprintf(msg, sizeof msg, "anomaly: op '%s' (node '%s', %s) produced %s at element %lld of %s; inputs:",
                     ct_op_table(d->op)->name, d->name, (d->flags & CT_NODE_BACKWARD) ? "backward" : "forward",
                     isnan(v) ? "NaN" : "inf", (long long)bad, ct_shape_str(d->ndim, d->shape, shape, sizeof shape));
    for (int j = 0; j < d->n_in && o > 0 && (size_t)o < sizeof msg; j++) {
        ct_tensor t = node_tensor(p, d->in[j]);
        const ct_node_def *in = &run_graph(p)->nodes[d->in[j]];
        if (t.dtype != CT_F32) {
            o += snprintf(msg + o, sizeof msg - (size_t)o, " '%s' %s;", in->name, ct_dtype_name(t.dtype));
            continue;
        }
        const float *x = t.data;
        int64_t n = ct_tensor_numel(&t), nonfinite = 0, zeros = 0;
        double mn = INFINITY, mx = -INFINITY, sum = 0;
        for (int64_t e = 0; e < n; e++) {
            if (!isfinite(x[e])) {
                nonfinite++;
                continue;
            }
            mn = x[e] < mn ? x[e] : mn;
            mx = x[e] > mx ? x[e] : mx;
            sum += x[e];
            zeros += x[e] == 0.0f;
        }
        o += snprintf(msg + o, sizeof msg - (size_t)o, " '%s' %s min %.4g max %.4g mean %.4g, %lld non-finite, %lld zeros;",
                      in->name, ct_shape_str(in->ndim, in->shape, shape, sizeof shape), mn, mx,
                      n > nonfinite ? sum / (double)(n - nonfinite) : 0.0, (long long)nonfinite, (long long)zeros);
    }
    return ct_set_error(p->ctx, CT_E_NONFINITE, "%s turn anomaly mode off once fixed (it checks every output)", msg);
}

static const char *kernel_desc(const ct_plan *p, int i) {
    const ct_plan_node *pn = &p->pn[i];
    const int f16 = p->precision == CT_PRECISION_FP16 || p->precision == CT_PRECISION_FP16_PURE;
    return ct_kernel_slot_desc(pn->slot, pn->lowp_native ? (f16 ? CT_LOWP_NATIVE_F16 : CT_LOWP_NATIVE_BF16)
                                         : pn->lowp_io  ? CT_LOWP_COPIED
                                                        : CT_LOWP_NONE);
}

static const char *kernel_impl(const ct_plan *p, int i) {
    const ct_plan_node *pn = &p->pn[i];
    const char *impl = pn->slot == CT_KERNEL_ONEDNN ? ct_onednn_cache_impl(pn->cache) : NULL;
    return impl ? impl : ct_kernel_slot_name(pn->slot);
}

/* Node event for the hook (ct_plan_set_node_hook). */
static void node_event(const ct_plan *p, int i, ct_node_event_kind kind, ct_status s, ct_node_event *ev) {
    const ct_node_def *d = &p->g.nodes[i];
    if (kind == CT_NODE_BEGIN) {
        ev->node = i;
        ev->backward = (d->flags & CT_NODE_BACKWARD) != 0;
        ev->op = ct_op_table(d->op)->name;
        ev->name = d->name;
        ev->dtype = d->dtype;
        ev->ndim = d->ndim;
        ev->shape = d->shape;
        ev->flops = ct_node_flops(run_graph(p), d);
        ev->bytes = ct_node_bytes(run_graph(p), d);
    }
    ev->kind = kind;
    ev->kernel = ct_kernel_slot_name(p->pn[i].slot);
    ev->kernel_desc = kernel_desc(p, i);
    ev->impl = kernel_impl(p, i);
    ev->status = s;
    p->node_hook(p->node_hook_user, ev);
}

/* Points node d's low-precision I/O in k at FP32 views: copies of the inputs
 * it reads in `buf` (sized by cvt_bytes_of), and the output (converted back
 * by run_node). */
static ct_status lowp_to_f32(ct_plan *p, const ct_node_def *d, ct_kargs *k, char *buf) {
    const ct_op_info *info = ct_op_table(d->op);
    ct_status s = CT_OK;
    for (int j = 0; j < d->n_in && s == CT_OK; j++) {
        if (!ct_dtype_is_low(k->in[j].dtype)) continue;
        ct_tensor f = ct_tensor_make(k->in[j].data, CT_F32, k->in[j].ndim, k->in[j].shape);
        if (copies_input(info, j)) { /* state inputs: only aux and shape are read */
            f.data = buf;
            buf += ct_align_up((size_t)ct_tensor_numel(&f) * sizeof(float), CT_ALIGN);
            s = ct_convert(p->ctx, &k->in[j], &f);
        }
        k->in[j] = f;
    }
    if (ct_dtype_is_low(k->out.dtype)) k->out = ct_tensor_make(buf, CT_F32, k->out.ndim, k->out.shape);
    return s;
}

/* oneDNN declined the BF16 primitive of native node i (no BF16 kernel for
 * this ISA or configuration): from now on the node gets FP32 copies, kept in
 * the plan's spill buffer (allocated here, on the node's first run, grown to
 * the largest such node; the activation arena has no room planned for
 * them). k is reset to the node's own tensors and then pointed at copies. */
static ct_status lowp_fallback(ct_plan *p, int i, const ct_kargs *raw, ct_kargs *k) {
    const ct_node_def *d = &p->g.nodes[i]; /* the maximum: the spill fits every shape */
    ct_plan_node *pn = &p->pn[i];
    const ct_op_info *info = ct_op_table(d->op);
    drop_caches(p, i);
    int low;
    size_t need = cvt_bytes_of(&p->g, d, &low);
    if (need > p->cvt_spill_bytes) {
        ct_free(p->ctx, p->cvt_spill);
        p->cvt_spill = NULL;
        p->cvt_spill_bytes = 0;
        ct_status s = ct_alloc(p->ctx, need, &p->cvt_spill);
        if (s != CT_OK) {
            char prefix[160];
            snprintf(prefix, sizeof prefix, "op '%s' (node '%s'): FP32 copies after oneDNN declined BF16: ",
                     info->name, d->name);
            return ct_wrap_error(p->ctx, s, prefix, "");
        }
        p->cvt_spill_bytes = need;
    }
    pn->lowp_native = 0;
    pn->lowp_io = (uint8_t)low;
    pn->cvt_spill = 1;
    pn->cvt_bytes = need;
    ct_context_clear_error(p->ctx);
    *k = *raw;
    return lowp_to_f32(p, k->node, k, p->cvt_spill);
}

static ct_status run_node(ct_plan *p, int i, int training) {
    /* A shape variant's node: its shapes and shape-derived attributes (a
     * mean's 1/n, a slice's end), the plan's flags (running stats switch). */
    ct_node_def vd;
    const ct_node_def *d = &p->g.nodes[i];
    if (p->variant) {
        vd = run_graph(p)->nodes[i];
        vd.flags = d->flags;
        d = &vd;
    }
    ct_plan_node *pn = &p->pn[i];
    ct_node_event ev;
    if (p->node_hook) node_event(p, i, CT_NODE_BEGIN, CT_OK, &ev);
    ct_kargs k;
    k.ctx = p->ctx;
    k.node = d;
    k.op_name = ct_op_table(d->op)->name;
    k.id = i;
    k.out = node_tensor(p, i);
    for (int j = 0; j < d->n_in; j++) {
        k.in[j] = node_tensor(p, d->in[j]);
        k.in_aux[j] = p->pn[d->in[j]].aux;
    }
    k.aux = pn->aux;
    k.ws = p->ws;
    k.ws_bytes = p->ws_bytes;
    k.cache = cache_slot(p, i);
    k.scratch = &p->scratch;
    k.training = training;
    k.step = p->step;
    k.elem0 = 0;
    k.seed = ct_context_seed(p->ctx);
    k.nthreads = ct_context_num_threads(p->ctx);
    ct_kargs raw = k; /* the node's own tensors */
    ct_status s = CT_OK;
    if (pn->lowp_io) /* FP32 views and copies of low-precision I/O (select_kernels sized them) */
        s = lowp_to_f32(p, d, &k, pn->cvt_spill ? (char *)p->cvt_spill : p->act_arena + pn->cvt_offset);
    if (s == CT_OK) s = pn->kernel(&k);
    /* a oneDNN kernel only for native BF16 declined: the SIMD kernels read BF16 too */
    if (s == CT_E_UNSUPPORTED && pn->lowp_native && pn->slot == CT_KERNEL_ONEDNN &&
        ct_op_table(d->op)->onednn_lowp_only && ct_op_table(d->op)->simd_lowp) {
        drop_caches(p, i);
        if (pick_kernel(p, i, CT_KERNEL_ONEDNN) && pn->slot != CT_KERNEL_REF) {
            ct_context_clear_error(p->ctx);
            s = pn->kernel(&k);
        }
    }
    /* oneDNN has no BF16 primitive for a native node: FP32 copies, same kernel first */
    if (s == CT_E_UNSUPPORTED && pn->lowp_native) {
        s = lowp_fallback(p, i, &raw, &k);
        if (s == CT_OK) s = pn->kernel(&k);
    }
    /* A fast kernel may decline a configuration it does not cover: fall back
     * to the next kernel in preference order, once, for good. */
    while (s == CT_E_UNSUPPORTED && pn->slot != CT_KERNEL_REF) {
        drop_caches(p, i);
        if (!pick_kernel(p, i, pn->slot)) break;
        ct_context_clear_error(p->ctx);
        s = pn->kernel(&k);
    }
    if (s == CT_OK && k.out.data != raw.out.data) s = ct_convert(p->ctx, &k.out, &raw.out);
    if (s != CT_OK && !ct_context_last_error(p->ctx)[0])
        ct_set_error(p->ctx, s, "op '%s' (node '%s') failed", ct_op_table(d->op)->name, d->name);
    if (p->node_hook) node_event(p, i, CT_NODE_END, s, &ev);
    if (s == CT_OK && p->anomaly) s = check_anomaly(p, i);
    return s;
}

static int is_leaf(ct_op op) { return op == CT_OP_INPUT || op == CT_OP_PARAM || op == CT_OP_BUFFER || op == CT_OP_RESHAPE; }

ct_status ct_plan_forward(ct_plan *p, int training) {
    if (!p) return CT_E_INVALID_ARG;
    if (p->plan_only) return ct_set_error(p->ctx, CT_E_STATE, "this plan was compiled with plan_only: it has no memory to run in");
    const int skip_wcast = p->wcast_fresh; /* the weight copies already hold the parameters' casts */
    for (int i = 0; i < p->g.n; i++) {
        const ct_node_def *d = &p->g.nodes[i];
        if (!p->pn[i].live || (d->flags & CT_NODE_BACKWARD) || is_leaf(d->op)) continue;
        if (skip_wcast && p->pn[i].arena == CT_ARENA_WCAST) continue;
        CT_TRY(run_node(p, i, training));
    }
    ct_plan_weight_copies_written(p); /* whether they ran now or were current */
    return CT_OK;
}

void ct_plan_params_changed(ct_plan *p) {
    if (p) p->wcast_fresh = 0;
}

/* Internal (optim.c): the weight-copy arena (NULL: none) and its dtype; the
 * caller writes the casts of the whole parameter arena, then marks them
 * fresh with ct_plan_weight_copies_written. */
uint16_t *ct_plan_weight_copies(ct_plan *p, ct_dtype *dtype) {
    if (dtype) *dtype = p->wcast_dtype;
    return p->wcast_bytes ? p->wcast_arena : NULL;
}

void ct_plan_weight_copies_written(ct_plan *p) { p->wcast_fresh = p->wcast_bytes != 0; }

/* accumulate_grads: grad arena slice of param pi += node i's output (the
 * gradient of this micro-batch). Elementwise, so independent of threads. */
static void accumulate_grad(ct_plan *p, int i, int pi) {
    float *dst = p->grad_arena + p->param_off[pi];
    const float *src = p->pn[i].data;
    int64_t n = ct_node_numel(&p->g.nodes[i]);
    int nth = n >= 65536 ? ct_context_num_threads(p->ctx) : 1;
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
    for (int64_t j = 0; j < n; j++) dst[j] += src[j];
}

ct_status ct_plan_backward(ct_plan *p) {
    if (!p) return CT_E_INVALID_ARG;
    if (p->plan_only) return ct_set_error(p->ctx, CT_E_STATE, "this plan was compiled with plan_only: it has no memory to run in");
    if (p->seed == CT_NONE)
        return ct_set_error(p->ctx, CT_E_STATE, "backward: this plan was compiled without a loss (forward only)");
    *(float *)p->pn[p->seed].data = p->loss_scale;
    for (int i = p->n_fwd; i < p->g.n; i++) {
        const ct_node_def *d = &p->g.nodes[i];
        if (!p->pn[i].live || !(d->flags & CT_NODE_BACKWARD) || is_leaf(d->op)) continue;
        CT_TRY(run_node(p, i, 1));
        int pi = p->pn[i].grad_of_param;
        if (pi >= 0 && p->accumulate_grads) accumulate_grad(p, i, pi);
        if (pi >= 0 && p->grad_ready) {
            ct_tensor t = node_tensor(p, i);
            if (p->accumulate_grads) t.data = p->grad_arena + p->param_off[pi]; /* the running sum */
            p->grad_ready(p->grad_ready_user, pi, &t);
        }
    }
    return CT_OK;
}

ct_status ct_plan_zero_grads(ct_plan *p) {
    memset(p->grad_arena, 0, p->n_param_floats * sizeof(float));
    return CT_OK;
}

void ct_plan_set_step(ct_plan *p, uint64_t step) { p->step = step; }

void ct_plan_set_update_running_stats(ct_plan *p, int on) {
    if (!p) return;
    for (int i = 0; i < p->g.n; i++) {
        ct_node_def *d = &p->g.nodes[i];
        if (d->op != CT_OP_BATCHNORM && d->op != CT_OP_BN_RELU) continue;
        if (on) d->flags &= ~(uint32_t)CT_NODE_KEEP_STATS;
        else d->flags |= CT_NODE_KEEP_STATS;
    }
}

int ct_plan_update_running_stats(const ct_plan *p) {
    for (int i = 0; p && i < p->g.n; i++)
        if (p->g.nodes[i].op == CT_OP_BATCHNORM || p->g.nodes[i].op == CT_OP_BN_RELU)
            return !(p->g.nodes[i].flags & CT_NODE_KEEP_STATS);
    return 1;
}

void ct_plan_set_anomaly(ct_plan *p, int on) { p->anomaly = on != 0; }

/* ---- dynamic shapes (docs/dynamic-shapes.md) ---------------------------------------------------- */

/* Variant v (a plan_only compile) may run in p's memory: the same nodes
 * (op, inputs, dtype, rank, liveness, storage root), static
 * parameters and buffers, and no node's output, saved state, scratch or
 * FP32 copies larger than p planned. Else CT_E_SHAPE naming the first
 * difference. */
static ct_status check_variant(ct_plan *p, const ct_plan *v) {
    const char *fix = "; build the graph with the same code, changing only batch / sequence sizes, at most the compiled ones";
    if (v->g.n != p->g.n || v->n_fwd != p->n_fwd || v->n_params != p->n_params || v->n_user != p->n_user ||
        v->seed != p->seed || v->loss != p->loss || v->n_outputs != p->n_outputs)
        return ct_set_error(p->ctx, CT_E_SHAPE,
                            "add_shape: the graph compiles to %d nodes (%d forward), the plan has %d (%d forward)%s",
                            v->g.n, v->n_fwd, p->g.n, p->n_fwd, fix);
    for (int i = 0; i < p->n_user; i++)
        if (ct_plan_map(v, i) != ct_plan_map(p, i))
            return ct_set_error(p->ctx, CT_E_SHAPE, "add_shape: node %d maps to plan node %d, not %d%s", i,
                                (int)ct_plan_map(v, i), (int)ct_plan_map(p, i), fix);
    for (int i = 0; i < p->n_params; i++)
        if (v->params[i] != p->params[i] || v->param_grads[i] != p->param_grads[i])
            return ct_set_error(p->ctx, CT_E_SHAPE, "add_shape: parameter %d differs%s", i, fix);
    for (int i = 0; i < p->n_outputs; i++)
        if (v->outputs[i] != p->outputs[i])
            return ct_set_error(p->ctx, CT_E_SHAPE, "add_shape: output %d differs%s", i, fix);
    for (int i = 0; i < p->g.n; i++) {
        const ct_node_def *a = &p->g.nodes[i], *b = &v->g.nodes[i];
        const ct_plan_node *pa = &p->pn[i], *pb = &v->pn[i];
        const char *what = NULL;
        if (a->op != b->op || a->n_in != b->n_in || a->dtype != b->dtype || a->ndim != b->ndim) what = "op, inputs, dtype or rank";
        for (int j = 0; !what && j < a->n_in; j++)
            if (a->in[j] != b->in[j]) what = "inputs";
        /* (not the kernel slot: a fallback may have moved the plan's since; its kernel runs every shape) */
        if (!what && (pa->live != pb->live || pa->root != pb->root || pa->arena != pb->arena))
            what = "liveness or storage";
        if (!what && (a->op == CT_OP_PARAM || a->op == CT_OP_BUFFER) && memcmp(a->shape, b->shape, sizeof a->shape))
            what = "parameter / buffer shape (only activations may change)";
        if (!what && ct_node_numel(b) > ct_node_numel(a)) what = "size (larger than compiled)";
        if (!what && (pb->aux_bytes > pa->aux_bytes || pb->ws_bytes > p->ws_bytes || pb->cvt_bytes > pa->cvt_bytes))
            what = "saved state, scratch or conversion bytes (larger than compiled)";
        if (what) {
            char sa[96], sb[96];
            return ct_set_error(p->ctx, CT_E_SHAPE, "add_shape: node %d '%s' (%s) differs in %s: compiled %s, new %s%s", i,
                                a->name, ct_op_table(a->op)->name, what, ct_shape_str(a->ndim, a->shape, sa, sizeof sa),
                                ct_shape_str(b->ndim, b->shape, sb, sizeof sb), fix);
        }
    }
    return CT_OK;
}

/* Variants equal in every node's shape and attributes. */
static int same_shapes(const ct_plan *a, const ct_plan *b) {
    for (int i = 0; i < a->g.n; i++) {
        const ct_node_def *x = &a->g.nodes[i], *y = &b->g.nodes[i];
        if (memcmp(x->shape, y->shape, sizeof x->shape) || memcmp(x->ia, y->ia, sizeof x->ia) ||
            memcmp(x->fa, y->fa, sizeof x->fa))
            return 0;
    }
    return 1;
}

ct_status ct_plan_add_shape(ct_plan *p, ct_graph *g, ct_node loss, int n_outputs, const ct_node *outputs, int *variant) {
    if (!p || !g || !variant) return CT_E_INVALID_ARG;
    if (p->plan_only) return ct_set_error(p->ctx, CT_E_STATE, "add_shape: this plan was compiled with plan_only");
    ct_compile_opts o;
    ct_compile_opts_default(&o);
    o.precision = p->precision;
    o.keep_fp32 = p->keep_fp32;
    o.build_backward = p->loss != CT_NONE;
    o.accumulate_grads = p->accumulate_grads;
    o.recompute_every = p->recompute_every;
    o.recompute_ops = p->recompute_ops;
    o.fusion_level = p->fusion_level; /* the same fusions, so the same nodes */
    o.fusion_rules = p->rules_copy;
    o.memory_opt = p->memory_opt;
    o.plan_only = 1;
    ct_plan *v = NULL;
    CT_TRY(ct_compile(g, loss, n_outputs, outputs, &o, &v));
    ct_status s = check_variant(p, v);
    for (int k = 0; s == CT_OK && k < p->n_variants; k++)
        if (same_shapes(p->variants[k], v)) { /* registered before: that id */
            ct_plan_free(v);
            *variant = k + 1;
            return CT_OK;
        }
    if (s == CT_OK && same_shapes(p, v)) { /* the compiled shapes */
        ct_plan_free(v);
        *variant = 0;
        return CT_OK;
    }
    ct_plan **nv = s == CT_OK ? realloc(p->variants, sizeof *nv * (size_t)(p->n_variants + 1)) : NULL;
    if (s == CT_OK && !nv) s = ct_set_error(p->ctx, CT_E_OOM, "add_shape: out of memory");
    if (s != CT_OK) {
        ct_plan_free(v);
        return s;
    }
    p->variants = nv;
    p->variants[p->n_variants++] = v;
    *variant = p->n_variants;
    return CT_OK;
}

ct_status ct_plan_set_shape(ct_plan *p, int variant) {
    if (!p) return CT_E_INVALID_ARG;
    if (variant < 0 || variant > p->n_variants)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "set_shape: variant %d is not in [0, %d] (ct_plan_add_shape returns them)",
                            variant, p->n_variants);
    p->variant = variant;
    return CT_OK;
}

int ct_plan_shape(const ct_plan *p) { return p ? p->variant : 0; }

ct_status ct_plan_set_loss_scale(ct_plan *p, float scale) {
    if (!(scale > 0.0f) || !isfinite(scale))
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "loss scale %g must be finite and > 0", (double)scale);
    p->loss_scale = scale;
    return CT_OK;
}

void ct_plan_set_grad_ready(ct_plan *p, ct_grad_ready_fn fn, void *user) {
    p->grad_ready = fn;
    p->grad_ready_user = user;
}

int ct_plan_grad_ready_order(const ct_plan *p, int *order, int cap) {
    int n = 0;
    for (int i = p ? p->n_fwd : 0; p && i < p->g.n; i++) { /* ct_plan_backward's loop */
        const ct_node_def *d = &p->g.nodes[i];
        if (!p->pn[i].live || !(d->flags & CT_NODE_BACKWARD) || is_leaf(d->op) || p->pn[i].grad_of_param < 0) continue;
        if (order && n < cap) order[n] = p->pn[i].grad_of_param;
        n++;
    }
    return n;
}

void ct_plan_set_node_hook(ct_plan *p, ct_node_hook_fn fn, void *user) {
    p->node_hook = fn;
    p->node_hook_user = fn ? user : NULL;
}

/* ---- accessors ---------------------------------------------------------------------------------- */

ct_status ct_plan_tensor(ct_plan *p, ct_node n, ct_tensor *out) {
    if (!p || !out) return CT_E_INVALID_ARG;
    ct_node u = n;
    n = ct_plan_map(p, n);
    if (n < 0)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_tensor: node %d is not in the compiled graph", (int)u);
    if (!p->pn[n].live || !p->pn[n].data)
        return ct_set_error(p->ctx, CT_E_STATE,
                            "plan_tensor: node '%s' is not kept by this plan; pass it in `outputs` to ct_compile",
                            p->g.nodes[n].name);
    *out = node_tensor(p, n);
    if (p->g.nodes[n].op == CT_OP_PARAM) p->wcast_fresh = 0; /* writable: the weight copies may go stale */
    return CT_OK;
}

static int param_index(const ct_plan *p, ct_node n) {
    for (int i = 0; i < p->n_params; i++)
        if (p->params[i] == n) return i;
    return -1;
}

ct_status ct_plan_grad(ct_plan *p, ct_node param, ct_tensor *out) {
    int i = param_index(p, ct_plan_map(p, param));
    if (i < 0) return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_grad: node %d is not a parameter", (int)param);
    const ct_node_def *d = &p->g.nodes[param];
    *out = ct_tensor_make(p->grad_arena + p->param_off[i], CT_F32, d->ndim, d->shape);
    return CT_OK;
}

ct_status ct_plan_loss(ct_plan *p, float *out) {
    if (p->loss == CT_NONE) return ct_set_error(p->ctx, CT_E_STATE, "plan_loss: plan has no loss");
    *out = *(const float *)p->pn[p->loss].data;
    return CT_OK;
}

int ct_plan_num_params(const ct_plan *p) { return p->n_params; }

ct_status ct_plan_param_info(const ct_plan *p, int i, const char **name, ct_tensor *value, ct_tensor *grad) {
    if (i < 0 || i >= p->n_params) return CT_E_INVALID_ARG;
    const ct_node_def *d = &p->g.nodes[p->params[i]];
    if (name) *name = d->name;
    if (value) {
        *value = ct_tensor_make(p->param_arena + p->param_off[i], CT_F32, d->ndim, d->shape);
        ((ct_plan *)p)->wcast_fresh = 0; /* a writable view (the plan itself is never const): copies may go stale */
    }
    if (grad) *grad = ct_tensor_make(p->grad_arena + p->param_off[i], CT_F32, d->ndim, d->shape);
    return CT_OK;
}

/* Buffers are the CT_OP_BUFFER nodes in node order, which is their arena
 * order (the memory pass places them so). */
static ct_node buffer_node(const ct_plan *p, int i) {
    for (int n = 0, k = 0; n < p->g.n; n++)
        if (p->g.nodes[n].op == CT_OP_BUFFER && k++ == i) return n;
    return CT_NONE;
}

int ct_plan_num_buffers(const ct_plan *p) {
    int k = 0;
    for (int n = 0; n < p->g.n; n++) k += p->g.nodes[n].op == CT_OP_BUFFER;
    return k;
}

ct_status ct_plan_buffer_info(const ct_plan *p, int i, const char **name, ct_tensor *value) {
    ct_node n = i >= 0 ? buffer_node(p, i) : CT_NONE;
    if (n == CT_NONE)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_buffer_info: index %d is not in [0, %d)", i,
                            ct_plan_num_buffers(p));
    const ct_node_def *d = &p->g.nodes[n];
    if (name) *name = d->name;
    if (value) *value = ct_tensor_make(p->pn[n].data, CT_F32, d->ndim, d->shape);
    return CT_OK;
}

ct_status ct_plan_find_param(const ct_plan *p, const char *name, int *index) {
    for (int i = 0; name && i < p->n_params; i++)
        if (!strcmp(p->g.nodes[p->params[i]].name, name)) {
            if (index) *index = i;
            return CT_OK;
        }
    return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_find_param: no parameter named '%s' in this plan",
                        name ? name : "(null)");
}

ct_status ct_plan_find_buffer(const ct_plan *p, const char *name, int *index) {
    for (int n = 0, k = 0; name && n < p->g.n; n++) {
        if (p->g.nodes[n].op != CT_OP_BUFFER) continue;
        if (!strcmp(p->g.nodes[n].name, name)) {
            if (index) *index = k;
            return CT_OK;
        }
        k++;
    }
    return ct_set_error(p->ctx, CT_E_INVALID_ARG, "plan_find_buffer: no buffer named '%s' in this plan",
                        name ? name : "(null)");
}

ct_status ct_plan_param_arena(ct_plan *p, float **params, float **grads, size_t *n) {
    if (params) {
        *params = p->param_arena;
        p->wcast_fresh = 0; /* a writable view: the weight copies may go stale */
    }
    if (grads) *grads = p->grad_arena;
    if (n) *n = p->n_param_floats;
    return CT_OK;
}

ct_status ct_plan_buffer_arena(ct_plan *p, float **buffers, size_t *n) {
    if (buffers) *buffers = p->buffer_arena;
    if (n) *n = p->n_buffer_floats;
    return CT_OK;
}

void ct_plan_get_stats(const ct_plan *p, ct_plan_stats *o) {
    _Static_assert(sizeof o->n_backward_by_kernel / sizeof o->n_backward_by_kernel[0] == CT_KERNEL_SLOTS,
                   "one count per kernel slot");
    memset(o, 0, sizeof *o);
    o->param_bytes = o->grad_bytes = p->n_param_floats * sizeof(float);
    o->buffer_bytes = p->n_buffer_floats * sizeof(float);
    o->activation_bytes = p->act_bytes;
    o->workspace_bytes = p->ws_bytes;
    o->cast_bytes = p->cvt_bytes;
    o->n_nodes = p->g.n;
    o->n_params = p->n_params;
    o->activation_bytes_no_reuse = p->act_bytes_no_reuse;
    o->n_fused = p->n_groups;
    o->weight_copy_bytes = p->wcast_bytes;
    for (int i = 0; p->pn && i < p->g.n; i++) {
        /* native: oneDNN runs the node in BF16; attention's SIMD kernels read BF16 too (simd) */
        if (ct_op_table(p->g.nodes[i].op)->onednn_bf16 && p->pn[i].slot == CT_KERNEL_ONEDNN)
            o->n_lowp_native += p->pn[i].lowp_native;
        else o->n_lowp_simd += p->pn[i].lowp_native;
        o->n_lowp_copied += p->pn[i].lowp_io;
        if (i >= p->n_fwd && p->pn[i].slot >= 0 && p->pn[i].slot < CT_KERNEL_SLOTS) o->n_backward_by_kernel[p->pn[i].slot]++;
    }
}

const char *ct_plan_kernel_name(const ct_plan *p, ct_node n) {
    /* a user's node id; without autocast any node id (backward nodes too) */
    n = p->user_map ? ct_plan_map(p, n) : n;
    if (n < 0 || n >= p->g.n || p->pn[n].slot < 0) return "none";
    return ct_kernel_slot_name(p->pn[n].slot);
}

const char *ct_plan_kernel_desc(const ct_plan *p, ct_node n) {
    n = p->user_map ? ct_plan_map(p, n) : n;
    if (n < 0 || n >= p->g.n || p->pn[n].slot < 0) return "none";
    return kernel_desc(p, n);
}

const char *ct_plan_kernel_impl(const ct_plan *p, ct_node n) {
    n = p->user_map ? ct_plan_map(p, n) : n;
    if (n < 0 || n >= p->g.n || p->pn[n].slot < 0) return "none";
    return kernel_impl(p, n);
}

ct_dtype ct_plan_node_dtype(const ct_plan *p, ct_node n) {
    n = ct_plan_map(p, n);
    return n < 0 ? CT_DTYPE_COUNT : p->g.nodes[n].dtype;
}

int ct_plan_num_casts(const ct_plan *p) { return p->n_casts; }

ct_context *ct_plan_context(const ct_plan *p) { return p->ctx; }
