/* src/graph/executor.c - the executor: runs a compiled plan's forward and
 * backward nodes (run_node: kernel arguments, FP32 copies of low-precision
 * I/O, fallbacks when a kernel declines, anomaly checks), accumulates and
 * hands out parameter gradients, and holds the run-time settings and hooks
 * (step, loss scale, running statistics, anomaly mode, grad-ready and
 * per-node hooks). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctrain/convert.h"
#include "plan.h"

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
    const ct_node_def *d = &ct_plan_run_graph(p)->nodes[i];
    ct_tensor out = ct_plan_node_tensor(p, i);
    int64_t bad = first_nonfinite(&out);
    if (bad < 0) return CT_OK;
    char msg[768], shape[96];
    float v = element_f32(&out, bad);
    int o = snprintf(msg, sizeof msg, "anomaly: op '%s' (node '%s', %s) produced %s at element %lld of %s; inputs:",
                     ct_op_table(d->op)->name, d->name, (d->flags & CT_NODE_BACKWARD) ? "backward" : "forward",
                     isnan(v) ? "NaN" : "inf", (long long)bad, ct_shape_str(d->ndim, d->shape, shape, sizeof shape));
    for (int j = 0; j < d->n_in && o > 0 && (size_t)o < sizeof msg; j++) {
        ct_tensor t = ct_plan_node_tensor(p, d->in[j]);
        const ct_node_def *in = &ct_plan_run_graph(p)->nodes[d->in[j]];
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
        ev->flops = ct_node_flops(ct_plan_run_graph(p), d);
        ev->bytes = ct_node_bytes(ct_plan_run_graph(p), d);
    }
    ev->kind = kind;
    ev->kernel = ct_kernel_slot_name(p->pn[i].slot);
    ev->kernel_desc = ct_node_kernel_desc(p, i);
    ev->impl = ct_node_kernel_impl(p, i);
    ev->status = s;
    p->node_hook(p->node_hook_user, ev);
}

/* Points node d's low-precision I/O in k at FP32 views: copies of the inputs
 * it reads in `buf` (sized by ct_lowp_copy_bytes), and the output (converted back
 * by run_node). */
