/* tests/test_models.c - the torchvision image classifiers (src/models/vision.c,
 * resnet.c, efficientnet.c) and drop path.
 *
 * Golden: scripts/make_vision_golden.py builds reduced variants from
 * torchvision's own blocks (widths / 16, one block per stage) and stores the
 * batch, loss, logits, eval-mode logits, every gradient and the updated
 * running statistics (tests/golden/resnet18c.ctg, resnet50.ctg, effb0.ctg,
 * swin.ctg: two blocks per stage there, so that shifted windows run;
 * swin_pad.ctg: window 3 on 40x40, so that every stage is zero-padded);
 * conv / linear weights are not stored but generated from a hash of their
 * name (the same function here, exact in float32). Each must match within
 *     max|ctrain - golden| / max|golden| <= 1e-5
 * in the reference, AVX2 (no oneDNN) and default contexts. BF16 autocast on
 * the same cases is held to PyTorch's own BF16 autocast distance from the
 * golden (bf16err records; compare_lowp in golden.c).
 * Names: every full-size architecture's parameter and buffer names, shapes
 * and order (a hash of them, written from torchvision's constructors to
 * tests/golden/vision_names.txt) and its parameter count, through the graph
 * only; ct_model_num_params_by_name. Also drop path's semantics and errors. */
#include <stdint.h>

#include "golden.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

static uint64_t fnv1a64(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define FNV0 0xcbf29ce484222325ull

/* hash_values of make_vision_golden.py: splitmix64 of fnv1a64(name) + (i+1) *
 * golden ratio, top 24 bits -> [-1, 1) in steps of 2^-23, times 2^e. */
static void hash_fill(const char *name, float *out, int64_t n, int e) {
    uint64_t h0 = fnv1a64(name, strlen(name), FNV0);
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = h0 + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        double v = ((double)(int64_t)(z >> 40) - 8388608.0) / 8388608.0;
        out[i] = (float)ldexp(v, e);
    }
}

static char *read_text(const char *file) {
    char path[512];
    const char *dir = getenv("CT_GOLDEN_DIR");
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "tests/golden", file);
    FILE *f = fopen(path, "rb");
    if (!f && !dir) {
        snprintf(path, sizeof path, "../../tests/golden/%s", file);
        f = fopen(path, "rb");
    }
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* ---- golden runs ------------------------------------------------------------------------------ */

