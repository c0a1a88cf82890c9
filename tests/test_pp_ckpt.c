/* tests/test_pp_ckpt.c - weights files and checkpoints of pipeline stages stay in the one-process format
 * (src/io/pp_files.c; tests/dist_test.sh runs it under mpirun at 2 and 4 ranks; alone it is a world of one,
 * where the one stage is the whole model and the checks below still run, through the same collectives).
 *
 * Each of the P ranks builds the same GPT (4 layers, tied embedding / LM head), cut into P pieces at balanced
 * block boundaries, and compiles the stage plan holding piece = its rank (pipeline group: the world), and the
 * whole plan (no stages). Checked:
 *  - ct_weights_save of the stages writes the very bytes the whole plan's ct_weights_save writes;
 *  - ct_weights_load of a whole-model file gives every stage its tensors' values;
 *  - a checkpoint saved from the stages (AdamW, one step) is byte for byte the whole plan's after the same
 *    step, and loads into the whole plan and optimizer with equal values; one saved from the whole plan (two
 *    steps) loads into the stages with equal values and step count;
 *  - a file with an extra tensor is the "from another model" error on every rank, and so is a whole file
 *    loaded by stages that leave half the model to nobody (every rank holding the first of two pieces); a
 *    stage whose file is missing fails every rank's load (no rank waits);
 *  - at 4 ranks, tensor 2 x pipeline 2 (ct_comm_grid): the weights file and both checkpoint files are one
 *    process's byte for byte, and checkpoints load both ways with every shard equal to its slice. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#define TRY(e)                          \
    do {                                \
        ct_status t_ = (e);             \
        if (t_ != CT_OK) return t_;     \
    } while (0)

static ct_context *g_ctx;
static ct_comm *g_world;

enum { B = 2, TT = 8, V = 61 };

typedef struct {
    ct_graph *g;
    ct_node ids, labels, loss;
} model;

/* tp: the tensor group (NULL: none) */
static ct_status build_tp(model *m, ct_comm *tp) {
    TRY(ct_graph_create(g_ctx, &m->g));
    ct_graph *g = m->g;
    ct_node logits, flat, lab;
    int nd;
    int64_t ls[CT_MAX_DIMS];
    ct_status s = tp ? ct_graph_set_tensor_group(g, tp) : CT_OK;
    if (s == CT_OK) s = ct_input(g, "ids", CT_I32, 2, (int64_t[]){B, TT}, &m->ids);
    if (s == CT_OK) s = ct_input(g, "labels", CT_I32, 2, (int64_t[]){B, TT}, &m->labels);
    ct_gpt_config c = {.vocab = V, .context = TT, .n_layer = 4, .n_head = 2, .d_model = 16, .dropout = 0.0f,
                       .bias = 1, .gelu_tanh = 1};
    if (s == CT_OK) s = ct_model_gpt(g, m->ids, &c, &logits);
    if (s == CT_OK) s = ct_node_shape(g, logits, &nd, ls); /* tensor parallel: the vocabulary's shard */
    if (s == CT_OK) s = ct_reshape(g, logits, 2, (int64_t[]){B * TT, ls[nd - 1]}, &flat);
    if (s == CT_OK) s = ct_reshape(g, m->labels, 1, (int64_t[]){B * TT}, &lab);
    if (s == CT_OK && tp) s = ct_cross_entropy_vp(g, flat, lab, 0.0f, -100, V, &m->loss);
    if (s == CT_OK && !tp) s = ct_cross_entropy(g, flat, lab, 0.0f, -100, &m->loss);
    return s;
}

static ct_status build(model *m) { return build_tp(m, NULL); }

/* piece < 0: the whole plan; else the stage plan holding `piece` of n_pieces (cut at `cuts`), pipeline group pp */
static ct_status compile_pp(const model *m, int n_pieces, const int *cuts, int piece, ct_comm *pp, ct_plan **out) {
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    ct_stage_opts so = {.n_pieces = n_pieces, .cuts = cuts, .n_held = 1, .held = &piece, .group = pp};
    if (piece >= 0) co.stage = &so;
    return ct_compile(m->g, m->loss, 0, NULL, &co, out);
}

