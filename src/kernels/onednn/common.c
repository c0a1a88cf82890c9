/* src/kernels/onednn/common.c - the per-node oneDNN cache: creation on the
 * first call, binding and execution on every call, errors, freeing. */
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl_debug.h>

#include "kernels/onednn/onednn.h"

ct_status ct_dnnl_fail(ct_dnnl *c, dnnl_status_t st, const char *doing) {
    /* While the primitives are being created, a configuration oneDNN rejects
     * (unimplemented, or arguments it does not accept) is "unsupported": the
     * executor then runs the next kernel for this node. */
    ct_status s;
    const char *advice;
    if (st == dnnl_out_of_memory) {
        s = CT_E_OOM;
        advice = "; lower the batch size";
    } else if (st == dnnl_unimplemented || (st == dnnl_invalid_arguments && !c->ready)) {
        s = CT_E_UNSUPPORTED;
        advice = "; oneDNN does not provide this configuration, the next kernel runs instead";
    } else {
        s = CT_E_INTERNAL;
        advice = "; set CT_ONEDNN=0 to run the built-in kernels instead";
    }
    return ct_set_error(c->ctx, s, "oneDNN %s: %s failed (%s)%s", c->what, doing, dnnl_status2str(st), advice);
}

void ct_dnnl_describe(ct_dnnl *c, const char *fmt, ...) {
    size_t n = strlen(c->what);
    if (n + 1 >= sizeof c->what) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->what + n, sizeof c->what - n, fmt, ap);
    va_end(ap);
}

/* oneDNN's data type of a float dtype; dnnl_data_type_undef otherwise. */
static dnnl_data_type_t dnnl_dt(ct_dtype dt) {
    switch (dt) {
    case CT_F32: return dnnl_f32;
    case CT_BF16: return dnnl_bf16;
    case CT_F16: return dnnl_f16;
    default: return dnnl_data_type_undef;
    }
}

static ct_status check_dt(ct_dnnl *c, ct_dtype dt) {
    if (dnnl_dt(dt) != dnnl_data_type_undef) return CT_OK;
    return ct_set_error(c->ctx, CT_E_UNSUPPORTED, "oneDNN %s: a tensor has dtype %s, the next kernel runs instead",
                        c->what, ct_dtype_name(dt));
}

ct_status ct_dnnl_md(ct_dnnl *c, dnnl_memory_desc_t *md, int nd, const int64_t *dims, const int64_t *strides,
                     ct_dtype dt) {
    CT_TRY(check_dt(c, dt));
    CT_DNNL_TRY(c, dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_dt(dt), strides), "describing a tensor");
    return CT_OK;
}

ct_status ct_dnnl_md_tag(ct_dnnl *c, dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_format_tag_t tag,
                         ct_dtype dt) {
    CT_TRY(check_dt(c, dt));
    CT_DNNL_TRY(c, dnnl_memory_desc_init_by_tag(md, nd, dims, dnnl_dt(dt), tag), "describing a tensor");
    return CT_OK;
}

const char *ct_dnnl_dtypes_str(int n, const ct_dtype *dts, ct_dtype out, char *buf, size_t len) {
    int all_f32 = out == CT_F32;
    for (int i = 0; i < n; i++) all_f32 &= dts[i] == CT_F32;
    if (all_f32 || !len) {
        if (len) buf[0] = 0;
        return buf;
    }
    int o = snprintf(buf, len, " (");
    for (int i = 0; i < n && o > 0 && (size_t)o < len; i++)
        o += snprintf(buf + o, len - (size_t)o, "%s%s", i ? " x " : "", ct_dtype_name(dts[i]));
    if (o > 0 && (size_t)o < len) snprintf(buf + o, len - (size_t)o, " -> %s)", ct_dtype_name(out));
    return buf;
}

/* Re-words a failed ct_alloc's message to name the node. */
static ct_status alloc_failed(ct_context *ctx, ct_status s, const char *what, const char *purpose, size_t bytes) {
    char msg[512];
    const char *e = ct_context_last_error(ctx), *colon = strstr(e, ": ");
    snprintf(msg, sizeof msg, "%s", colon ? colon + 2 : e);
    return ct_set_error(ctx, s, "oneDNN %s: %s (%zu bytes): %s", what, purpose, bytes, msg);
}