static void run_vision(const char *file, const char *ctx_name, int isa, int use_onednn, int bf16, int cl) {
    char label[64], name[192];
    run_state s;
    ct_context *ctx = NULL;
    ct_graph *g = NULL;
    ct_plan *p = NULL;
    gold_file *f = run_begin(&s, label, file, ctx_name);
    if (!f) goto done;
    ctx = test_ctx(isa, use_onednn);
    int32_t wd, mb, cs, nc;
    const gold_rec *arch = gold_get(f, "meta.arch"), *in_rec = gold_get(f, "input"), *lab_rec = gold_get(f, "labels");
    int32_t ishape[4], win = 0;
    int nis = 0, hashed_input = !in_rec && meta_i32(f, "input_shape", ishape, 4, &nis) && nis == 4;
    meta_i32(f, "meta.window", &win, 1, NULL); /* swin only */
    if (!arch || arch->dtype != GDT_U8 || arch->numel >= 24 || (!in_rec && !hashed_input) || !lab_rec ||
        !meta_i32(f, "meta.width_div", &wd, 1, NULL) || !meta_i32(f, "meta.max_blocks", &mb, 1, NULL) ||
        !meta_i32(f, "meta.cifar_stem", &cs, 1, NULL) || !meta_i32(f, "meta.n_classes", &nc, 1, NULL)) {
        run_fail(&s, "golden file %s lacks meta records, input or labels", file);
        goto done;
    }
    char an[24] = {0};
    memcpy(an, arch->data, (size_t)arch->numel);
    ct_status st;
    ct_vision_config c;
    GOLD_TRY(ct_vision_config_default(ctx, an, &c));
    c.num_classes = nc, c.width_div = wd, c.max_blocks = mb, c.cifar_stem = cs, c.drop_path = 0, c.dropout = 0;
    c.window = win;
    c.channels_last = cl; /* resnet, efficientnet: the same model on NHWC activations, the same golden */
    ct_node x, y, logits, loss;
    GOLD_TRY(ct_graph_create(ctx, &g));
    if (hashed_input) GOLD_TRY(ct_input(g, "x", CT_F32, 4, (int64_t[]){ishape[0], ishape[1], ishape[2], ishape[3]}, &x));
    else GOLD_TRY(ct_input(g, "x", CT_F32, in_rec->ndim, in_rec->dims, &x));
    GOLD_TRY(ct_input(g, "y", CT_I32, lab_rec->ndim, lab_rec->dims, &y));
    GOLD_TRY(ct_model_vision(g, x, &c, &logits));
    GOLD_TRY(ct_cross_entropy(g, logits, y, 0.0f, -100, &loss));
    ct_compile_opts co;
    ct_compile_opts_default(&co);
    if (bf16) co.precision = CT_PRECISION_BF16;
    GOLD_TRY(ct_compile(g, loss, 1, &logits, &co, &p));

    /* parameters: stored (batchnorm) or generated from their name's hash (conv, linear) */
    int np = ct_plan_num_params(p), stored = 0, hashed = 0;
    for (int i = 0; i < np; i++) {
        const char *pn;
        ct_tensor v;
        GOLD_TRY(ct_plan_param_info(p, i, &pn, &v, NULL));
        snprintf(name, sizeof name, "param.%s", pn);
        if (gold_get(f, name)) {
            if (!load_into(&s, f, name, &v)) goto done;
            stored++;
            continue;
        }
        int32_t e;
        snprintf(name, sizeof name, "pexp.%s", pn);
        if (!meta_i32(f, name, &e, 1, NULL)) {
            run_fail(&s, "parameter %s: neither param.%s nor pexp.%s in %s", pn, pn, pn, file);
            goto done;
        }
        hash_fill(pn, v.data, ct_tensor_numel(&v), e);
        hashed++;
    }
    if (stored != gold_count(f, "param.") || hashed != gold_count(f, "pexp.")) {
        run_fail(&s, "ctrain has %d stored + %d generated parameters, the golden file %d + %d", stored, hashed,
                 gold_count(f, "param."), gold_count(f, "pexp."));
        goto done;
    }
    int nbuf = ct_plan_num_buffers(p);
    for (int i = 0; i < nbuf; i++) {
        const char *bn;
        ct_tensor v;
        GOLD_TRY(ct_plan_buffer_info(p, i, &bn, &v));
        snprintf(name, sizeof name, "buffer.%s", bn);
        if (!load_into(&s, f, name, &v)) goto done;
    }
    if (nbuf != gold_count(f, "buffer.")) {
        run_fail(&s, "ctrain has %d buffers, the golden file %d", nbuf, gold_count(f, "buffer."));
        goto done;
    }
    ct_tensor tx, ty, tlog;
    GOLD_TRY(ct_plan_tensor(p, x, &tx));
    GOLD_TRY(ct_plan_tensor(p, y, &ty));
    if (hashed_input) hash_fill("input", tx.data, ct_tensor_numel(&tx), 1); /* hash_values("input") x 2 */
    else if (!load_into(&s, f, "input", &tx)) goto done;
    if (!load_into(&s, f, "labels", &ty)) goto done;
    GOLD_TRY(ct_plan_tensor(p, logits, &tlog));

    /* eval mode first (running statistics, not updated), then one training step */
    GOLD_TRY(ct_plan_forward(p, 0));
    if (!bf16) compare(&s, f, "logits_eval", &tlog);
    float *grads;
    size_t ng;
    GOLD_TRY(ct_plan_param_arena(p, NULL, &grads, &ng));
    for (size_t i = 0; i < ng; i++) grads[i] = NAN;
    GOLD_TRY(ct_plan_forward(p, 1));
    GOLD_TRY(ct_plan_backward(p));
    print_kernels(&s, g, p);
    if (bf16) { /* BF16 autocast against the FP32 golden: close, not equal (compare_lowp) */
        compare_lowp(&s, f, p, GOLDEN_BF16_TOL);
        goto done;
    }
    float lv;
    GOLD_TRY(ct_plan_loss(p, &lv));
    ct_tensor tl = ct_tensor_make(&lv, CT_F32, 0, NULL);
    compare(&s, f, "loss", &tl);
    compare(&s, f, "logits", &tlog);
    if (!compare_grads(&s, f, p)) goto done;
    for (int i = 0; i < nbuf; i++) {
        const char *bn;
        ct_tensor v;
        GOLD_TRY(ct_plan_buffer_info(p, i, &bn, &v));
        snprintf(name, sizeof name, "buffer_after.%s", bn);
        compare(&s, f, name, &v);
    }
    s.completed = 1;
done:
    run_close(&s, __FILE__, __LINE__, p, g, ctx, f);
}