static ct_status compile(const model *m, int n_pieces, const int *cuts, int piece, ct_plan **out) {
    return compile_pp(m, n_pieces, cuts, piece, g_world, out);
}

typedef struct {
    ct_plan *stage, *whole;
    int n_pieces;
} pair;

/* The stage of this rank (P pieces, piece = rank; with first_half: 2 pieces, every rank holding piece 0, so
 * that the second half is nobody's) and the whole plan. */
static ct_status setup(pair *p, int first_half) {
    model m;
    memset(p, 0, sizeof *p);
    p->n_pieces = first_half ? 2 : ct_comm_size(g_world);
    int cuts[16];
    ct_status s = build(&m);
    if (s == CT_OK && p->n_pieces > 1) s = ct_graph_balance_cuts(m.g, p->n_pieces, cuts);
    if (s == CT_OK) s = compile(&m, p->n_pieces, cuts, first_half ? 0 : ct_comm_rank(g_world), &p->stage);
    if (s == CT_OK) s = compile(&m, 0, NULL, -1, &p->whole);
    ct_graph_free(m.g);
    return s;
}

static void release(pair *p) {
    ct_plan_free(p->stage);
    ct_plan_free(p->whole);
}

/* A path under /tmp unique to this job (rank 0's pid). */
static void job_path(char *out, size_t len, const char *what) {
    long pid = (long)getpid();
    ct_comm_broadcast(g_world, &pid, sizeof pid, 0);
    snprintf(out, len, "/tmp/test_pp_ckpt.%ld.%s", pid, what);
}

/* 1 when the two files hold the same bytes */
static int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    unsigned char *x = test_read_file(a, &na), *y = test_read_file(b, &nb);
    int same = x && y && na && na == nb && !memcmp(x, y, na);
    if (x && y && !same) fprintf(stderr, "  '%s' (%zu bytes) and '%s' (%zu bytes) differ\n", a, na, b, nb);
    free(x);
    free(y);
    return same;
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Gradients (or, values 1, new parameter values) that depend on the parameter's name and the element only:
 * a stage and the whole plan get the same ones. */
static void fill_params(ct_plan *p, int values, int round) {
    for (int i = 0; i < ct_plan_num_params(p); i++) {
        const char *name;
        ct_tensor v, g;
        if (ct_plan_param_info(p, i, &name, &v, &g) != CT_OK) continue;
        uint64_t h = name_hash(name) + (uint64_t)round * 7919u;
        float *d = values ? v.data : g.data;
        for (int64_t k = 0; k < ct_tensor_numel(&v); k++)
            d[k] = (float)((int64_t)((h >> 7) + (uint64_t)k * 2654435761u) % 2001 - 1000) * (values ? 1e-4f : 1e-3f);
    }
}

/* The stage's parameters, buffers and optimizer state (sopt, wopt may be NULL) equal the whole plan's of the
 * same names, bit for bit; returns the number of tensors compared, -1 on a difference. */
