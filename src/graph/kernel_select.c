/* src/graph/kernel_select.c - kernel choice per node: the kernel-selection
 * pass (the best allowed slot per node, its saved-state / scratch sizes, and
 * how it meets low-precision I/O: natively or through FP32 copies), the
 * fallback to the next slot the executor uses when a kernel declines, and
 * the names of a node's chosen kernel (ct_plan_kernel_name / desc / impl). */
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "plan.h"

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
int ct_plan_pick_kernel(ct_plan *p, int i, int after) {
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
int ct_lowp_copies_input(const ct_op_info *info, int j) {
    return !info->lowp_native && !(info->state_inputs & (1u << j));
}

/* Bytes of the FP32 copies node d needs when its kernel gets FP32 views of
 * its low-precision I/O; *low: whether it has any. */
size_t ct_lowp_copy_bytes(const ct_graph *g, const ct_node_def *d, int *low) {
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
        if (ct_lowp_copies_input(info, j)) cvt += ct_align_up((size_t)ct_node_numel(in) * sizeof(float), CT_ALIGN);
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

ct_status ct_pass_select_kernels(ct_plan *p) {
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
        if (!ct_plan_pick_kernel(p, i, -1))
            return ct_set_error(p->ctx, CT_E_UNSUPPORTED, "compile: no kernel for op '%s' (node '%s')",
                                ct_op_table(op)->name, g->nodes[i].name);
        const ct_op_info *info = ct_op_table(op);
        const ct_node_def *d = &g->nodes[i];
        /* a shape oneDNN runs badly: the next (SIMD) kernel, never the reference */
        if (info->simd_first && p->pn[i].slot == CT_KERNEL_ONEDNN && info->simd_first(g, d) &&
            (!ct_plan_pick_kernel(p, i, CT_KERNEL_ONEDNN) || p->pn[i].slot == CT_KERNEL_REF))
            ct_plan_pick_kernel(p, i, -1);
        p->pn[i].aux_bytes = info->aux_bytes ? info->aux_bytes(g, d) : 0;
        p->pn[i].ws_bytes = info->ws_bytes ? info->ws_bytes(g, d) : 0;
        if (p->pn[i].ws_bytes > p->ws_bytes) p->ws_bytes = p->pn[i].ws_bytes;
        /* kernels without low-precision I/O get FP32 views and copies (see run_node) */
        int low;
        size_t cvt = ct_lowp_copy_bytes(g, d, &low);
        /* a oneDNN kernel only for native BF16 I/O: the next kernel unless this node runs so */
        if (info->onednn_lowp_only && p->pn[i].slot == CT_KERNEL_ONEDNN && !(low && bf16_native && bf16_native_ok(p, i)) &&
            !ct_plan_pick_kernel(p, i, CT_KERNEL_ONEDNN))
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

const char *ct_node_kernel_desc(const ct_plan *p, int i) {
    const ct_plan_node *pn = &p->pn[i];
    const int f16 = p->precision == CT_PRECISION_FP16 || p->precision == CT_PRECISION_FP16_PURE;
    return ct_kernel_slot_desc(pn->slot, pn->lowp_native ? (f16 ? CT_LOWP_NATIVE_F16 : CT_LOWP_NATIVE_BF16)
                                         : pn->lowp_io  ? CT_LOWP_COPIED
                                                        : CT_LOWP_NONE);
}

const char *ct_node_kernel_impl(const ct_plan *p, int i) {
    const ct_plan_node *pn = &p->pn[i];
    const char *impl = pn->slot == CT_KERNEL_ONEDNN ? ct_onednn_cache_impl(pn->cache) : NULL;
    return impl ? impl : ct_kernel_slot_name(pn->slot);
}

void ct_plan_packed_weights(const ct_plan *p, int *nodes, size_t *bytes, uint64_t *fills) {
    *nodes = 0;
    *bytes = 0;
    *fills = 0;
    for (int i = 0; i < p->g.n; i++) {
        if (p->pn[i].slot != CT_KERNEL_ONEDNN || !p->pn[i].cache) continue;
        size_t b;
        uint64_t f;
        ct_onednn_cache_kept(p->pn[i].cache, &b, &f);
        *nodes += b > 0;
        *bytes += b;
        *fills += f;
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
    return ct_node_kernel_desc(p, n);
}

const char *ct_plan_kernel_impl(const ct_plan *p, ct_node n) {
    n = p->user_map ? ct_plan_map(p, n) : n;
    if (n < 0 || n >= p->g.n || p->pn[n].slot < 0) return "none";
    return ct_node_kernel_impl(p, n);
}