#define CASE(fn, file, ctxname, isa, dnnl) \
    TEST(fn) { run_vision(file, ctxname, isa, dnnl, 0, 0); }
CASE(resnet18c_ref, "resnet18c.ctg", "ref", CT_ISA_REF, 0)
CASE(resnet18c_avx2, "resnet18c.ctg", "avx2", CT_ISA_AVX2, 0)
CASE(resnet18c_default, "resnet18c.ctg", "default", -1, 1)
CASE(resnet50_ref, "resnet50.ctg", "ref", CT_ISA_REF, 0)
CASE(resnet50_avx2, "resnet50.ctg", "avx2", CT_ISA_AVX2, 0)
CASE(resnet50_default, "resnet50.ctg", "default", -1, 1)
CASE(effb0_ref, "effb0.ctg", "ref", CT_ISA_REF, 0)
CASE(effb0_avx2, "effb0.ctg", "avx2", CT_ISA_AVX2, 0)
CASE(effb0_default, "effb0.ctg", "default", -1, 1)
CASE(swin_ref, "swin.ctg", "ref", CT_ISA_REF, 0)
CASE(swin_avx2, "swin.ctg", "avx2", CT_ISA_AVX2, 0)
CASE(swin_default, "swin.ctg", "default", -1, 1)
/* maps that are no multiple of the window (3) and odd maps before patch merging: zero padding */
CASE(swin_pad_ref, "swin_pad.ctg", "ref", CT_ISA_REF, 0)
CASE(swin_pad_default, "swin_pad.ctg", "default", -1, 1)
/* BF16 autocast (matmul / conv / linear in BF16, their gradients FP32) on the same weights and batch */
#define CASE_BF16(fn, file) \
    TEST(fn) { run_vision(file, "bf16", -1, 1, 1, 0); }
CASE_BF16(resnet18c_bf16, "resnet18c.ctg")
CASE_BF16(resnet50_bf16, "resnet50.ctg")
CASE_BF16(effb0_bf16, "effb0.ctg")
CASE_BF16(swin_bf16, "swin.ctg")
CASE_BF16(swin_pad_bf16, "swin_pad.ctg")
/* ResNets with channels_last (NHWC convolutions, pooling, batchnorm on the (N*H*W, C) view) against the same
   goldens */
TEST(resnet18c_cl_ref) { run_vision("resnet18c.ctg", "cl_ref", CT_ISA_REF, 0, 0, 1); }
TEST(resnet18c_cl_default) { run_vision("resnet18c.ctg", "cl_default", -1, 1, 0, 1); }
TEST(resnet50_cl_default) { run_vision("resnet50.ctg", "cl_default", -1, 1, 0, 1); }
TEST(resnet18c_cl_bf16) { run_vision("resnet18c.ctg", "cl_bf16", -1, 1, 1, 1); }
/* EfficientNet channels last: depthwise NHWC convolutions, squeeze-excitation on (N, 1, 1, C) broadcast over
   the map */
TEST(effb0_cl_ref) { run_vision("effb0.ctg", "cl_ref", CT_ISA_REF, 0, 0, 1); }
TEST(effb0_cl_default) { run_vision("effb0.ctg", "cl_default", -1, 1, 0, 1); }
TEST(effb0_cl_bf16) { run_vision("effb0.ctg", "cl_bf16", -1, 1, 1, 1); }

/* ---- names, shapes and counts of the full-size models ------------------------------------------ */

/* Appends the lines "param|buffer <name> <d0>x<d1>..." of the graph's
 * parameters and buffers (creation order) to out (may be NULL) and hashes them. */