static ct_status add_mem(ct_dnnl *c, const dnnl_memory_desc_t *md, void *handle, dnnl_memory_t *out) {
    if (c->nmems >= CT_DNNL_MAX_MEMS)
        return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: too many memory objects", c->what);
    CT_DNNL_TRY(c, dnnl_memory_create(out, md, c->engine, handle), "creating a memory object");
    c->mems[c->nmems++] = *out;
    return CT_OK;
}

/* A memory object at the next offset of the node's scratch region (bound to
 * the context's scratch on every call). */
static ct_status region_mem(ct_dnnl *c, const dnnl_memory_desc_t *md, size_t bytes, dnnl_memory_t *out) {
    if (c->nowned >= CT_DNNL_MAX_MEMS)
        return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: too many buffers", c->what);
    CT_TRY(add_mem(c, md, DNNL_MEMORY_NONE, out));
    size_t off = (c->scratch_total + 63) & ~(size_t)63;
    c->owned[c->nowned].mem = *out;
    c->owned[c->nowned].off = off;
    c->nowned++;
    c->scratch_total = off + bytes;
    return CT_OK;
}

/* A buffer in the primitive's layout md (a reordered copy). */
static ct_status owned_mem(ct_dnnl *c, const dnnl_memory_desc_t *md, dnnl_memory_t *out) {
    return region_mem(c, md, dnnl_memory_desc_get_size(md), out);
}

ct_status ct_dnnl_user(ct_dnnl *c, const dnnl_memory_desc_t *md, int slot, dnnl_memory_t *out) {
    if (c->nbinds >= CT_DNNL_MAX_BINDS)
        return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: too many bound tensors", c->what);
    CT_TRY(add_mem(c, md, DNNL_MEMORY_NONE, out));
    c->binds[c->nbinds].mem = *out;
    c->binds[c->nbinds].slot = slot;
    c->nbinds++;
    return CT_OK;
}

static ct_status add_step(ct_dnnl *c, const_dnnl_primitive_desc_t pd, int nargs, const dnnl_exec_arg_t *args) {
    if (c->nsteps >= CT_DNNL_MAX_STEPS || nargs >= CT_DNNL_MAX_ARGS)
        return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: too many primitives or arguments", c->what);
    ct_dnnl_step *s = &c->steps[c->nsteps];
    memset(s, 0, sizeof *s);
    CT_DNNL_TRY(c, dnnl_primitive_create(&s->prim, pd), "creating the primitive");
    c->nsteps++; /* owned from here on */
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (sp && sp->ndims > 0) {
        s->scratch_md = *sp;
        s->scratch_bytes = dnnl_memory_desc_get_size(sp);
    }
    s->nargs = nargs;
    memcpy(s->args, args, (size_t)nargs * sizeof *args);
    return CT_OK;
}

static ct_status add_reorder(ct_dnnl *c, dnnl_memory_t from, dnnl_memory_t to) {
    const dnnl_memory_desc_t *fmd, *tmd;
    CT_DNNL_TRY(c, dnnl_memory_get_memory_desc(from, &fmd), "querying a memory object");
    CT_DNNL_TRY(c, dnnl_memory_get_memory_desc(to, &tmd), "querying a memory object");
    dnnl_primitive_desc_t pd;
    CT_DNNL_TRY(c, dnnl_reorder_primitive_desc_create(&pd, fmd, c->engine, tmd, c->engine, c->attr),
                "creating a reorder between layouts");
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    ct_status s = add_step(c, pd, 2, args);
    dnnl_primitive_desc_destroy(pd);
    return s;
}

ct_status ct_dnnl_buffer(ct_dnnl *c, const dnnl_memory_desc_t *md, dnnl_memory_t *out, size_t *off) {
    CT_TRY(owned_mem(c, md, out));
    *off = c->owned[c->nowned - 1].off;
    return CT_OK;
}

ct_status ct_dnnl_convert(ct_dnnl *c, dnnl_memory_t from, const dnnl_memory_desc_t *want, dnnl_memory_t *out) {
    if (!want) return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: the primitive did not report a layout", c->what);
    const dnnl_memory_desc_t *fmd;
    CT_DNNL_TRY(c, dnnl_memory_get_memory_desc(from, &fmd), "querying a memory object");
    if (dnnl_memory_desc_equal(fmd, want)) {
        *out = from;
        return CT_OK;
    }
    CT_TRY(owned_mem(c, want, out));
    return add_reorder(c, from, *out);
}

