/* src/graph/plan.h - the compiled plan: graph snapshot with backward nodes,
 * kernel choice and memory placement for every node, and the functions the
 * graph layer's files share about it. Internal. The plan is built by
 * compile.c (the pass list) with its passes (autocast.c, recompute.c,
 * fusion*.c, kernel_select.c, planner.c, allocate.c), run by executor.c,
 * given more shapes by dynamic_shapes.c and read through plan_accessors.c. */
#ifndef CT_GRAPH_PLAN_H
#define CT_GRAPH_PLAN_H

#include "ir.h"

/* CT_ARENA_WCAST: the low-precision copy of a parameter (a forward cast of a
 * PARAM node) lives in the plan's weight-copy arena at the parameter's own
 * element offset, kept between steps (planner.c, ct_plan_weight_copies). */
enum { CT_ARENA_NONE = 0, CT_ARENA_PARAM, CT_ARENA_GRAD, CT_ARENA_BUFFER, CT_ARENA_ACT, CT_ARENA_ALIAS, CT_ARENA_WCAST };

/* One application of a fusion pattern: the fused forward node, the
 * backward nodes it rewrote, and the names of the nodes it absorbed. */
typedef struct ct_fused_group {
    int pattern;             /* index in the registry (fusion.c)              */
    int rule;                /* fusion_rules entry that enabled it, -1: level */
    int n_nodes;
    ct_node nodes[6];        /* [0]: the fused forward node                   */
    char absorbed[2][CT_NAME_LEN];
} ct_fused_group;

typedef struct ct_plan_node {
    uint8_t live;        /* executed / kept                                    */
    uint8_t arena;       /* CT_ARENA_*                                         */
    int slot;            /* chosen kernel slot                                 */
    ct_kernel_fn kernel;
    size_t offset;       /* within its arena (bytes)                           */
    size_t bytes;
    size_t aux_bytes, aux_offset; /* aux lives in the activation arena         */
    size_t ws_bytes;
    int last_use;        /* last node index that reads this storage            */
    ct_node root;        /* storage root (self unless an alias)                */
    int grad_of_param;   /* param index whose final gradient this node is, or -1 */
    size_t cvt_bytes;    /* mixed precision: FP32 copies of low-precision I/O (0: none),
                            planned in the activation arena for the node's run only */
    size_t cvt_offset;
    uint8_t lowp_io;     /* 1: the kernel gets FP32 views of low-precision I/O    */
    uint8_t lowp_native; /* 1: the kernel (oneDNN, or a SIMD one with simd_lowp) reads/writes
                            BF16 itself (select_kernels); cleared for good if it declines
                            (then lowp_io, cvt_spill) */
    uint8_t cvt_spill;   /* 1: the FP32 copies live in p->cvt_spill, not the arena */
    void *data, *aux, *cache;
} ct_plan_node;

/* The activation arena at its peak (the first node at which the most bytes
 * are live): bytes by kind and by dtype, and the largest buffers. */
#define CT_PEAK_TOP 5
typedef struct ct_act_peak {
    int at;                 /* node index, -1: no activations             */
    size_t inputs, fwd, bwd, aux, cvt; /* inputs; forward / backward values; saved state; FP32 copies */
    size_t by_dtype[CT_DTYPE_COUNT]; /* values and inputs by their dtype  */
    int n_top;
    struct {
        ct_node node;
        uint8_t kind;       /* 0 value, 1 saved state (aux), 2 FP32 copies */
        size_t bytes;
    } top[CT_PEAK_TOP];
} ct_act_peak;

/* What a micro-batch's backward reads (graph/stage.c): n activation-arena ranges [offset, bytes] in rg (in[k]:
 * range k is a data input's), bytes in all. */
typedef struct ct_saved_set {
    int n;
    size_t *rg;
    uint8_t *in;
    size_t bytes;
} ct_saved_set;

/* A pipeline link (graph/stage.c): a value crossing between a held piece and its neighbour. */
typedef struct ct_stage_link {
    int part, dir;      /* the held piece's part; 0 incoming, 1 outgoing              */
    ct_node whole;      /* the value's node in the whole (user's) graph              */
    int value;          /* index in p->outputs: the input (incoming) / value (outgoing) */
    int grad;           /* index in p->outputs: its gradient (incoming) / seed input
                           (outgoing); -1: none                                       */
} ct_stage_link;