static uint64_t graph_lines(ct_graph *g, int *npar, int *nbuf, int64_t *nparams, char *out, size_t cap) {
    uint64_t h = FNV0;
    size_t o = 0;
    *npar = *nbuf = 0;
    *nparams = 0;
    for (int i = 0; i < ct_graph_num_nodes(g); i++) {
        const char *op = ct_node_op_name(g, i);
        int is_p = !strcmp(op, "param");
        if (!is_p && strcmp(op, "buffer")) continue;
        int nd;
        int64_t sh[CT_MAX_DIMS], n = 1;
        ct_node_shape(g, i, &nd, sh);
        char line[160];
        int l = snprintf(line, sizeof line, "%s %s ", is_p ? "param" : "buffer", ct_node_name(g, i));
        for (int d = 0; d < nd; d++) {
            l += snprintf(line + l, sizeof line - (size_t)l, "%s%lld", d ? "x" : "", (long long)sh[d]);
            n *= sh[d];
        }
        l += snprintf(line + l, sizeof line - (size_t)l, "\n");
        h = fnv1a64(line, (size_t)l, h);
        if (out && o + (size_t)l < cap) {
            memcpy(out + o, line, (size_t)l + 1);
            o += (size_t)l;
        }
        if (is_p) (*npar)++, *nparams += n;
        else (*nbuf)++;
    }
    return h;
}

/* Prints the first of ctrain's lines that differs from the file's "line ARCH <line>" records. */
static void show_first_difference(const char *file, const char *arch, const char *mine) {
    char key[48];
    int kl = snprintf(key, sizeof key, "line %s ", arch), k = 0;
    for (const char *q = file; q && *q; q = strchr(q, '\n') ? strchr(q, '\n') + 1 : NULL) {
        if (strncmp(q, key, (size_t)kl)) continue;
        const char *ref = q + kl, *e = strchr(ref, '\n');
        size_t rl = e ? (size_t)(e - ref) : strlen(ref);
        const char *me = strchr(mine, '\n');
        size_t ml = me ? (size_t)(me - mine) : strlen(mine);
        if (rl != ml || strncmp(ref, mine, rl)) {
            printf("  %s line %d: ctrain '%.*s', torchvision '%.*s'\n", arch, k, (int)ml, mine, (int)rl, ref);
            return;
        }
        mine = me ? me + 1 : mine + ml;
        k++;
    }
    if (k) printf("  %s: the first %d lines agree; ctrain continues with '%.60s'\n", arch, k, mine);
}

TEST(torchvision_names_and_counts) {
    char *txt = read_text("vision_names.txt");
    CHECK_MSG(txt != NULL, "tests/golden/vision_names.txt is missing");
    if (!txt) return;
    ct_context *ctx = test_ctx(-1, 1);
    int seen = 0;
    char *save = NULL, *full = strdup(txt); /* the "line ARCH ..." records, for show_first_difference */
    for (char *line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char arch[32];
        int npt, nbt;
        long long npar;
        unsigned long long hash;
        if (sscanf(line, "arch %31s %d %d %lld %llx", arch, &npt, &nbt, &npar, &hash) != 5) continue;
        seen++;
        ct_vision_config c;
        ct_graph *g = NULL;
        ct_node x, logits;
        CHECK_OK(ctx, ct_vision_config_default(ctx, arch, &c));
        CHECK_OK(ctx, ct_graph_create(ctx, &g));
        CHECK_OK(ctx, ct_input(g, "images", CT_F32, 4, (int64_t[]){2, 3, 224, 224}, &x));
        CHECK_OK(ctx, ct_model_vision(g, x, &c, &logits));
        int a, b;
        int64_t n;
        char *mine = calloc(1, 1 << 17);
        uint64_t h = graph_lines(g, &a, &b, &n, mine, 1 << 17);
        printf("  %-16s %4d params %4d buffers %10lld parameters, hash %016llx (torchvision %016llx)\n", arch, a, b,
               (long long)n, (unsigned long long)h, hash);
        CHECK_MSG(a == npt && b == nbt && n == npar, "%s: %d/%d tensors, %lld parameters; torchvision %d/%d, %lld",
                  arch, a, b, (long long)n, npt, nbt, npar);
        CHECK_MSG(h == hash, "%s: the names/shapes/order differ from torchvision's", arch);
        if (h != hash) show_first_difference(full, arch, mine);
        free(mine);
        int64_t by_name = 0;
        CHECK_OK(ctx, ct_model_num_params_by_name(ctx, arch, 0, &by_name));
        CHECK_MSG(by_name == npar, "ct_model_num_params_by_name(%s) = %lld, torchvision %lld", arch,
                  (long long)by_name, npar);
        ct_graph_free(g);
    }
    CHECK_MSG(seen == 12, "vision_names.txt lists %d architectures, expected 12", seen);
    free(full);
    free(txt);
    ct_context_free(ctx);
}