static ct_status lowp_to_f32(ct_plan *p, const ct_node_def *d, ct_kargs *k, char *buf) {
    const ct_op_info *info = ct_op_table(d->op);
    ct_status s = CT_OK;
    for (int j = 0; j < d->n_in && s == CT_OK; j++) {
        if (!ct_dtype_is_low(k->in[j].dtype)) continue;
        ct_tensor f = ct_tensor_make(k->in[j].data, CT_F32, k->in[j].ndim, k->in[j].shape);
        if (ct_lowp_copies_input(info, j)) { /* state inputs: only aux and shape are read */
            f.data = buf;
            buf += ct_align_up((size_t)ct_tensor_numel(&f) * sizeof(float), CT_ALIGN);
            if (j != info->writes_in - 1) s = ct_convert(p->ctx, &k->in[j], &f); /* written: converted back after */
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
    size_t need = ct_lowp_copy_bytes(&p->g, d, &low);
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

/* Dropout's RNG counter offset of node d when the plan's batch row 0 is
 * global sample first_sample (ct_plan_set_sample_offset): first_sample x
 * the node's elements per sample, numel / B with B the batch (dim 0 of the
 * plan's first input in the selected shapes); 0 for a node whose size is
 * not a multiple of B (not per sample). */
static int64_t sample_elem0(const ct_plan *p, const ct_node_def *d) {
    const ct_graph *g = ct_plan_run_graph(p);
    int64_t B = 0;
    for (int i = 0; i < g->n && !B; i++)
        if (g->nodes[i].op == CT_OP_INPUT) B = g->nodes[i].ndim > 0 ? g->nodes[i].shape[0] : 1;
    int64_t n = ct_node_numel(d);
    return B > 0 && n % B == 0 ? p->first_sample * (n / B) : 0;
}

static ct_status run_node(ct_plan *p, int i, int training) {
    /* A shape variant's node: its shapes and shape-derived attributes (a
     * mean's 1/n, a slice's end), the plan's flags (running stats switch). */
    ct_node_def vd;
    const ct_node_def *d = &p->g.nodes[i];
    if (p->variant) {
        vd = ct_plan_run_graph(p)->nodes[i];
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
    k.out = ct_plan_node_tensor(p, i);
    memset(&k.out2, 0, sizeof k.out2);
    if (d->op == CT_OP_LAYERNORM_BWD_DATA && d->ia[5] > 0) /* layernorm_bwd+cast: the cast's buffer */
        k.out2 = ct_plan_node_tensor(p, (ct_node)(d->ia[5] - 1));
    for (int j = 0; j < d->n_in; j++) {
        k.in[j] = ct_plan_node_tensor(p, d->in[j]);
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
    k.sample_elem0 = p->first_sample ? sample_elem0(p, d) : 0;
    k.seed = ct_context_seed(p->ctx);
    k.nthreads = ct_context_num_threads(p->ctx);
    k.group = p->g.tp; /* the tensor group, for the collective ops (tp_kernels.c) */
    k.in_wcopy = 0;
    k.wgen = p->wcast_gen;
    ct_kargs raw = k; /* the node's own tensors */
    ct_status s = CT_OK;
    if (pn->lowp_io) /* FP32 views and copies of low-precision I/O (select_kernels sized them) */
        s = lowp_to_f32(p, d, &k, pn->cvt_spill ? (char *)p->cvt_spill : p->act_arena + pn->cvt_offset);
    for (int j = 0; j < d->n_in; j++) /* inputs read in place from the weight copies */
        if (p->pn[d->in[j]].arena == CT_ARENA_WCAST && k.in[j].data == raw.in[j].data) k.in_wcopy |= 1u << j;
    if (s == CT_OK) s = pn->kernel(&k);
    /* a oneDNN kernel only for native BF16 declined: the SIMD kernels read BF16 too */
    if (s == CT_E_UNSUPPORTED && pn->lowp_native && pn->slot == CT_KERNEL_ONEDNN &&
        ct_op_table(d->op)->onednn_lowp_only && ct_op_table(d->op)->simd_lowp) {
        drop_caches(p, i);
        if (ct_plan_pick_kernel(p, i, CT_KERNEL_ONEDNN) && pn->slot != CT_KERNEL_REF) {
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
        if (!ct_plan_pick_kernel(p, i, pn->slot)) break;
        ct_context_clear_error(p->ctx);
        s = pn->kernel(&k);
    }
    if (s == CT_OK && k.out.data != raw.out.data) s = ct_convert(p->ctx, &k.out, &raw.out);
    const ct_op_info *info = ct_op_table(d->op);
    const int wj = info->writes_in - 1; /* a second result, in input wj's buffer */
    if (s == CT_OK && wj >= 0 && k.in[wj].data != raw.in[wj].data) s = ct_convert(p->ctx, &k.in[wj], &raw.in[wj]);
    if (s != CT_OK && !ct_context_last_error(p->ctx)[0])
        ct_set_error(p->ctx, s, "op '%s' (node '%s') failed", info->name, d->name);
    if (p->node_hook) node_event(p, i, CT_NODE_END, s, &ev);
    if (s == CT_OK && p->anomaly && wj >= 0) s = check_anomaly(p, d->in[wj]); /* that result (the earlier value) */
    if (s == CT_OK && p->anomaly && !info->no_output) s = check_anomaly(p, i);
    return s;
}

static int is_leaf(ct_op op) { return op == CT_OP_INPUT || op == CT_OP_PARAM || op == CT_OP_BUFFER || op == CT_OP_RESHAPE; }

/* A pipeline plan runs one part at a time (ct_plan_set_part): nodes of the other parts wait; shared nodes
 * (from parameters and data inputs only) run with every part. */
static int other_part(const ct_plan *p, int i) { return p->part && p->run_part >= 0 && p->part[i] >= 0 && p->part[i] != p->run_part; }

/* Whether ct_plan_forward runs node i (skip_wcast: the weight copies are current) / ct_plan_backward does. */
static int runs_forward(const ct_plan *p, int i, int skip_wcast) {
    const ct_node_def *d = &p->g.nodes[i];
    if (!p->pn[i].live || (d->flags & CT_NODE_BACKWARD) || is_leaf(d->op) || other_part(p, i)) return 0;
    return !(skip_wcast && p->pn[i].arena == CT_ARENA_WCAST);
}
static int runs_backward(const ct_plan *p, int i) {
    const ct_node_def *d = &p->g.nodes[i];
    return p->pn[i].live && (d->flags & CT_NODE_BACKWARD) && !is_leaf(d->op) && !other_part(p, i);
}

static ct_status forward(ct_plan *p, int training);
static ct_status backward(ct_plan *p);

/* Both passes with subnormals flushed in every computing thread (ct_context_opts.flush_subnormals). */
ct_status ct_plan_forward(ct_plan *p, int training) {
    if (!p) return CT_E_INVALID_ARG;
    ct_fp_scope fp;
    ct_fp_enter(p->ctx, &fp);
    ct_status s = forward(p, training);
    ct_fp_leave(&fp);
    return s;
}
ct_status ct_plan_backward(ct_plan *p) {
    if (!p) return CT_E_INVALID_ARG;
    ct_fp_scope fp;
    ct_fp_enter(p->ctx, &fp);
    ct_status s = backward(p);
    ct_fp_leave(&fp);
    return s;
}

static ct_status forward(ct_plan *p, int training) {
    if (p->plan_only) return ct_set_error(p->ctx, CT_E_STATE, "this plan was compiled with plan_only: it has no memory to run in");
    if (p->fwd_fn) { /* an interposer (pipeline evaluation): it runs this forward itself */
        ct_forward_fn fn = p->fwd_fn;
        void *user = p->fwd_user;
        p->fwd_fn = NULL;
        ct_status s = fn(user, p, training);
        p->fwd_fn = fn;
        return s;
    }
    /* (the hook first: ZeRO-3 may fill the weight copies itself) */
    ct_status s = p->exec_hook ? p->exec_hook(p->exec_hook_user, CT_EXEC_BEGIN, 0, -1) : CT_OK;
    const int skip_wcast = p->wcast_fresh; /* the weight copies already hold the parameters' casts */
    if (!skip_wcast) p->wcast_gen++;       /* the casts below rewrite them */
    for (int i = 0; s == CT_OK && i < p->g.n; i++) {
        if (!runs_forward(p, i, skip_wcast)) continue;
        if (p->exec_hook) s = p->exec_hook(p->exec_hook_user, CT_EXEC_NODE, 0, i);
        if (s == CT_OK) s = run_node(p, i, training);
    }
    if (p->exec_hook) p->exec_hook(p->exec_hook_user, CT_EXEC_END, 0, -1);
    CT_TRY(s);
    p->wcast_fresh = p->wcast_bytes != 0; /* whether they ran now or were current (the generation moved above) */
    return CT_OK;
}

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

static ct_status backward(ct_plan *p) {
    if (p->plan_only) return ct_set_error(p->ctx, CT_E_STATE, "this plan was compiled with plan_only: it has no memory to run in");
    if (p->g.n == p->n_fwd || (p->seed == CT_NONE && !p->n_links))
        return ct_set_error(p->ctx, CT_E_STATE, "backward: this plan was compiled without a loss (forward only)");
    if (p->seed != CT_NONE) *(float *)p->pn[p->seed].data = p->loss_scale;
    ct_status s = p->exec_hook ? p->exec_hook(p->exec_hook_user, CT_EXEC_BEGIN, 1, -1) : CT_OK;
    for (int i = p->n_fwd; s == CT_OK && i < p->g.n; i++) {
        if (!runs_backward(p, i)) continue;
        if (p->exec_hook) s = p->exec_hook(p->exec_hook_user, CT_EXEC_NODE, 1, i);
        if (s == CT_OK) s = run_node(p, i, 1);
        if (s != CT_OK) break;
        int pi = p->pn[i].grad_of_param;
        if (pi >= 0 && p->accumulate_grads) accumulate_grad(p, i, pi);
        if (pi >= 0 && p->grad_ready) {
            ct_tensor t = ct_plan_node_tensor(p, i);
            if (p->accumulate_grads) t.data = p->grad_arena + p->param_off[pi]; /* the running sum */
            p->grad_ready(p->grad_ready_user, pi, &t);
        }
    }
    if (p->exec_hook) p->exec_hook(p->exec_hook_user, CT_EXEC_END, 1, -1);
    return s;
}

ct_status ct_plan_zero_grads(ct_plan *p) {
    memset(p->grad_arena, 0, p->n_param_floats * sizeof(float));
    return CT_OK;
}

void ct_plan_set_step(ct_plan *p, uint64_t step) { p->step = step; }

ct_status ct_plan_set_sample_offset(ct_plan *p, int64_t first_sample) {
    if (!p) return CT_E_INVALID_ARG;
    if (first_sample < 0)
        return ct_set_error(p->ctx, CT_E_INVALID_ARG, "ct_plan_set_sample_offset: first_sample %lld is negative",
                            (long long)first_sample);
    p->first_sample = first_sample;
    return CT_OK;
}

int64_t ct_plan_sample_offset(const ct_plan *p) { return p ? p->first_sample : 0; }

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
        if (!runs_backward(p, i) || p->pn[i].grad_of_param < 0) continue;
        if (order && n < cap) order[n] = p->pn[i].grad_of_param;
        n++;
    }
    return n;
}

void ct_plan_set_node_hook(ct_plan *p, ct_node_hook_fn fn, void *user) {
    p->node_hook = fn;
    p->node_hook_user = fn ? user : NULL;
}


void ct_plan_set_forward_fn(ct_plan *p, ct_forward_fn fn, void *user) {
    if (!p) return;
    p->fwd_fn = fn;
    p->fwd_user = user;
}

void ct_plan_set_exec_hook(ct_plan *p, ct_exec_hook_fn fn, void *user) {
    if (!p) return;
    p->exec_hook = fn;
    p->exec_hook_user = fn ? user : NULL;
}

int ct_plan_exec_order(const ct_plan *p, int backward, int *nodes, int cap) {
    int n = 0;
    for (int i = backward ? p->n_fwd : 0; i < p->g.n; i++) {
        if (backward ? !runs_backward(p, i) : !runs_forward(p, i, p->wcast_fresh)) continue;
        if (nodes && n < cap) nodes[n] = i;
        n++;
    }
    return n;
}

int ct_plan_node_param_reads(const ct_plan *p, int node, int *params, int cap) {
    if (!p || node < 0 || node >= p->g.n) return 0;
    const ct_node_def *d = &p->g.nodes[node];
    int n = 0;
    for (int j = 0; j < d->n_in; j++) {
        ct_node r = d->in[j];
        while (r != CT_NONE && p->pn[r].arena == CT_ARENA_ALIAS && p->pn[r].root != r) r = p->pn[r].root;
        if (r == CT_NONE || p->g.nodes[r].op != CT_OP_PARAM) continue;
        for (int k = 0; k < p->n_params; k++)
            if (p->params[k] == r) {
                if (params && n < cap) params[n] = k;
                n++;
                break;
            }
    }
    return n;
}

int ct_plan_node_is_weight_copy(const ct_plan *p, int node) {
    return p && node >= 0 && node < p->g.n && p->pn[node].arena == CT_ARENA_WCAST;
}