struct ct_plan {
    ct_context *ctx;
    ct_graph g;          /* owned snapshot incl. backward nodes               */
    ct_plan_node *pn;
    int n_fwd;           /* nodes [0, n_fwd) are the user's forward graph     */
    ct_node loss, seed;
    int n_outputs;
    ct_node *outputs;
    /* parameters in arena order */
    int n_params;
    ct_node *params, *param_grads;
    size_t *param_off;   /* float offset into param/grad arenas              */
    float *param_arena, *grad_arena, *buffer_arena;
    size_t n_param_floats, n_buffer_floats;
    char *act_arena;
    size_t act_bytes;
    /* low-precision weight copies (CT_ARENA_WCAST): n_param_floats elements of
     * wcast_dtype in the parameter arena's layout (0 bytes: none). Fresh: they
     * equal the cast of the current parameters, so forward skips the weight
     * casts; set by a forward that ran them and by the optimizer's fused cast
     * (ct_plan_weight_copies), cleared by every writable hand-out of the
     * parameters and by ct_plan_params_changed. */
    uint16_t *wcast_arena;
    size_t wcast_bytes;
    ct_dtype wcast_dtype;
    int wcast_fresh;
    /* Generation of the copies' contents: bumped whenever they are rewritten (a forward that runs the
     * casts, ct_plan_weight_copies_written). Kernels that keep something derived from a weight copy
     * between calls (onednn/matmul.c's packed weights) redo it when it changes (ct_kargs.wgen). */
    uint64_t wcast_gen;
    void *ws;
    size_t ws_bytes;
    uint64_t step;
    int64_t first_sample; /* ct_plan_set_sample_offset: dropout's global sample of batch row 0 */
    float loss_scale;    /* backward's seed value                             */
    int anomaly;         /* check every output for NaN/inf (ct_plan_set_anomaly) */
    int accumulate_grads; /* final param grads are activations added into the grad arena */
    ct_grad_ready_fn grad_ready;
    void *grad_ready_user;
    int recompute_every;     /* ct_compile_opts, read by the recompute pass    */
    uint32_t recompute_ops;
    int recompute_blocks;    /* ct_compile_opts: checkpointing by blocks       */
    int plan_only; /* compiled without allocation (ct_compile_opts.plan_only) */
    ct_node_hook_fn node_hook; /* per-node events (ct_plan_set_node_hook); NULL: off */
    ct_exec_hook_fn exec_hook; /* before each executed node (ct_plan_set_exec_hook, ir.h); NULL: off */
    void *exec_hook_user;
    void *node_hook_user;
    /* mixed precision (autocast.c) */
    ct_precision precision;
    char *keep_fp32;         /* owned copy of ct_compile_opts.keep_fp32       */
    ct_node *user_map;       /* user node id -> plan node id (NULL: identity) */
    int n_user;              /* nodes in the user's graph                     */
    int n_casts;
    size_t cvt_bytes;        /* largest node's FP32 copies (in the activation arena) */
    /* FP32 copies of native nodes that oneDNN declined at their first run
     * (not planned: allocated then, shared, grown to the largest, freed with
     * the plan) */
    void *cvt_spill;
    size_t cvt_spill_bytes;
    ct_scratch scratch; /* kernels' temporary memory while they run (oneDNN's layout copies, scratchpads) */
    /* fusion (fusion.c) and memory reuse (planner.c) */
    int fusion_level;        /* ct_compile_opts.fusion_level                  */
    const ct_fusion_rules *fusion_rules; /* the caller's, during compile only */
    ct_fusion_rules *rules_copy; /* this plan's copy of them, for ct_plan_add_shape's compiles */
    int memory_opt;          /* 0: every value its own block (no reuse)       */
    size_t act_bytes_no_reuse; /* the activation arena without reuse         */
    size_t act_bytes_min;    /* the most activation bytes live at once: no placement is smaller */
    ct_act_peak act_peak;    /* what is live then (ctrain graph prints it)    */
    int n_groups;            /* fused groups                                  */
    ct_fused_group *groups;
    int *fused_group;        /* node -> its group, -1 (NULL until fusion ran) */
    int n_rules;             /* rules given (fusion_rules), and how often each */
    int *rule_hits;          /* matched                                       */
    /* dynamic shapes (ct_plan_add_shape, docs/dynamic-shapes.md): plan_only
     * compiles of the same graph built for smaller sizes; variant k >= 1 is
     * variants[k - 1]. The executor runs node i with variant's node i
     * (shapes and shape-derived attributes) in this plan's memory, with that
     * variant's kernel cache. 0: the compiled (maximum) shapes. */
    struct ct_plan **variants;
    int n_variants;
    int variant;
    /* pipeline stages (stage.c; ct_compile_opts.stage) */
    const ct_stage_opts *stage_opts; /* during compile only                       */
    int build_backward;      /* ct_compile_opts.build_backward                    */
    int n_parts;             /* held pieces (0: the whole graph)                  */
    int run_part;            /* ct_plan_set_part: -1 all                          */
    signed char *part;       /* per node: its part, -1 shared (NULL: no parts)     */
    int *param_seq;          /* param i's place among the whole graph's (init streams); NULL: i */
    int *buffer_seq;         /* the same for buffers (in graph order); NULL: i        */
    struct ct_comm *pp;      /* ct_stage_opts.group                                   */
    int *stand_ins;          /* user nodes whose plan node is a stand-in input (stage.c) */
    int n_stand_ins;
    ct_stage_opts stage_keep; /* a copy of ct_compile_opts.stage (cuts / held: stage_arrays) for add_shape */
    int *stage_arrays;
    ct_forward_fn fwd_fn;    /* ct_plan_set_forward_fn (ir.h)                         */
    void *fwd_user;
    ct_stage_link *links;
    int n_links;
    char **act_slots;        /* ct_plan_set_act_slots: what backward reads, per micro-batch in flight */
    int *slot_part;          /* the part each slot holds (-2: none)               */
    int n_act_slots;
    size_t slot_bytes;
    ct_saved_set *saved;     /* per part + 1 (0: every part), made by ct_plan_set_act_slots */
    int n_saved;
};