TEST(params_by_name) {
    ct_context *ctx = test_ctx(-1, 1);
    int64_t n = 0, n10 = 0;
    CHECK_OK(ctx, ct_model_num_params_by_name(ctx, "resnet50", 0, &n));
    CHECK(n == 25557032);
    CHECK_OK(ctx, ct_model_num_params_by_name(ctx, "resnet50", 10, &n10));
    CHECK(n10 == 25557032 - 990 * 2049); /* fc 2048 -> 10 instead of 1000 */
    CHECK_OK(ctx, ct_model_num_params_by_name(ctx, "efficientnet_b4", 0, &n));
    CHECK(n == 19341616);
    ct_gpt_config gc;
    CHECK_OK(ctx, ct_gpt_preset(ctx, "gpt2-124m", &gc));
    CHECK_OK(ctx, ct_model_num_params_by_name(ctx, "gpt2-124m", 0, &n));
    CHECK(n == ct_gpt_num_params(&gc));
    ct_bert_config bc;
    CHECK_OK(ctx, ct_bert_preset(ctx, "bert-large", &bc));
    CHECK_OK(ctx, ct_model_num_params_by_name(ctx, "bert-large", 0, &n));
    CHECK(n == ct_bert_num_params(&bc));
    CHECK(ct_model_num_params_by_name(ctx, "resnet51", 0, &n) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "resnet51") && strstr(ct_context_last_error(ctx), "efficientnet_b4"));
    CHECK_OK(ctx, ct_model_num_params_by_name(ctx, "swin_b", 0, &n));
    CHECK(n == 87768224);
    CHECK(ct_vision_num_archs() == 12 && !strcmp(ct_vision_arch_name(0), "resnet18") && !ct_vision_arch_name(12));
    ct_context_free(ctx);
}

TEST(bad_configs) {
    ct_context *ctx = test_ctx(-1, 1);
    ct_graph *g;
    ct_node x, x2, lg;
    ct_vision_config c;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    CHECK_OK(ctx, ct_input(g, "x", CT_F32, 4, (int64_t[]){2, 3, 32, 32}, &x));
    CHECK_OK(ctx, ct_input(g, "x2", CT_F32, 2, (int64_t[]){2, 3}, &x2));
    CHECK(ct_vision_config_default(ctx, "swin_x", &c) == CT_E_INVALID_ARG);
    CHECK_OK(ctx, ct_vision_config_default(ctx, "swin_b", &c));
    CHECK(c.drop_path == 0.5f && c.window == 0);
    /* 32x32: 8x8 maps, padded to 14x14 for window 7 (as torchvision pads) */
    CHECK_OK(ctx, ct_model_vision(g, x, &c, &lg));
    /* 16x64: a 4x16 map, padded 7x21: one axis shifts, the other not (torchvision would; ctrain refuses) */
    ct_node x3;
    CHECK_OK(ctx, ct_input(g, "x3", CT_F32, 4, (int64_t[]){2, 3, 16, 64}, &x3));
    CHECK(ct_model_vision(g, x3, &c, &lg) == CT_E_SHAPE);
    CHECK(strstr(ct_context_last_error(ctx), "window 7") && strstr(ct_context_last_error(ctx), "both axes or neither"));
    CHECK_OK(ctx, ct_vision_config_default(ctx, "resnet18", &c));
    c.width_div = 3;
    CHECK(ct_model_vision(g, x, &c, &lg) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "width_div 3"));
    c.width_div = 1, c.drop_path = 0.1f;
    CHECK(ct_model_vision(g, x, &c, &lg) == CT_E_INVALID_ARG);
    c.drop_path = 0, c.num_classes = 0;
    CHECK(ct_model_vision(g, x, &c, &lg) == CT_E_INVALID_ARG);
    c.num_classes = 10, c.channels_last = 2;
    CHECK(ct_model_vision(g, x, &c, &lg) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "channels_last 2"));
    CHECK_OK(ctx, ct_vision_config_default(ctx, "swin_t", &c));
    c.channels_last = 1; /* a ResNet / EfficientNet option */
    CHECK(ct_model_vision(g, x, &c, &lg) == CT_E_INVALID_ARG);
    CHECK(strstr(ct_context_last_error(ctx), "only for ResNets and EfficientNets"));
    CHECK_OK(ctx, ct_vision_config_default(ctx, "efficientnet_b0", &c));
    CHECK(c.drop_path == 0.2f && c.dropout == 0.2f && c.num_classes == 1000);
    c.cifar_stem = 1;
    CHECK(ct_model_vision(g, x, &c, &lg) == CT_E_INVALID_ARG);
    c.cifar_stem = 0;
    CHECK(ct_model_vision(g, x2, &c, &lg) == CT_E_SHAPE);
    c.drop_path = 1.0f;
    CHECK(ct_model_vision(g, x, &c, &lg) == CT_E_INVALID_ARG);
    CHECK(ct_drop_path(g, x, -0.1f, &lg) == CT_E_INVALID_ARG);
    ct_graph_free(g);
    ct_context_free(ctx);
}

