/* src/graph/fusion_chain.c - chains of elementwise ops as one loop (fusion
 * level 2, pattern "eltwise_chain").
 *
 * A chain is a run of elementwise nodes (unary, scale, binary on operands of
 * the output's shape, dropout), each read only by the next one (so no
 * backward node needs an intermediate value), forward or backward alike, up
 * to 8 steps. It becomes one ELTWISE_CHAIN node: in[0] is the chain's first
 * input, the other inputs are the binary steps' operands; ia[j] encodes step
 * j (see STEP_* below), fa[] the scale factors and dropout rates.
 *
 * The kernel walks the tensor in blocks of CHAIN_BLOCK elements that stay
 * in cache and runs, per step, the kernel of that op for the node's slot,
 * the same ones the op table lists (k_step below; reference kernels for the
 * reference slot, the AVX2 / AVX-512 kernels for those) on views of the
 * block (dropout steps too: ct_kargs.elem0 gives the block's place, so the
 * mask is drawn by global element index). Every step computes exactly what
 * the unfused node computes on the same slot, so the chain is bit-identical
 * to the unfused ops. */
#include <string.h>

#include "plan.h"
#include "kernels/kernels.h"

#define CHAIN_BLOCK 2048
#define CHAIN_MAX 8

/* The step ops' kernels per slot: the op table's (op_table.c) for these four
 * ops. Written here rather than read from the table because the table lists
 * this file's chain kernel: reading it back would make the two files call
 * into each other. test_fusion checks chains bit-identical to the unfused ops. */
#define STEP_KERNELS(op) {[CT_KERNEL_REF] = ct_k_##op##_ref, [CT_KERNEL_AVX2] = ct_k_##op##_avx2, [CT_KERNEL_AVX512] = ct_k_##op##_avx512}
static const ct_kernel_fn k_step[CT_OP_COUNT][CT_KERNEL_AVX512 + 1] = {
    [CT_OP_UNARY] = STEP_KERNELS(unary),
    [CT_OP_SCALE] = STEP_KERNELS(scale),
    [CT_OP_BINARY] = STEP_KERNELS(binary),
    [CT_OP_DROPOUT] = STEP_KERNELS(dropout),
};

/* step encoding in an int64: bits 0-7 op, 8-15 kind, 16-19 operand input
 * index, 20 the chain value is the right operand, 21-22 fa index, 32-63
 * dropout RNG stream */
static int64_t step_code(ct_op op, int kind, int operand, int right, int fidx, int64_t stream) {
    return (int64_t)op | (int64_t)kind << 8 | (int64_t)operand << 16 | (int64_t)right << 20 | (int64_t)fidx << 21 |
           stream << 32;
}
static ct_op step_op(int64_t c) { return (ct_op)(c & 0xff); }
static int step_kind(int64_t c) { return (int)(c >> 8 & 0xff); }
static int step_operand(int64_t c) { return (int)(c >> 16 & 0xf); }
static int step_right(int64_t c) { return (int)(c >> 20 & 1); }
static int step_fidx(int64_t c) { return (int)(c >> 21 & 3); }
static uint64_t step_stream(int64_t c) { return (uint64_t)c >> 32; }

