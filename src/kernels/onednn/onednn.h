/* src/kernels/onednn/onednn.h - private helpers shared by the oneDNN kernels.
 *
 * A node's oneDNN state lives in one ct_dnnl (stored in *k->cache): its own
 * CPU engine and stream, the primitives to run in order (input reorders, the
 * main primitive, output reorders), the memory objects, and the buffers it
 * needs while it runs (reordered copies, one scratchpad shared by its
 * primitives), laid out at offsets of one region that lives in the plan's
 * scratch (k->scratch, ct_scratch_reserve): nodes run one at a time, so every
 * node of a plan shares one buffer of the largest need instead of owning its
 * copies (ResNet-50 at batch 32: 8 GB of per-node copies before). Every call
 * points the user memory objects at the tensors of this call and the owned
 * ones into the scratch (dnnl_memory_set_data_handle, which also zero-fills a
 * blocked layout's padding) and executes: nothing is allocated in a steady
 * state.
 *
 * Tensors are f32, or bf16 where the plan hands a node its BF16 tensors
 * (ct_context_lowp_native, lowp.c): oneDNN accumulates in f32 either way, and
 * an f32 output of bf16 inputs (a weight gradient) is written as f32.
 *
 * Errors: a oneDNN failure becomes a ct_status with a message naming the op,
 * the node and the shapes; a configuration oneDNN does not implement gives
 * CT_E_UNSUPPORTED so the executor falls back to the next kernel. */
#ifndef CT_KERNELS_ONEDNN_H
#define CT_KERNELS_ONEDNN_H

#include <dnnl.h>

#include "kernels/kernels.h"

#define CT_DNNL_MAX_STEPS 8
#define CT_DNNL_MAX_ARGS 8
#define CT_DNNL_MAX_MEMS 16
#define CT_DNNL_MAX_BINDS 4

/* Where a user memory object points on each call: k->in[slot] or k->out. */
enum { CT_DNNL_OUT = -1 };

typedef struct ct_dnnl_step {
    dnnl_primitive_t prim;
    int nargs;
    dnnl_exec_arg_t args[CT_DNNL_MAX_ARGS];
    dnnl_memory_desc_t scratch_md; /* what this primitive needs */
    size_t scratch_bytes;
} ct_dnnl_step;

typedef struct ct_dnnl {
    ct_context *ctx;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_attr_t attr; /* user-managed scratchpad */
    int nthreads;
    int ready;                  /* 1 once every primitive is created */
    int nsteps;
    ct_dnnl_step steps[CT_DNNL_MAX_STEPS];
    int nbinds;
    struct { dnnl_memory_t mem; int slot; } binds[CT_DNNL_MAX_BINDS];
    int nmems;
    dnnl_memory_t mems[CT_DNNL_MAX_MEMS]; /* every memory object, destroyed on free */
    int nowned;                            /* memory objects in the scratch region, at these offsets */
    struct { dnnl_memory_t mem; size_t off; } owned[CT_DNNL_MAX_MEMS];
    size_t scratch_total;                  /* bytes of the region (in k->scratch) */
    int npending;                          /* output reorders to add after the main primitive */
    struct { dnnl_memory_t from, to; } pending[CT_DNNL_MAX_BINDS];
    char what[320];                        /* "op 'node' shapes" for error messages */
    char impl[96];                         /* the main primitive's implementation, as oneDNN
                                              names it (impl_info_str): "brg:avx512_core_amx" */
    void (*ext_free)(struct ct_dnnl *c);   /* a kernel's own state around this struct (attention.c),
                                              released first by ct_onednn_cache_free */
    /* Work of the kernel's own before the primitives run (conv.c: the flipped weights of a backward-data
       convolution run as a forward one): called on every call with the node's scratch region bound. */
    ct_status (*pre)(struct ct_dnnl *c, const ct_kargs *k, char *region);
    size_t pre_off;                        /* where pre writes, in the region (ct_dnnl_buffer) */
    /* A kernel of ctrain's own in place of the primitives (matmul.c: the BF16 GEMMs on AMX tiles): called on
       every call with the node's scratch region (scratch_total bytes) bound; the node has no steps. */
    ct_status (*run)(struct ct_dnnl *c, const ct_kargs *k, char *region);
    /* An input kept in the primitive's layout between calls (ct_dnnl_input_kept: a weight copy packed
       once): its own buffer (not the shared scratch), refilled by steps[step] only when the weight
       copies' generation or the tensor's address moved since it was filled. */
    struct {
        void *buf;
        size_t bytes;
        int step, slot;   /* the reorder that fills it; the input it is made from */
        int filled;
        uint64_t fills;   /* times the reorder ran */
        uint64_t gen;     /* ct_kargs.wgen when it was filled */
        const void *src;  /* k->in[slot].data then */
    } kept;
} ct_dnnl;

/* Builds the primitives of a node into c. c->what holds "op 'node'" on
 * entry; the builder appends the shapes. */
typedef ct_status (*ct_dnnl_build_fn)(ct_kargs *k, ct_dnnl *c);

/* Runs the node: on the first call creates *k->cache through `build`, then
 * binds the tensors of this call and executes. */
ct_status ct_dnnl_run(ct_kargs *k, ct_dnnl_build_fn build);