ct_status ct_dnnl_input(ct_dnnl *c, const dnnl_memory_desc_t *user_md, int slot, const dnnl_memory_desc_t *want,
                        dnnl_memory_t *out) {
    dnnl_memory_t um;
    CT_TRY(ct_dnnl_user(c, user_md, slot, &um));
    return ct_dnnl_convert(c, um, want, out);
}

ct_status ct_dnnl_input_kept(ct_dnnl *c, const dnnl_memory_desc_t *user_md, int slot, const dnnl_memory_desc_t *want,
                             dnnl_memory_t *out) {
    if (!want) return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: the primitive did not report a layout", c->what);
    if (c->kept.buf) return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: a second kept input", c->what);
    dnnl_memory_t um;
    CT_TRY(ct_dnnl_user(c, user_md, slot, &um));
    size_t bytes = dnnl_memory_desc_get_size(want);
    ct_status s = ct_alloc(c->ctx, bytes, &c->kept.buf);
    if (s != CT_OK) return alloc_failed(c->ctx, s, c->what, "allocating its packed weight", bytes);
    memset(c->kept.buf, 0, bytes); /* a blocked layout's padding stays zero; the reorder writes the rest */
    c->kept.bytes = bytes;
    c->kept.slot = slot;
    c->kept.filled = 0;
    CT_TRY(add_mem(c, want, c->kept.buf, out));
    c->kept.step = c->nsteps;
    return add_reorder(c, um, *out);
}

void ct_onednn_cache_kept(const void *cache, size_t *bytes, uint64_t *fills) {
    const ct_dnnl *c = cache;
    *bytes = c ? c->kept.bytes : 0;
    *fills = c ? c->kept.fills : 0;
}

ct_status ct_dnnl_output(ct_dnnl *c, const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *want,
                         dnnl_memory_t *out) {
    if (!want) return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: the primitive did not report a layout", c->what);
    dnnl_memory_t um;
    CT_TRY(ct_dnnl_user(c, user_md, CT_DNNL_OUT, &um));
    if (dnnl_memory_desc_equal(user_md, want)) {
        *out = um;
        return CT_OK;
    }
    if (c->npending >= CT_DNNL_MAX_BINDS)
        return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: too many outputs", c->what);
    CT_TRY(owned_mem(c, want, out));
    c->pending[c->npending].from = *out;
    c->pending[c->npending].to = um;
    c->npending++;
    return CT_OK;
}

ct_status ct_dnnl_add(ct_dnnl *c, const_dnnl_primitive_desc_t pd, int nargs, const dnnl_exec_arg_t *args) {
    CT_TRY(add_step(c, pd, nargs, args));
    const char *impl = NULL; /* the node's main primitive (the reorders are added by add_reorder) */
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(c->impl, sizeof c->impl, "%s", impl);
    for (int i = 0; i < c->npending; i++) CT_TRY(add_reorder(c, c->pending[i].from, c->pending[i].to));
    c->npending = 0;
    return CT_OK;
}

int ct_dnnl_amx_tiles(const ct_context *ctx, const char *var) {
    const ct_cpu_features *f = ct_context_cpu(ctx);
    const char *e = getenv(var);
    if (e && !strcmp(e, "0")) return 0;
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
    return f->amx_bf16 && f->amx_permitted && ct_context_isa(ctx) >= CT_ISA_AVX512 && (isa & amx) == amx;
}

int ct_dnnl_impl_brgemm(const_dnnl_primitive_desc_t pd) {
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl) return -1;
    return !strncmp(impl, "brg", 3);
}

ct_status ct_dnnl_pd(ct_dnnl *c, dnnl_primitive_desc_t *pd, const_dnnl_op_desc_t op, const_dnnl_primitive_desc_t hint,
                     const char *doing) {
    CT_DNNL_TRY(c, dnnl_primitive_desc_create(pd, op, c->attr, c->engine, hint), doing);
    return CT_OK;
}