static int compare_v(ct_plan *st, ct_optimizer *sopt, ct_plan *wh, ct_optimizer *wopt, int verbose) {
    float *sarena, *warena, *sstate = NULL, *wstate = NULL;
    size_t sn, wn, ssn = 0, wsn = 0;
    ct_plan_param_arena(st, &sarena, NULL, &sn);
    ct_plan_param_arena(wh, &warena, NULL, &wn);
    if (sopt) ct_optimizer_state(sopt, &sstate, &ssn);
    if (wopt) ct_optimizer_state(wopt, &wstate, &wsn);
    const size_t blocks = sopt && sn ? ssn / sn : 0;
    if (sopt && (!wopt || wsn / wn != blocks)) return -1;
    int compared = 0;
    for (int i = 0; i < ct_plan_num_params(st) + ct_plan_num_buffers(st); i++) {
        const int buf = i >= ct_plan_num_params(st), bi = buf ? i - ct_plan_num_params(st) : i;
        const char *name;
        ct_tensor v;
        if ((buf ? ct_plan_buffer_info(st, bi, &name, &v) : ct_plan_param_info(st, bi, &name, &v, NULL)) != CT_OK)
            return -1;
        const int nw = buf ? ct_plan_num_buffers(wh) : ct_plan_num_params(wh);
        int found = 0;
        for (int j = 0; j < nw && !found; j++) {
            const char *wname;
            ct_tensor w;
            if ((buf ? ct_plan_buffer_info(wh, j, &wname, &w) : ct_plan_param_info(wh, j, &wname, &w, NULL)) != CT_OK ||
                strcmp(name, wname))
                continue;
            found = 1;
            const size_t n = (size_t)ct_tensor_numel(&v);
            ct_shard sh = {.dim = -1}; /* tensor parallel: the stage holds a slice of the whole tensor */
            if (!buf && ct_plan_param_shard(st, bi, &sh) != CT_OK) return -1;
            float *want = malloc(n * sizeof(float) + 1);
            int same = want && (sh.dim >= 0 || n == (size_t)ct_tensor_numel(&w));
            for (size_t b = 0; same && b <= (buf ? 0 : blocks); b++) { /* b 0: the value, then the state blocks */
                const float *have = b ? sstate + (b - 1) * sn + ((float *)v.data - sarena) : v.data;
                float *whole = b ? wstate + (b - 1) * wn + ((float *)w.data - warena) : w.data;
                if (sh.dim >= 0) ct_shard_copy(&sh, v.ndim, v.shape, whole, want, 1);
                else memcpy(want, whole, n * sizeof(float));
                same = !memcmp(have, want, n * sizeof(float));
                if (!same && verbose) fprintf(stderr, "  '%s' (state block %d) differs\n", name, (int)b - 1);
            }
            free(want);
            if (!same) return -1;
            compared++;
        }
        if (!found) {
            fprintf(stderr, "  the whole plan has no '%s'\n", name);
            return -1;
        }
    }
    return compared;
}

static int compare(ct_plan *st, ct_optimizer *sopt, ct_plan *wh, ct_optimizer *wopt) {
    return compare_v(st, sopt, wh, wopt, 1);
}
/* 1 when the stage differs from the whole plan (as expected before a load) */
static int differs(ct_plan *st, ct_optimizer *sopt, ct_plan *wh, ct_optimizer *wopt) {
    return compare_v(st, sopt, wh, wopt, 0) < 0;
}

/* ct_weights_save of the stages (a collective) == the whole plan's file, byte for byte */
TEST(stages_write_the_one_process_file) {
    pair p;
    CHECK_OK(g_ctx, setup(&p, 0));
    const int P = ct_comm_size(g_world), me = ct_comm_rank(g_world);
    char a[160], b[160];
    job_path(a, sizeof a, "stages.safetensors");
    job_path(b, sizeof b, "whole.safetensors");
    printf("  rank %d: stage (piece %d of %d) holds %d of %d parameters, %d of %d buffers\n", me, me, P,
           ct_plan_num_params(p.stage), ct_plan_num_params(p.whole), ct_plan_num_buffers(p.stage),
           ct_plan_num_buffers(p.whole));
    if (P > 1) CHECK(ct_plan_num_params(p.stage) < ct_plan_num_params(p.whole));
    CHECK_OK(g_ctx, ct_weights_save(g_ctx, a, p.stage));
    ct_status ws = me == 0 ? ct_weights_save(g_ctx, b, p.whole) : CT_OK;
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    int same = me == 0 ? same_file(a, b) : 0;
    CHECK_OK(g_ctx, ct_comm_broadcast(g_world, &same, sizeof same, 0));
    if (me == 0) {
        remove(a);
        remove(b);
    }
    CHECK_OK(g_ctx, ws);
    CHECK_MSG(same, "the stages' file is not the one-process file");
    release(&p);
}

