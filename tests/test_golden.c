/* tests/test_golden.c - golden tests against PyTorch.
 *
 * scripts/make_golden.py defines in PyTorch the models that ct_model_mlp and
 * ct_model_cnn build, runs one training-mode forward + backward and stores
 * weights, buffers, batch, labels, loss, logits, every parameter gradient and
 * the updated batchnorm running statistics in tests/golden/ (CTG1 format,
 * docs/golden-format.md). Here we build the same graph with ctrain, load the
 * same weights, buffers and batch by name, run forward(training=1) +
 * backward, and require for every tensor
 *
 *     max|ctrain - golden| / max|golden| <= 1e-5      (FP32)
 *
 * in three contexts: the default one (oneDNN + best SIMD), AVX2 without
 * oneDNN, and the reference kernels. A missing or malformed golden file is a
 * failure, not a skip. Where the files are looked for: see golden_dir() in
 * tests/golden.c (the reader and the comparison helpers). */
#include <stdarg.h>
#include <stdint.h>

#include "golden.h"

/* Runs one golden case (file) under one context. */
static void run_golden(const char *file, int is_cnn, const char *ctx_name, int isa, int use_onednn, int cl) {
    char label[64], name[160];
    run_state s;
    ct_context *ctx = NULL;
    ct_graph *g = NULL;
    ct_plan *p = NULL;
    gold_file *f = run_begin(&s, label, file, ctx_name);
    if (!f) goto done;
    ctx = test_ctx(isa, use_onednn);

    /* configuration from the file */
    int32_t arch[8], ncls, ignore;
    int narch = 0;
    const gold_rec *ls = gold_get(f, "meta.label_smoothing");
    const gold_rec *in_rec = gold_get(f, "input"), *lab_rec = gold_get(f, "labels");
    if (!meta_i32(f, is_cnn ? "meta.channels" : "meta.hidden", arch, 8, &narch) ||
        !meta_i32(f, "meta.n_classes", &ncls, 1, NULL) || !meta_i32(f, "meta.ignore_index", &ignore, 1, NULL) || !ls ||
        ls->dtype != GDT_F32 || ls->numel != 1 || !in_rec || !lab_rec) {
        run_fail(&s, "golden file %s lacks meta records, input or labels", file);
        goto done;
    }
    float smoothing = *(const float *)ls->data;
    int64_t arch64[8];
    for (int i = 0; i < narch; i++) arch64[i] = arch[i];

    /* the graph: input, model, cross entropy */
    ct_node x, y, logits, loss;
    ct_status st;
    GOLD_TRY(ct_graph_create(ctx, &g));
    GOLD_TRY(ct_input(g, "x", CT_F32, in_rec->ndim, in_rec->dims, &x));
    GOLD_TRY(ct_input(g, "y", CT_I32, lab_rec->ndim, lab_rec->dims, &y));
    if (is_cnn) GOLD_TRY(ct_model_cnn_ex(g, x, narch, arch64, ncls, cl, &logits));
    else GOLD_TRY(ct_model_mlp(g, x, narch, arch64, ncls, CT_ACT_RELU, 0.0f, &logits));
    GOLD_TRY(ct_cross_entropy(g, logits, y, smoothing, ignore, &loss));
    GOLD_TRY(ct_compile(g, loss, 1, &logits, NULL, &p));

    /* parameters by name, buffers by graph node name, the batch */
    if (!load_params(&s, f, p)) goto done;
    int nbuf = 0;
    for (int n = 0; n < ct_graph_num_nodes(g); n++) {
        if (strcmp(ct_node_op_name(g, n), "buffer")) continue;
        ct_tensor v;
        GOLD_TRY(ct_plan_tensor(p, n, &v));
        snprintf(name, sizeof name, "buffer.%s", ct_node_name(g, n));
        if (!load_into(&s, f, name, &v)) goto done;
        nbuf++;
    }
    if (nbuf != gold_count(f, "buffer.")) {
        run_fail(&s, "ctrain has %d buffers, the golden file %d", nbuf, gold_count(f, "buffer."));
        goto done;
    }
    ct_tensor tx, ty;
    GOLD_TRY(ct_plan_tensor(p, x, &tx));
    GOLD_TRY(ct_plan_tensor(p, y, &ty));
    if (!load_into(&s, f, "input", &tx) || !load_into(&s, f, "labels", &ty)) goto done;

    /* poison the gradients so that one never written shows up as NaN */
    float *grads;
    size_t ng;
    GOLD_TRY(ct_plan_param_arena(p, NULL, &grads, &ng));
    for (size_t i = 0; i < ng; i++) grads[i] = NAN;

    GOLD_TRY(ct_plan_forward(p, 1));
    GOLD_TRY(ct_plan_backward(p));
    print_kernels(&s, g, p);

    /* loss, logits, every gradient, running statistics after the step */
    float lv;
    GOLD_TRY(ct_plan_loss(p, &lv));
    ct_tensor tl = ct_tensor_make(&lv, CT_F32, 0, NULL), tlog;
    compare(&s, f, "loss", &tl);
    GOLD_TRY(ct_plan_tensor(p, logits, &tlog));
    compare(&s, f, "logits", &tlog);
    if (!compare_grads(&s, f, p)) goto done;
    if (nbuf != gold_count(f, "buffer_after."))
        run_fail(&s, "ctrain has %d buffers, the golden file %d updated ones", nbuf, gold_count(f, "buffer_after."));
    for (int n = 0; n < ct_graph_num_nodes(g); n++) {
        if (strcmp(ct_node_op_name(g, n), "buffer")) continue;
        ct_tensor v;
        GOLD_TRY(ct_plan_tensor(p, n, &v));
        snprintf(name, sizeof name, "buffer_after.%s", ct_node_name(g, n));
        compare(&s, f, name, &v);
    }
    s.completed = 1;
done:
    run_close(&s, __FILE__, __LINE__, p, g, ctx, f);
}