static int same_shape(const ct_node_def *a, const ct_node_def *b) {
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* Node n can be a chain step (its chain input must still be chosen). */
static int eligible(const ct_plan *p, ct_node n) {
    const ct_node_def *d = &p->g.nodes[n];
    if (d->dtype != CT_F32 || (d->flags & CT_NODE_RECOMPUTE) || n == p->loss) return 0;
    for (int j = 0; j < d->n_in; j++)
        if (p->g.nodes[d->in[j]].dtype != CT_F32 || !same_shape(&p->g.nodes[d->in[j]], d)) return 0;
    switch (d->op) {
    case CT_OP_UNARY: case CT_OP_SCALE: return d->n_in == 1;
    case CT_OP_DROPOUT: return d->n_in == 1 && d->ia[1] <= 0; /* not drop path: one decision per row */
    case CT_OP_BINARY: return d->n_in == 2 && d->in[0] != d->in[1];
    default: return 0;
    }
}

static int is_output(const ct_plan *p, ct_node v) {
    for (int i = 0; i < p->n_outputs; i++)
        if (p->outputs[i] == v) return 1;
    return v == p->loss;
}

/* The only reader of v, or -1 (none, several, or a kept output). */
static ct_node only_reader(const ct_plan *p, ct_node v) {
    if (is_output(p, v) || ct_plan_is_param_grad(p, v)) return -1; /* kept */
    ct_node r = -1;
    for (int i = v + 1; i < p->g.n; i++)
        for (int j = 0; j < p->g.nodes[i].n_in; j++)
            if (p->g.nodes[i].in[j] == v) {
                if (r >= 0) return -1;
                r = i;
            }
    return r;
}

/* The chain predecessor of n: an input that is an eligible node with n as
 * its only reader, in the same pass (forward / backward); -1 if none. */
static ct_node predecessor(const ct_plan *p, ct_node n) {
    const ct_node_def *d = &p->g.nodes[n];
    for (int j = 0; j < d->n_in; j++) {
        ct_node v = d->in[j];
        const ct_node_def *V = &p->g.nodes[v];
        if ((V->flags & CT_NODE_BACKWARD) != (d->flags & CT_NODE_BACKWARD)) continue;
        if (eligible(p, v) && only_reader(p, v) == n) return v;
    }
    return -1;
}

int ct_fusion_chain_find(const ct_plan *p, ct_node end, ct_node *chain) {
    if (!eligible(p, end)) return 0;
    ct_node r = only_reader(p, end);
    if (r >= 0 && eligible(p, r) && predecessor(p, r) == end) return 0; /* not the chain's end yet */
    int n = 0;
    for (ct_node v = end; v >= 0 && n < CHAIN_MAX; v = predecessor(p, v)) chain[n++] = v;
    /* inputs: the first step's, and one per binary step; factors: one per scale / dropout */
    int n_in = 1, nf = 0;
    for (int s = 0; s < n; s++) {
        const ct_node_def *d = &p->g.nodes[chain[s]];
        n_in += d->op == CT_OP_BINARY;
        nf += d->op == CT_OP_SCALE || d->op == CT_OP_DROPOUT;
        if (d->op == CT_OP_DROPOUT && (d->ia[0] < 0 || d->ia[0] > 0x7fffffff)) return 0;
    }
    return n >= 2 && n_in <= CT_MAX_INPUTS && nf <= 4 ? n : 0;
}

void ct_fusion_chain_apply(ct_plan *p, const ct_node *chain, int n) {
    ct_graph *g = &p->g;
    ct_node end = chain[0];
    ct_node_def nd = g->nodes[end];
    nd.op = CT_OP_ELTWISE_CHAIN;
    memset(nd.ia, 0, sizeof nd.ia);
    memset(nd.fa, 0, sizeof nd.fa);
    int n_in = 1, nf = 0;
    nd.in[0] = g->nodes[chain[n - 1]].in[0]; /* a binary first step: its in[0] is the chain value */
    for (int s = n - 1; s >= 0; s--) { /* chain[n - 1] is the first step */
        const ct_node_def *d = &g->nodes[chain[s]];
        ct_node prev = s == n - 1 ? CT_NONE : chain[s + 1];
        int operand = 0, right = 0, fidx = 0;
        int64_t stream = 0;
        if (d->op == CT_OP_BINARY) {
            right = s != n - 1 && d->in[1] == prev;
            operand = n_in;
            nd.in[n_in++] = s == n - 1 ? d->in[1] : right ? d->in[0] : d->in[1];
        } else if (d->op == CT_OP_SCALE || d->op == CT_OP_DROPOUT) {
            fidx = nf;
            nd.fa[nf++] = d->fa[0];
            if (d->op == CT_OP_DROPOUT) stream = d->ia[0];
        }
        nd.ia[n - 1 - s] = step_code(d->op, (int)d->ia[0], operand, right, fidx, stream);
    }
    nd.n_in = n_in;
    g->nodes[end] = nd;
}

/* ---- the kernel ----------------------------------------------------------------------------------------- */

static ct_status run_chain(ct_kargs *k, int slot) {
    const ct_node_def *d = k->node;
    for (int j = 0; j < d->n_in; j++)
        if (k->in[j].dtype != CT_F32) return CT_E_UNSUPPORTED;
    int64_t n = ct_tensor_numel(&k->out), nblk = (n + CHAIN_BLOCK - 1) / CHAIN_BLOCK;
    int steps = 0;
    while (steps < CHAIN_MAX && step_op(d->ia[steps]) != CT_OP_INPUT) steps++;
    ct_kernel_fn fn[CHAIN_MAX] = {0};
    for (int s = 0; s < steps; s++) {
        ct_op op = step_op(d->ia[s]);
        fn[s] = (unsigned)op < CT_OP_COUNT && slot <= CT_KERNEL_AVX512 ? k_step[op][slot] : NULL;
        if (!fn[s]) return CT_E_UNSUPPORTED;
    }
    int nth = n >= 65536 ? k->nthreads : 1;
    ct_status st = CT_OK;
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t lo = b * CHAIN_BLOCK, len = n - lo < CHAIN_BLOCK ? n - lo : CHAIN_BLOCK;
        float *y = (float *)k->out.data + lo;
        const float *v = (const float *)k->in[0].data + lo;
        for (int s = 0; s < steps; s++) {
            int64_t c = d->ia[s];
            ct_op op = step_op(c);
            ct_node_def sd = *d;
            sd.op = op;
            sd.n_in = op == CT_OP_BINARY ? 2 : 1;
            sd.ia[0] = op == CT_OP_DROPOUT ? (int64_t)step_stream(c) : step_kind(c);
            sd.ia[1] = 0;
            sd.fa[0] = op == CT_OP_SCALE || op == CT_OP_DROPOUT ? d->fa[step_fidx(c)] : 0.0f;
            sd.ndim = 1;
            sd.shape[0] = len;
            ct_kargs a = *k;
            a.node = &sd;
            a.nthreads = 1;
            a.elem0 = k->elem0 + lo; /* dropout: the mask by global element index */
            a.ws = NULL;
            a.ws_bytes = 0;
            a.aux = NULL;
            a.out = ct_tensor_make(y, CT_F32, 1, (int64_t[]){len});
            ct_tensor cur = ct_tensor_make((void *)v, CT_F32, 1, (int64_t[]){len});
            if (op == CT_OP_BINARY) {
                ct_tensor o = ct_tensor_make((float *)k->in[step_operand(c)].data + lo, CT_F32, 1, (int64_t[]){len});
                a.in[0] = step_right(c) ? o : cur;
                a.in[1] = step_right(c) ? cur : o;
            } else {
                a.in[0] = cur;
            }
            ct_status s1 = fn[s](&a);
            if (s1 != CT_OK) {
#pragma omp critical(ct_chain_status)
                st = s1;
            }
            v = y;
        }
    }
    return st;
}

ct_status ct_k_eltwise_chain_ref(ct_kargs *k) { return run_chain(k, CT_KERNEL_REF); }
ct_status ct_k_eltwise_chain_avx2(ct_kargs *k) { return run_chain(k, CT_KERNEL_AVX2); }
ct_status ct_k_eltwise_chain_avx512(ct_kargs *k) { return run_chain(k, CT_KERNEL_AVX512); }