/* a whole-model file (not the initial values) loads into every stage */
TEST(whole_file_loads_into_stages) {
    pair p;
    CHECK_OK(g_ctx, setup(&p, 0));
    const int me = ct_comm_rank(g_world);
    char path[160];
    job_path(path, sizeof path, "load.safetensors");
    fill_params(p.whole, 1, 3);
    ct_status ws = me == 0 ? ct_weights_save(g_ctx, path, p.whole) : CT_OK;
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    CHECK(differs(p.stage, NULL, p.whole, NULL)); /* the stage still has its initial values */
    ct_status ls = ct_weights_load(g_ctx, path, p.stage);
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    if (me == 0) remove(path);
    CHECK_OK(g_ctx, ws);
    CHECK_OK(g_ctx, ls);
    int n = compare(p.stage, NULL, p.whole, NULL);
    printf("  rank %d: %d tensors equal the whole file's\n", me, n);
    CHECK(n == ct_plan_num_params(p.stage) + ct_plan_num_buffers(p.stage) && n > 0);
    release(&p);
}

/* one AdamW step on given gradients */
static ct_status step(ct_plan *p, ct_optimizer *o, int round) {
    fill_params(p, 0, round);
    return ct_optimizer_step(o);
}

/* checkpoints: stages -> whole and whole -> stages */
TEST(checkpoints_between_stages_and_whole) {
    pair p;
    CHECK_OK(g_ctx, setup(&p, 0));
    const int me = ct_comm_rank(g_world);
    ct_optim_opts oo;
    ct_optim_opts_default(&oo, CT_OPTIM_ADAMW);
    ct_optimizer *so, *wo, *w2o;
    ct_plan *w2;
    model m;
    CHECK_OK(g_ctx, build(&m));
    CHECK_OK(g_ctx, compile(&m, 0, NULL, -1, &w2));
    ct_graph_free(m.g);
    CHECK_OK(g_ctx, ct_optimizer_create(p.stage, &oo, &so));
    CHECK_OK(g_ctx, ct_optimizer_create(p.whole, &oo, &wo));
    CHECK_OK(g_ctx, ct_optimizer_create(w2, &oo, &w2o));
    CHECK_OK(g_ctx, step(p.stage, so, 1));
    CHECK_OK(g_ctx, step(p.whole, wo, 1));
    char a[160], b[160], c[160], fa[240], fb[240];
    job_path(a, sizeof a, "ckpt-stages");
    job_path(b, sizeof b, "ckpt-whole");
    job_path(c, sizeof c, "ckpt-whole2");
    ct_train_state st;
    ct_train_state_init(&st);
    st.step = 1;
    st.epoch = 2;
    ct_checkpoint_opts co;
    ct_checkpoint_opts_default(&co);
    co.fsync = 0;
    CHECK_OK(g_ctx, ct_checkpoint_save_ex(g_ctx, a, p.stage, so, &st, &co));
    ct_status ws = me == 0 ? ct_checkpoint_save_ex(g_ctx, b, p.whole, wo, &st, &co) : CT_OK;
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    int same[2] = {0, 0};
    const char *files[2] = {"model.safetensors", "train_state.safetensors"};
    for (int k = 0; me == 0 && k < 2; k++) {
        snprintf(fa, sizeof fa, "%s/step-000001/%s", a, files[k]);
        snprintf(fb, sizeof fb, "%s/step-000001/%s", b, files[k]);
        same[k] = same_file(fa, fb);
    }
    CHECK_OK(g_ctx, ct_comm_broadcast(g_world, same, sizeof same, 0));
    CHECK_OK(g_ctx, ws);
    CHECK_MSG(same[0] && same[1], "the stages' checkpoint differs from the whole plan's (model %d, state %d)",
              same[0], same[1]);
    /* stages -> a fresh whole plan and optimizer */
    ct_train_state got;
    CHECK_OK(g_ctx, ct_checkpoint_load(g_ctx, a, w2, w2o, &got));
    CHECK(got.step == 1 && got.epoch == 2 && ct_optimizer_steps(w2o) == 1);
    int n1 = compare(p.stage, so, w2, w2o);
    /* whole (a second step) -> the stages */
    CHECK_OK(g_ctx, step(p.whole, wo, 2));
    st.step = 2;
    ws = me == 0 ? ct_checkpoint_save_ex(g_ctx, c, p.whole, wo, &st, &co) : CT_OK;
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    CHECK(differs(p.stage, so, p.whole, wo)); /* the stage is one step behind */
    ct_status ls = ct_checkpoint_load(g_ctx, c, p.stage, so, &got);
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    if (me == 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s'", a, b, c);
        CHECK(system(cmd) == 0);
    }
    CHECK_OK(g_ctx, ws);
    CHECK_OK(g_ctx, ls);
    CHECK(got.step == 2 && ct_optimizer_steps(so) == 2);
    int n2 = compare(p.stage, so, p.whole, wo);
    printf("  rank %d: stages -> whole: %d tensors and their AdamW state equal; whole -> stage: %d\n", me, n1, n2);
    CHECK(n1 == ct_plan_num_params(p.stage) + ct_plan_num_buffers(p.stage) && n1 > 0);
    CHECK(n2 == n1);
    ct_optimizer_free(so);
    ct_optimizer_free(wo);
    ct_optimizer_free(w2o);
    ct_plan_free(w2);
    release(&p);
}