ct_dnnl_layout ct_dnnl_layout_override(void) {
    const char *e = getenv("CT_ONEDNN_CONV_LAYOUT");
    if (!e) return CT_DNNL_LAYOUT_AUTO;
    if (!strcmp(e, "plain")) return CT_DNNL_LAYOUT_PLAIN;
    if (!strcmp(e, "blocked")) return CT_DNNL_LAYOUT_BLOCKED;
    return CT_DNNL_LAYOUT_AUTO;
}

const char *ct_onednn_cache_impl(const void *cache) {
    const ct_dnnl *c = cache;
    return c && c->ready && c->impl[0] ? c->impl : NULL;
}

void ct_onednn_cache_free(void *cache) {
    ct_dnnl *c = cache;
    if (!c) return;
    if (c->ext_free) c->ext_free(c);
    for (int i = 0; i < c->nsteps; i++)
        if (c->steps[i].prim) dnnl_primitive_destroy(c->steps[i].prim);
    for (int i = 0; i < c->nmems; i++) dnnl_memory_destroy(c->mems[i]);
    ct_free(c->ctx, c->kept.buf);
    if (c->attr) dnnl_primitive_attr_destroy(c->attr);
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->engine) dnnl_engine_destroy(c->engine);
    ct_free(c->ctx, c);
}

/* One scratchpad (the largest need) shared by the node's primitives, which
 * run one after the other: one offset of the region for all of them. */
static ct_status attach_scratchpad(ct_dnnl *c) {
    size_t need = 0;
    for (int i = 0; i < c->nsteps; i++) need = CT_MAX(need, c->steps[i].scratch_bytes);
    if (!need) return CT_OK;
    size_t off = (c->scratch_total + 63) & ~(size_t)63;
    for (int i = 0; i < c->nsteps; i++) {
        ct_dnnl_step *s = &c->steps[i];
        if (!s->scratch_bytes) continue;
        if (c->nowned >= CT_DNNL_MAX_MEMS)
            return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: too many buffers", c->what);
        dnnl_memory_t m;
        CT_TRY(add_mem(c, &s->scratch_md, DNNL_MEMORY_NONE, &m));
        c->owned[c->nowned].mem = m;
        c->owned[c->nowned].off = off;
        c->nowned++;
        s->args[s->nargs].arg = DNNL_ARG_SCRATCHPAD;
        s->args[s->nargs].memory = m;
        s->nargs++;
    }
    c->scratch_total = off + need;
    return CT_OK;
}

/* The op's name for messages (the executor passes it in ct_kargs). */
static const char *op_name(const ct_kargs *k) { return k->op_name ? k->op_name : "op"; }

static ct_status create(ct_kargs *k, ct_dnnl_build_fn build, int nthreads, ct_dnnl **out) {
    ct_dnnl *c;
    ct_status s = ct_alloc(k->ctx, sizeof *c, (void **)&c);
    if (s != CT_OK) {
        char what[320], sh[96];
        int o = snprintf(what, sizeof what, "%s '%s' (", op_name(k), k->node->name);
        for (int i = 0; i < k->node->n_in && o > 0 && (size_t)o < sizeof what; i++)
            o += snprintf(what + o, sizeof what - (size_t)o, "%s%s", i ? ", " : "",
                          ct_shape_str(k->in[i].ndim, k->in[i].shape, sh, sizeof sh));
        if (o > 0 && (size_t)o < sizeof what)
            snprintf(what + o, sizeof what - (size_t)o, " -> %s)", ct_shape_str(k->out.ndim, k->out.shape, sh, sizeof sh));
        return alloc_failed(k->ctx, s, what, "allocating the primitive cache", sizeof *c);
    }
    memset(c, 0, sizeof *c);
    c->ctx = k->ctx;
    c->nthreads = nthreads;
    snprintf(c->what, sizeof c->what, "%s '%s'", op_name(k), k->node->name);
    dnnl_status_t st = dnnl_engine_create(&c->engine, dnnl_cpu, 0);
    if (st != dnnl_success) {
        c->engine = NULL;
        s = ct_dnnl_fail(c, st, "creating the CPU engine");
    }
    if (s == CT_OK && (st = dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags)) != dnnl_success) {
        c->stream = NULL;
        s = ct_dnnl_fail(c, st, "creating a stream");
    }
    if (s == CT_OK && (st = dnnl_primitive_attr_create(&c->attr)) != dnnl_success) {
        c->attr = NULL;
        s = ct_dnnl_fail(c, st, "creating primitive attributes");
    }
    if (s == CT_OK && (st = dnnl_primitive_attr_set_scratchpad_mode(c->attr, dnnl_scratchpad_mode_user)) != dnnl_success)
        s = ct_dnnl_fail(c, st, "setting the scratchpad mode");
    if (s == CT_OK) s = build(k, c);
    if (s == CT_OK && c->npending)
        s = ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: an output reorder was never scheduled", c->what);
    if (s == CT_OK) s = attach_scratchpad(c);
    if (s != CT_OK) {
        ct_onednn_cache_free(c);
        return s;
    }
    c->ready = 1;
    *out = c;
    return CT_OK;
}