/* Drop path: whole samples zeroed (about p of them) or scaled by 1/(1-p) in
 * training, the same mask in backward, identity in eval mode; every kernel. */
static void drop_path_case(int isa) {
    ct_context *ctx = test_ctx(isa, 0);
    ct_graph *g;
    ct_plan *p = NULL;
    ct_node w, y, loss;
    const int64_t N = 256, R = 3 * 5 * 7;
    const float pr = 0.3f;
    CHECK_OK(ctx, ct_graph_create(ctx, &g));
    CHECK_OK(ctx, ct_param(g, "x", 4, (int64_t[]){N, 3, 5, 7}, CT_INIT_ONES, 0, &w));
    CHECK_OK(ctx, ct_drop_path(g, w, pr, &y));
    CHECK_OK(ctx, ct_sum(g, y, 0xf, 0, &loss));
    CHECK_OK(ctx, ct_compile(g, loss, 1, &y, NULL, &p));
    ct_tensor ty, tw, gw;
    CHECK_OK(ctx, ct_plan_tensor(p, y, &ty));
    CHECK_OK(ctx, ct_plan_param_info(p, 0, NULL, &tw, &gw));
    float *xv = tw.data;
    for (int64_t i = 0; i < N * R; i++) xv[i] = 1.0f + (float)(i % 7);
    ct_plan_set_step(p, 5);
    CHECK_OK(ctx, ct_plan_forward(p, 1));
    CHECK_OK(ctx, ct_plan_backward(p));
    const float *yv = ty.data, *gv = gw.data, sc = 1.0f / (1.0f - pr);
    int dropped = 0, rows_ok = 1;
    for (int64_t n = 0; n < N; n++) {
        int drop = yv[n * R] == 0.0f;
        dropped += drop;
        for (int64_t i = 0; i < R; i++) {
            int64_t e = n * R + i;
            float want = drop ? 0.0f : xv[e] * sc;
            rows_ok &= yv[e] == want && gv[e] == (drop ? 0.0f : sc);
        }
    }
    printf("  [%s] %d of %lld samples dropped (p %.2f), kernel %s\n", isa == CT_ISA_REF ? "ref" : "best", dropped,
           (long long)N, (double)pr, ct_plan_kernel_name(p, y));
    CHECK_MSG(rows_ok, "a row is neither all zero nor all scaled, or backward used another mask");
    CHECK(dropped > N / 10 && dropped < N / 2);
    CHECK_OK(ctx, ct_plan_forward(p, 0));
    int same = 1;
    for (int64_t i = 0; i < N * R; i++) same &= yv[i] == xv[i];
    CHECK_MSG(same, "eval mode must be the identity");
    ct_plan_free(p);
    ct_graph_free(g);
    ct_context_free(ctx);
}
TEST(drop_path_ref) { drop_path_case(CT_ISA_REF); }
TEST(drop_path_best) { drop_path_case(-1); }


/* The model table (CT_MODEL_TABLE, src/models/registry.c): every row and
 * preset is found and built by name, its recipe keys exist and apply to it,
 * and the names the README and recipes/ use are among them. */