/* The whole file with one more tensor "zzz.extra" (1 float), without its CRC (a weights file need not have one). */
static int write_with_extra(const char *from, const char *to) {
    size_t n = 0;
    unsigned char *b = test_read_file(from, &n);
    if (!b || n < 8) return 0;
    uint64_t hl;
    memcpy(&hl, b, 8);
    char *hdr = malloc(hl + 256);
    if (!hdr) return 0;
    memcpy(hdr, b + 8, hl);
    size_t len = hl;
    while (len && hdr[len - 1] == ' ') len--;
    hdr[len] = 0;
    char *crc = strstr(hdr, "ctrain_crc32");
    if (!crc || hdr[len - 1] != '}') return 0;
    crc[11] = 'x'; /* no checksum any more */
    const size_t data = n - 8 - hl;
    len += (size_t)snprintf(hdr + len - 1, 200, ",\"zzz.extra\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}}",
                            data, data + 4) - 1;
    while (len % 8) hdr[len++] = ' ';
    FILE *f = fopen(to, "wb");
    uint64_t nl = len;
    float extra = 1.5f;
    int ok = f && fwrite(&nl, 8, 1, f) == 1 && fwrite(hdr, 1, len, f) == len && fwrite(b + 8 + hl, 1, data, f) == data &&
             fwrite(&extra, 4, 1, f) == 1;
    if (f && fclose(f) != 0) ok = 0;
    free(hdr);
    free(b);
    return ok;
}

static int another_model(ct_status s, const char *name) {
    const char *e = ct_context_last_error(g_ctx);
    int ok = s == CT_E_CONFIG && strstr(e, "from another model") && strstr(e, name);
    if (!ok) fprintf(stderr, "  got %s: %s\n", ct_status_name(s), e);
    return ok;
}

/* a tensor of the file no stage has: the "from another model" error on every rank, nothing loaded */
TEST(extra_tensor_is_another_model) {
    pair p;
    CHECK_OK(g_ctx, setup(&p, 0));
    const int me = ct_comm_rank(g_world);
    char whole[160], extra[160];
    job_path(whole, sizeof whole, "x-whole.safetensors");
    job_path(extra, sizeof extra, "x-extra.safetensors");
    fill_params(p.whole, 1, 5);
    int ok = me == 0 ? ct_weights_save(g_ctx, whole, p.whole) == CT_OK && write_with_extra(whole, extra) : 1;
    CHECK_OK(g_ctx, ct_comm_broadcast(g_world, &ok, sizeof ok, 0));
    CHECK_MSG(ok, "cannot write the files");
    ct_status s1 = ct_weights_load(g_ctx, extra, p.stage);
    int r1 = another_model(s1, "zzz.extra");
    int untouched = differs(p.stage, NULL, p.whole, NULL);
    ct_plan_free(p.whole);
    p.whole = NULL;
    /* every rank holding the first of two pieces: the second half's tensors are nobody's */
    pair q;
    CHECK_OK(g_ctx, setup(&q, 1));
    ct_status s2 = ct_weights_load(g_ctx, whole, q.stage);
    int r2 = another_model(s2, "no pipeline stage has it");
    release(&q);
    /* a stage that cannot read its file (the last rank's is missing): every rank fails, nobody waits */
    const int P = ct_comm_size(g_world);
    ct_status s3 = CT_OK;
    if (P > 1) {
        s3 = ct_weights_load(g_ctx, me == P - 1 ? "/nonexistent/test_pp_ckpt.safetensors" : whole, p.stage);
        if (s3 != CT_E_IO) fprintf(stderr, "  got %s: %s\n", ct_status_name(s3), ct_context_last_error(g_ctx));
    }
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    if (me == 0) {
        remove(whole);
        remove(extra);
    }
    printf("  rank %d: an extra tensor: %s; half the model held by nobody: %s; one stage's file missing: %s\n", me,
           ct_status_name(s1), ct_status_name(s2), P > 1 ? ct_status_name(s3) : "skipped (one rank)");
    CHECK(r1);
    CHECK_MSG(untouched, "a refused load changed the stage");
    CHECK(r2);
    CHECK(P == 1 || s3 == CT_E_IO);
    release(&p);
}