/* A copy of r (NULL for NULL or out of memory; fusion.c). */
ct_fusion_rules *ct_fusion_rules_clone(const ct_fusion_rules *r);

/* A user's node id in the plan's graph (-1 when out of range). */
static inline ct_node ct_plan_map(const ct_plan *p, ct_node n) {
    if (n < 0 || n >= p->n_user) return -1;
    return p->user_map ? p->user_map[n] : n;
}

/* The graph whose shapes the executor runs: the selected variant's
 * (ct_plan_set_shape) or the compiled one. */
/* v is some parameter's gradient (kept: the optimizer reads it) */
static inline int ct_plan_is_param_grad(const ct_plan *p, ct_node v) {
    for (int i = 0; i < p->n_params; i++)
        if (p->param_grads[i] == v) return 1;
    return 0;
}
static inline const ct_graph *ct_plan_run_graph(const ct_plan *p) { return p->variant ? &p->variants[p->variant - 1]->g : &p->g; }

/* Node n's value in this plan's memory with the selected shapes: a variant's
 * smaller tensor is the contiguous row-major prefix of the buffer planned
 * for the maximum. */
static inline ct_tensor ct_plan_node_tensor(const ct_plan *p, ct_node n) {
    const ct_node_def *d = &ct_plan_run_graph(p)->nodes[n];
    return ct_tensor_make(p->pn[n].data, d->dtype, d->ndim, d->shape);
}

/* Kernel selection (kernel_select.c). Picks the best allowed kernel for
 * node i strictly after slot `after` in the preference order (-1: from the
 * top) into p->pn[i]; 0 when none is left (the executor's fallback). */
int ct_plan_pick_kernel(ct_plan *p, int i, int after);
/* Mixed precision: a kernel without low-precision I/O reads an FP32 copy of
 * a BF16/FP16 input j, unless it reads only that input's saved state. */
int ct_lowp_copies_input(const ct_op_info *info, int j);
/* Bytes of the FP32 copies node d needs when its kernel gets FP32 views of
 * its low-precision I/O; *low: whether it has any. */
size_t ct_lowp_copy_bytes(const ct_graph *g, const ct_node_def *d, int *low);
/* Plan node i's kernel: "avx512 bf16", "convert+onednn f32", ... and the
 * implementation oneDNN chose (or the slot's name). */
const char *ct_node_kernel_desc(const ct_plan *p, int i);
const char *ct_node_kernel_impl(const ct_plan *p, int i);

/* Graph passes run by ct_compile, in order. */
typedef ct_status (*ct_pass_fn)(ct_plan *p);
/* compile.c: autodiff, then liveness (dead-node elimination). */
/* kernel_select.c: a kernel per live node (after liveness). */
ct_status ct_pass_select_kernels(ct_plan *p);
/* planner.c: memory planning (after kernel selection): arena, offset and
 * bytes of every live node, act_bytes. */
ct_status ct_pass_plan_memory(ct_plan *p);
/* recompute.c: activation checkpointing (after autodiff, before liveness). */
ct_status ct_pass_recompute(ct_plan *p);
/* fusion.c: the fusion pass (after recompute, before liveness). */
ct_status ct_pass_fusion(ct_plan *p);
/* fusion_chain.c: the elementwise chain ending at node `end` (chain[0] =
 * end, up to 8 nodes back; returns its length, 0 when there is none of 2
 * or more), and its rewrite into one ELTWISE_CHAIN node at `end`. */
int ct_fusion_chain_find(const ct_plan *p, ct_node end, ct_node *chain);
void ct_fusion_chain_apply(ct_plan *p, const ct_node *chain, int n);
/* autocast.c: mixed precision (before autodiff): inserts casts per the
 * precision policy and keep_fp32; rebuilds the forward graph. */
ct_status ct_pass_autocast(ct_plan *p);
/* allocate.c: the arenas, node pointers and initial values (last; skipped
 * by plan_only compiles). */
ct_status ct_pass_allocate(ct_plan *p);
/* Pipeline stages (stage.c): the held pieces only (the first pass), then every node's part (after the
 * passes); ct_stage_keep appends a node to p->outputs (kept to the end, remapped by every pass). */
ct_status ct_pass_stage(ct_plan *p);
ct_status ct_stage_parts(ct_plan *p);
ct_status ct_stage_keep(ct_plan *p, ct_node id, int *idx);
/* Frees the plan's saved sets (ct_plan_set_act_slots'; ct_plan_free). */
void ct_saved_sets_free(ct_plan *p);

#endif