/* ---- the tests --------------------------------------------------------------------------------- */

#define CASE(fn, file, cnn, ctxname, isa, dnnl) \
    TEST(fn) { run_golden(file, cnn, ctxname, isa, dnnl, 0); }

CASE(mlp_ref, "mlp.ctg", 0, "ref", CT_ISA_REF, 0)
CASE(mlp_avx2, "mlp.ctg", 0, "avx2", CT_ISA_AVX2, 0)
CASE(mlp_default, "mlp.ctg", 0, "default", -1, 1)
CASE(mlp_smooth_ref, "mlp_smooth.ctg", 0, "ref", CT_ISA_REF, 0)
CASE(mlp_smooth_avx2, "mlp_smooth.ctg", 0, "avx2", CT_ISA_AVX2, 0)
CASE(mlp_smooth_default, "mlp_smooth.ctg", 0, "default", -1, 1)
CASE(cnn_ref, "cnn.ctg", 1, "ref", CT_ISA_REF, 0)
CASE(cnn_avx2, "cnn.ctg", 1, "avx2", CT_ISA_AVX2, 0)
CASE(cnn_default, "cnn.ctg", 1, "default", -1, 1)
/* the CNN with channels_last (the recipes' default): NHWC convolutions and pools, batchnorm on the (N*H*W, C)
   view, the same golden */
TEST(cnn_cl_ref) { run_golden("cnn.ctg", 1, "cl_ref", CT_ISA_REF, 0, 1); }
TEST(cnn_cl_avx2) { run_golden("cnn.ctg", 1, "cl_avx2", CT_ISA_AVX2, 0, 1); }
TEST(cnn_cl_default) { run_golden("cnn.ctg", 1, "cl_default", -1, 1, 1); }

TEST_MAIN(T(mlp_ref), T(mlp_avx2), T(mlp_default), T(mlp_smooth_ref), T(mlp_smooth_avx2), T(mlp_smooth_default),
          T(cnn_ref), T(cnn_avx2), T(cnn_default), T(cnn_cl_ref), T(cnn_cl_avx2), T(cnn_cl_default))