/* The stage's gradients: the slices of the whole plan's (a stage of a tensor-parallel model holds shards). */
static ct_status copy_grads(ct_plan *st, ct_plan *wh) {
    for (int i = 0; i < ct_plan_num_params(st); i++) {
        const char *name, *wname;
        ct_tensor g, wg;
        ct_shard sh;
        TRY(ct_plan_param_info(st, i, &name, NULL, &g));
        TRY(ct_plan_param_shard(st, i, &sh));
        int j = 0;
        while (j < ct_plan_num_params(wh) && ct_plan_param_info(wh, j, &wname, NULL, &wg) == CT_OK && strcmp(name, wname))
            j++;
        if (j == ct_plan_num_params(wh)) return CT_E_INTERNAL;
        if (sh.dim >= 0) ct_shard_copy(&sh, g.ndim, g.shape, wg.data, g.data, 1);
        else memcpy(g.data, wg.data, (size_t)ct_tensor_numel(&g) * sizeof(float));
    }
    return CT_OK;
}

/* tensor 2 x pipeline 2 (4 ranks): the shards gathered within each stage, then the stages on pipeline rank 0 */
TEST(tensor_and_pipeline_parallel) {
    const int me = ct_comm_rank(g_world);
    if (ct_comm_size(g_world) != 4) {
        printf("  skipped: needs 4 ranks (tensor 2 x pipeline 2)\n");
        return;
    }
    ct_comm_grid *grid;
    CHECK_OK(g_ctx, ct_comm_grid_create(g_world, 2, 2, &grid));
    model m, wm;
    int cuts[1];
    ct_plan *st, *wh, *wh2;
    CHECK_OK(g_ctx, build_tp(&m, grid->tensor_group));
    CHECK_OK(g_ctx, ct_graph_balance_cuts(m.g, 2, cuts));
    CHECK_OK(g_ctx, compile_pp(&m, 2, cuts, grid->pipeline_rank, grid->pipeline_group, &st));
    ct_graph_free(m.g);
    CHECK_OK(g_ctx, build(&wm));
    CHECK_OK(g_ctx, compile(&wm, 0, NULL, -1, &wh));
    CHECK_OK(g_ctx, compile(&wm, 0, NULL, -1, &wh2));
    ct_graph_free(wm.g);
    char a[160], b[160], c[160], d[160], fa[240], fb[240];
    job_path(a, sizeof a, "tp-stages.safetensors");
    job_path(b, sizeof b, "tp-whole.safetensors");
    job_path(c, sizeof c, "tp-ckpt-stages");
    job_path(d, sizeof d, "tp-ckpt-whole");
    /* the weights file */
    CHECK_OK(g_ctx, ct_weights_save(g_ctx, a, st));
    ct_status ws = me == 0 ? ct_weights_save(g_ctx, b, wh) : CT_OK;
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    int same[3] = {me == 0 && same_file(a, b), 0, 0};
    /* a checkpoint after one AdamW step on the same gradients */
    ct_optim_opts oo;
    ct_optim_opts_default(&oo, CT_OPTIM_ADAMW);
    ct_optimizer *so, *wo, *w2o;
    CHECK_OK(g_ctx, ct_optimizer_create(st, &oo, &so));
    CHECK_OK(g_ctx, ct_optimizer_create(wh, &oo, &wo));
    CHECK_OK(g_ctx, ct_optimizer_create(wh2, &oo, &w2o));
    fill_params(wh, 0, 1);
    CHECK_OK(g_ctx, copy_grads(st, wh));
    CHECK_OK(g_ctx, ct_optimizer_step(so));
    CHECK_OK(g_ctx, ct_optimizer_step(wo));
    ct_train_state ts;
    ct_train_state_init(&ts);
    ts.step = 1;
    ct_checkpoint_opts co;
    ct_checkpoint_opts_default(&co);
    co.fsync = 0;
    CHECK_OK(g_ctx, ct_checkpoint_save_ex(g_ctx, c, st, so, &ts, &co));
    if (me == 0 && ws == CT_OK) ws = ct_checkpoint_save_ex(g_ctx, d, wh, wo, &ts, &co);
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    const char *files[2] = {"model.safetensors", "train_state.safetensors"};
    for (int k = 0; me == 0 && k < 2; k++) {
        snprintf(fa, sizeof fa, "%s/step-000001/%s", c, files[k]);
        snprintf(fb, sizeof fb, "%s/step-000001/%s", d, files[k]);
        same[1 + k] = same_file(fa, fb);
    }
    CHECK_OK(g_ctx, ct_comm_broadcast(g_world, same, sizeof same, 0));
    /* the stages' checkpoint into a whole plan; a whole plan's (two steps) into the stages */
    ct_train_state got;
    ct_status l1 = ct_checkpoint_load(g_ctx, c, wh2, w2o, &got);
    int n1 = l1 == CT_OK ? compare(st, so, wh2, w2o) : -1;
    fill_params(wh, 0, 2);
    CHECK_OK(g_ctx, ct_optimizer_step(wo));
    ts.step = 2;
    if (me == 0 && ws == CT_OK) ws = ct_checkpoint_save_ex(g_ctx, d, wh, wo, &ts, &co);
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    ct_status l2 = ct_checkpoint_load(g_ctx, d, st, so, &got);
    int n2 = l2 == CT_OK ? compare(st, so, wh, wo) : -1;
    CHECK_OK(g_ctx, ct_comm_barrier(g_world));
    if (me == 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s' '%s'", a, b, c, d);
        CHECK(system(cmd) == 0);
    }
    printf("  rank %d (tensor %d, pipeline %d): one-process files: weights %d, model %d, state %d; stages -> whole %d "
           "tensors equal, whole -> stages %d\n",
           me, grid->tensor_rank, grid->pipeline_rank, same[0], same[1], same[2], n1, n2);
    CHECK_OK(g_ctx, ws);
    CHECK_OK(g_ctx, l1);
    CHECK_OK(g_ctx, l2);
    CHECK_MSG(same[0] && same[1] && same[2], "the files differ from one process's");
    CHECK(n1 == ct_plan_num_params(st) && n1 > 0);
    CHECK(n2 == n1 && ct_optimizer_steps(so) == 2);
    ct_optimizer_free(so);
    ct_optimizer_free(wo);
    ct_optimizer_free(w2o);
    ct_plan_free(st);
    ct_plan_free(wh);
    ct_plan_free(wh2);
    ct_comm_grid_free(grid);
}

int main(int argc, char **argv) {
    static const ct_test_case cases[] = {T(stages_write_the_one_process_file), T(whole_file_loads_into_stages),
                                         T(checkpoints_between_stages_and_whole), T(extra_tensor_is_another_model),
                                         T(tensor_and_pipeline_parallel)};
    if (test_mpi_start("test_pp_ckpt", &g_ctx, &g_world)) return 1;
    if (ct_comm_size(g_world) == 1)
        printf("test_pp_ckpt: a world of one: the one stage is the whole model (run under mpirun -np 2 or 4 for "
               "stages of a cut model)\n");
    int rc = ct_test_main(__FILE__, cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
    return test_mpi_finish(g_ctx, g_world, rc);
}