TEST(model_table) {
    ct_context *ctx;
    CHECK_OK(NULL, ct_context_create(NULL, &ctx));
    int rows = 0;
    for (int m = 0; m < CT_MODEL_COUNT; m++) {
        const char *name = ct_model_name((ct_model_kind)m);
        ct_model_kind k = CT_MODEL_COUNT;
        const char *preset = "x";
        CHECK_OK(ctx, ct_model_find(ctx, name, &k, &preset));
        CHECK_MSG(k == (ct_model_kind)m && !preset, "row %d '%s' found as %d", m, name, (int)k);
        CHECK(ct_model_desc((ct_model_kind)m)[0]);
        char keys[256];
        snprintf(keys, sizeof keys, "%s", ct_model_keys((ct_model_kind)m));
        for (char *w = strtok(keys, " "); w; w = strtok(NULL, " ")) {
            const ct_recipe_key_info *ki = ct_recipe_key_find(w);
            CHECK_MSG(ki && (ki->models & (1u << m)), "model '%s' lists recipe key '%s', which %s", name, w,
                      ki ? "does not apply to it" : "does not exist");
        }
        for (int j = 0; ct_model_preset_name((ct_model_kind)m, j); j++) {
            CHECK(ct_model_family_of((ct_model_kind)m) == CT_MODEL_FAMILY_TEXT);
            CHECK_OK(ctx, ct_model_find(ctx, ct_model_preset_name((ct_model_kind)m, j), &k, &preset));
            CHECK(k == (ct_model_kind)m && !strcmp(preset, ct_model_preset_name((ct_model_kind)m, j)));
        }
        rows++;
    }
    CHECK(rows == CT_MODEL_COUNT && !strcmp(ct_model_name(CT_MODEL_COUNT), "?"));
    /* every name builds (graph only) and has parameters */
    int names = 0;
    for (int i = 0; ct_model_builtin_name(i); i++, names++) {
        const char *name = ct_model_builtin_name(i);
        ct_graph *g;
        CHECK_OK(ctx, ct_graph_create(ctx, &g));
        ct_node logits;
        CHECK_MSG(ct_model_by_name(g, name, 2, &logits) == CT_OK, "ct_model_by_name(%s): %s", name,
                  ct_context_last_error(ctx));
        int64_t n = 0;
        CHECK_OK(ctx, ct_model_num_params_by_name(ctx, name, 0, &n));
        CHECK_MSG(n > 0, "%s: %lld parameters", name, (long long)n);
        CHECK(ct_model_builtin_desc(i) && ct_model_builtin_desc(i)[0]);
        ct_graph_free(g);
    }
    CHECK(names == ct_model_num_builtin() && !ct_model_builtin_name(names));
    static const char *const used[] = {"mlp", "cnn", "gpt", "bert", "gpt-char-small", "gpt2-124m", "bert-base",
                                       "bert-large", "resnet18", "resnet50", "efficientnet_b0", "efficientnet_b4",
                                       "swin_t", "swin_b"};
    for (size_t i = 0; i < sizeof used / sizeof used[0]; i++)
        CHECK_MSG(ct_model_find(ctx, used[i], NULL, NULL) == CT_OK, "'%s' is not a built-in model", used[i]);
    ct_model_kind k;
    const char *preset;
    CHECK_OK(ctx, ct_model_find(ctx, "bert-large", &k, &preset));
    CHECK(k == CT_MODEL_BERT && !strcmp(preset, "bert-large"));
    CHECK(ct_model_find(ctx, "resnet-1000", &k, NULL) == CT_E_INVALID_ARG &&
          strstr(ct_context_last_error(ctx), "bert-large"));
    CHECK(ct_model_is_vision(CT_MODEL_SWIN_B) && !ct_model_is_vision(CT_MODEL_CNN) &&
          ct_model_family_of(CT_MODEL_GPT) == CT_MODEL_FAMILY_TEXT);
    ct_context_free(ctx);
}

TEST_MAIN(T(model_table), T(torchvision_names_and_counts), T(params_by_name), T(bad_configs), T(drop_path_ref), T(drop_path_best),
          T(resnet18c_ref), T(resnet18c_avx2), T(resnet18c_default), T(resnet50_ref), T(resnet50_avx2),
          T(resnet50_default), T(effb0_ref), T(effb0_avx2), T(effb0_default), T(swin_ref), T(swin_avx2),
          T(swin_default), T(swin_pad_ref), T(swin_pad_default), T(resnet18c_bf16), T(resnet50_bf16), T(effb0_bf16), T(swin_bf16), T(swin_pad_bf16),
          T(resnet18c_cl_ref), T(resnet18c_cl_default), T(resnet50_cl_default), T(resnet18c_cl_bf16), T(effb0_cl_ref),
          T(effb0_cl_default), T(effb0_cl_bf16))