static ct_status execute(ct_kargs *k, ct_dnnl *c) {
    void *base = NULL;
    if (c->scratch_total) {
        if (!k->scratch)
            return ct_set_error(c->ctx, CT_E_INTERNAL, "oneDNN %s: the executor passed no scratch", c->what);
        ct_status s = ct_scratch_reserve(c->ctx, k->scratch, c->scratch_total, &base);
        if (s != CT_OK)
            return alloc_failed(c->ctx, s, c->what, "allocating the shared scratch for its layout copies and scratchpad",
                                c->scratch_total);
        for (int i = 0; i < c->nowned; i++)
            CT_DNNL_TRY(c, dnnl_memory_set_data_handle(c->owned[i].mem, (char *)base + c->owned[i].off),
                        "binding a buffer in the scratch");
        if (c->pre) CT_TRY(c->pre(c, k, base));
    }
    if (c->run) return c->run(c, k, base);
    for (int i = 0; i < c->nbinds; i++) {
        int slot = c->binds[i].slot;
        void *p = slot == CT_DNNL_OUT ? k->out.data : k->in[slot].data;
        CT_DNNL_TRY(c, dnnl_memory_set_data_handle(c->binds[i].mem, p), "binding a tensor");
    }
    /* the kept input is current: same weight copies (generation) at the same address since it was filled */
    const int ks = c->kept.buf ? c->kept.step : -1;
    const void *ksrc = ks >= 0 ? k->in[c->kept.slot].data : NULL;
    const int kept_current = ks >= 0 && c->kept.filled && (k->in_wcopy >> c->kept.slot & 1u) &&
                             c->kept.gen == k->wgen && c->kept.src == ksrc;
    if (ks >= 0) c->kept.filled = 0; /* until its reorder below has run */
    for (int i = 0; i < c->nsteps; i++) {
        if (i == ks && kept_current) continue;
        if (i == ks) c->kept.fills++;
        CT_DNNL_TRY(c, dnnl_primitive_execute(c->steps[i].prim, c->stream, c->steps[i].nargs, c->steps[i].args),
                    "executing");
    }
    CT_DNNL_TRY(c, dnnl_stream_wait(c->stream), "waiting for the stream");
    if (ks >= 0 && (k->in_wcopy >> c->kept.slot & 1u)) {
        c->kept.filled = 1;
        c->kept.gen = k->wgen;
        c->kept.src = ksrc;
    }
    return CT_OK;
}

ct_status ct_dnnl_run(ct_kargs *k, ct_dnnl_build_fn build) {
    if (!k->cache)
        return ct_set_error(k->ctx, CT_E_INTERNAL, "oneDNN %s '%s': no cache slot", op_name(k),
                            k->node->name);
    ct_dnnl *c = *k->cache;
    /* oneDNN's OpenMP runtime uses omp_get_max_threads(), both when it plans a
     * primitive and when it runs it: set the context's count around both. */
    int prev = omp_get_max_threads();
    int n = c ? c->nthreads : (k->nthreads > 0 ? k->nthreads : prev);
    if (n != prev) omp_set_num_threads(n);
    ct_status s = CT_OK;
    if (!c) {
        s = create(k, build, n, &c);
        if (s == CT_OK) *k->cache = c;
    }
    if (s == CT_OK) s = execute(k, c);
    if (n != prev) omp_set_num_threads(prev);
    return s;
}