/* Appends to c->what (printf-style). */
void ct_dnnl_describe(ct_dnnl *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Maps a failing oneDNN status to a ct_status with a message on c->ctx. */
ct_status ct_dnnl_fail(ct_dnnl *c, dnnl_status_t st, const char *doing);

#define CT_DNNL_TRY(c, call, doing)                                    \
    do {                                                               \
        dnnl_status_t ct_dnnl_st_ = (call);                            \
        if (ct_dnnl_st_ != dnnl_success) return ct_dnnl_fail((c), ct_dnnl_st_, (doing)); \
    } while (0)

/* 1 when ctrain's own products on AMX tiles (simd/amx.c) may run in place of oneDNN's BF16 primitives: the CPU
 * has AMX-BF16 and the kernel permits it, the context's ISA is AVX-512, oneDNN's own ISA reaches AMX
 * (ONEDNN_MAX_CPU_ISA below it lowers ctrain with oneDNN: the plan's BF16 decisions follow oneDNN's ISA), and
 * the environment variable `var` (CT_ATTENTION_AMX, CT_MATMUL_AMX) is not 0. */
int ct_dnnl_amx_tiles(const ct_context *ctx, const char *var);

/* Plain memory descriptor of dtype dt (f32, bf16, f16) with explicit strides
 * (elements). */
ct_status ct_dnnl_md(ct_dnnl *c, dnnl_memory_desc_t *md, int nd, const int64_t *dims, const int64_t *strides,
                     ct_dtype dt);
/* Memory descriptor from a format tag (may be dnnl_format_tag_any). */
ct_status ct_dnnl_md_tag(ct_dnnl *c, dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_format_tag_t tag,
                         ct_dtype dt);
/* " (bf16 x bf16 -> f32)" for messages when some tensor is not f32, else "". */
const char *ct_dnnl_dtypes_str(int n, const ct_dtype *dts, ct_dtype out, char *buf, size_t len);

/* A memory object that points at k->in[slot] (or k->out) on every call. */
ct_status ct_dnnl_user(ct_dnnl *c, const dnnl_memory_desc_t *md, int slot, dnnl_memory_t *out);
/* Input `slot` in layout user_md, as the primitive wants it (want): the user
 * memory itself when the layouts agree, else an owned buffer filled by a
 * reorder step added now (call before ct_dnnl_add). */
ct_status ct_dnnl_input(ct_dnnl *c, const dnnl_memory_desc_t *user_md, int slot, const dnnl_memory_desc_t *want,
                        dnnl_memory_t *out);
/* Input `slot`, a weight copy (ct_kargs.in_wcopy), in layout `want` in a buffer of the node's own that
 * lives between calls: the reorder into it runs on the first call and again only when the weight copies
 * change (ct_kargs.wgen) or the tensor moves; a call whose input is not a weight copy reorders every time.
 * One per node. */
ct_status ct_dnnl_input_kept(ct_dnnl *c, const dnnl_memory_desc_t *user_md, int slot, const dnnl_memory_desc_t *want,
                             dnnl_memory_t *out);
/* A buffer of layout md in the node's scratch region (for c->pre to fill);
 * *off: its offset in the region. */
ct_status ct_dnnl_buffer(ct_dnnl *c, const dnnl_memory_desc_t *md, dnnl_memory_t *out, size_t *off);
/* `from` (a memory object of this node) in layout want: itself when the
 * layouts agree, else an owned buffer filled by a reorder step added now. */
ct_status ct_dnnl_convert(ct_dnnl *c, dnnl_memory_t from, const dnnl_memory_desc_t *want, dnnl_memory_t *out);
/* The output, likewise; its reorder back is added right after the next
 * ct_dnnl_add. */
ct_status ct_dnnl_output(ct_dnnl *c, const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *want,
                         dnnl_memory_t *out);
/* Creates the primitive of pd (pd stays owned by the caller) as the next step
 * with these arguments (the scratchpad is added by the runner). */
ct_status ct_dnnl_add(ct_dnnl *c, const_dnnl_primitive_desc_t pd, int nargs, const dnnl_exec_arg_t *args);
/* Whether oneDNN runs pd on a brgemm kernel (its implementation's name starts with "brg"): 1 yes, 0 no,
 * -1 when the name cannot be queried. The kernels' rules read it (the name, not a timing: plans stay
 * deterministic). */
int ct_dnnl_impl_brgemm(const_dnnl_primitive_desc_t pd);
/* Creates a primitive descriptor; `doing` names the step for messages. */
ct_status ct_dnnl_pd(ct_dnnl *c, dnnl_primitive_desc_t *pd, const_dnnl_op_desc_t op, const_dnnl_primitive_desc_t hint,
                     const char *doing);

/* Layout policy for convolutions (see conv.c). */
typedef enum { CT_DNNL_LAYOUT_AUTO = 0, CT_DNNL_LAYOUT_PLAIN, CT_DNNL_LAYOUT_BLOCKED } ct_dnnl_layout;
/* CT_ONEDNN_CONV_LAYOUT=plain|blocked overrides the built-in choice (for
 * benchmarks); read when a node's primitives are created. */
ct_dnnl_layout ct_dnnl_layout_override(void);

#endif
