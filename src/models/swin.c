/* src/models/swin.c - torchvision's Swin Transformer (v1: swin_t, swin_s,
 * swin_b) with its state_dict names: features.0 (patch embedding: .0 conv
 * 4x4 stride 4, .2 LayerNorm; channels last from here on), features.{1,3,5,7}.{i}
 * blocks (norm1, attn.relative_position_bias_table, attn.qkv, attn.proj,
 * norm2, mlp.0, mlp.3), features.{2,4,6} patch merging (reduction, norm),
 * norm, head. Window attention is composed: qkv linear, batched matmuls, the
 * relative position bias and shifted-window mask of ct_window_bias, softmax.
 * The cyclic shift is two slices and a concat per axis. Maps that are not a
 * multiple of the window are zero-padded (ct_pad) around the attention and
 * cropped after it; odd maps are padded before patch merging (torchvision). */
#include <math.h>
#include <stdio.h>

#include "vision_internal.h"

/* x (N, H, W, C) rolled by -s (s > 0) or +(-s) along axes 1 and 2, torch.roll(x, (-s, -s), (1, 2)). */
static ct_status roll_hw(ct_graph *g, ct_node x, int64_t H, int64_t W, int64_t s, ct_node *out) {
    ct_node a, b;
    for (int ax = 1; ax <= 2; ax++) {
        int64_t n = ax == 1 ? H : W, cut = s > 0 ? s : n + s; /* roll by -s: x[s:] then x[:s] */
        CT_TRY(ct_slice(g, x, ax, cut, n, &a));
        CT_TRY(ct_slice(g, x, ax, 0, cut, &b));
        CT_TRY(ct_concat(g, 2, (ct_node[]){a, b}, ax, &x));
    }
    *out = x;
    return CT_OK;
}

static ct_status linear(ct_graph *g, ct_node x, const char *pre, int64_t out, int64_t in, int bias, ct_node *y) {
    ct_node w, b = CT_NONE;
    char nm[CT_NAME_LEN];
    snprintf(nm, sizeof nm, "%s.weight", pre);
    CT_TRY(ct_param_normal(g, nm, 2, (int64_t[]){out, in}, 0.02f, &w));
    if (bias) CT_TRY(ct_vis_param(g, pre, "bias", 1, &out, CT_INIT_ZEROS, 0, &b));
    CT_TRY(ct_linear(g, x, w, b, y));
    return ct_node_set_name(g, *y, pre);
}

static ct_status layernorm(ct_graph *g, ct_node x, const char *pre, int64_t c, ct_node *y) {
    ct_node w, b;
    CT_TRY(ct_vis_param(g, pre, "weight", 1, &c, CT_INIT_ONES, 0, &w));
    CT_TRY(ct_vis_param(g, pre, "bias", 1, &c, CT_INIT_ZEROS, 0, &b));
    CT_TRY(ct_layernorm(g, x, w, b, 1e-5f, y));
    return ct_node_set_name(g, *y, pre);
}

/* A map side padded to a multiple of the window (torchvision pads the
 * normalized map with zeros on the bottom / right before the windows and
 * crops after them). */
static int64_t padded(int64_t side, int64_t w) { return (side + w - 1) / w * w; }

/* One block named pre on x (N, H, W, C); odd blocks shift their windows by
 * w / 2 unless one window covers the (padded) map. */
static ct_status block(ct_graph *g, ct_node x, const char *pre, int64_t N, int64_t H, int64_t W, int64_t C,
                       int64_t heads, int64_t w, int odd, float sd, ct_node *out) {
    char nm[96];
    const int64_t Hp = padded(H, w), Wp = padded(W, w), shift = odd && w < Hp && w < Wp ? w / 2 : 0;
    int64_t nwh = Hp / w, nww = Wp / w, nW = nwh * nww, n = w * w, Bp = N * nW, d = C / heads;
    ct_node y, t, tab, bias, q, k, v;
    /* own parameters first (torchvision's state_dict order: the table, then qkv, proj) */
    snprintf(nm, sizeof nm, "%s.norm1", pre);
    CT_TRY(layernorm(g, x, nm, C, &y));
    snprintf(nm, sizeof nm, "%s.attn", pre);
    CT_TRY(ct_vis_param(g, nm, "relative_position_bias_table", 2, (int64_t[]){(2 * w - 1) * (2 * w - 1), heads},
                        CT_INIT_NORMAL, 0, &tab));
    CT_TRY(ct_pad(g, y, 1, 0, Hp - H, &y));
    CT_TRY(ct_pad(g, y, 2, 0, Wp - W, &y));
    if (shift) CT_TRY(roll_hw(g, y, Hp, Wp, shift, &y));
    CT_TRY(ct_reshape(g, y, 6, (int64_t[]){N, nwh, w, nww, w, C}, &y));
    CT_TRY(ct_transpose(g, y, (int[]){0, 1, 3, 2, 4, 5}, &y));
    CT_TRY(ct_reshape(g, y, 3, (int64_t[]){Bp, n, C}, &y));
    snprintf(nm, sizeof nm, "%s.attn.qkv", pre);
    CT_TRY(linear(g, y, nm, 3 * C, C, 1, &y));
    CT_TRY(ct_reshape(g, y, 5, (int64_t[]){Bp, n, 3, heads, d}, &y));
    CT_TRY(ct_transpose(g, y, (int[]){2, 0, 3, 1, 4}, &y)); /* (3, B', heads, n, d) */
    ct_node qkv[3];
    for (int i = 0; i < 3; i++) {
        CT_TRY(ct_slice(g, y, 0, i, i + 1, &t));
        CT_TRY(ct_reshape(g, t, 4, (int64_t[]){Bp, heads, n, d}, &qkv[i]));
    }
    CT_TRY(ct_scale(g, qkv[0], (float)(1.0 / sqrt((double)d)), &q));
    k = qkv[1], v = qkv[2];
    CT_TRY(ct_matmul(g, q, k, 0, 1, &t)); /* (B', heads, n, n) */
    /* bias (+ mask): one copy per window when shifted, else broadcast over windows */
    CT_TRY(ct_window_bias(g, tab, (int)w, (int)shift, shift ? nwh : 1, shift ? nww : 1, &bias));
    snprintf(nm, sizeof nm, "%s.attn.bias", pre);
    CT_TRY(ct_node_set_name(g, bias, nm));
    CT_TRY(ct_reshape(g, t, 5, (int64_t[]){N, nW, heads, n, n}, &t));
    CT_TRY(ct_add(g, t, bias, &t));
    CT_TRY(ct_reshape(g, t, 4, (int64_t[]){Bp, heads, n, n}, &t));
    CT_TRY(ct_softmax(g, t, &t));
    CT_TRY(ct_matmul(g, t, v, 0, 0, &t)); /* (B', heads, n, d) */
    CT_TRY(ct_transpose(g, t, (int[]){0, 2, 1, 3}, &t));
    CT_TRY(ct_reshape(g, t, 3, (int64_t[]){Bp, n, C}, &t));
    snprintf(nm, sizeof nm, "%s.attn.proj", pre);
    CT_TRY(linear(g, t, nm, C, C, 1, &t));
    CT_TRY(ct_reshape(g, t, 6, (int64_t[]){N, nwh, nww, w, w, C}, &t));
    CT_TRY(ct_transpose(g, t, (int[]){0, 1, 3, 2, 4, 5}, &t));
    CT_TRY(ct_reshape(g, t, 4, (int64_t[]){N, Hp, Wp, C}, &t));
    if (shift) CT_TRY(roll_hw(g, t, Hp, Wp, -shift, &t));
    if (Hp > H) CT_TRY(ct_slice(g, t, 1, 0, H, &t));
    if (Wp > W) CT_TRY(ct_slice(g, t, 2, 0, W, &t));
    if (sd > 0) CT_TRY(ct_drop_path(g, t, sd, &t));
    CT_TRY(ct_add(g, x, t, &x));
    /* MLP */
    snprintf(nm, sizeof nm, "%s.norm2", pre);
    CT_TRY(layernorm(g, x, nm, C, &y));
    snprintf(nm, sizeof nm, "%s.mlp.0", pre);
    CT_TRY(linear(g, y, nm, 4 * C, C, 1, &y));
    CT_TRY(ct_gelu(g, y, 0, &y));
    snprintf(nm, sizeof nm, "%s.mlp.3", pre);
    CT_TRY(linear(g, y, nm, C, 4 * C, 1, &y));
    if (sd > 0) CT_TRY(ct_drop_path(g, y, sd, &y));
    CT_TRY(ct_add(g, x, y, out));
    return ct_node_set_name(g, *out, pre);
}

static ct_status swin(ct_graph *g, ct_node x, const ct_vision_config *c, const ct_vis_arch *a, ct_node *logits) {
    int64_t embed = a->swin_embed;
    const int *depths = a->depths, *heads = a->heads;
    ct_context *ctx = ct_graph_context(g);
    int nd;
    int64_t s[CT_MAX_DIMS];
    CT_TRY(ct_node_shape(g, x, &nd, s));
    int64_t N = s[0], cin = s[1], E = embed / c->width_div, w = c->window > 0 ? c->window : 7;
    if (embed % c->width_div)
        return ct_set_error(ctx, CT_E_INVALID_ARG, "%s: width_div %d must divide the embedding width %lld", c->arch,
                            c->width_div, (long long)embed);
    /* the 4x4 stride-4 patch embedding floors; patch merging pads odd sides (torchvision) */
    int64_t H = s[2] / 4, W = s[3] / 4;
    for (int st = 0, h = (int)H, wd = (int)W; st < 4; st++, h = (h + 1) / 2, wd = (wd + 1) / 2) {
        int64_t dim = E << st, ph = padded(h, w), pw = padded(wd, w);
        if (h < 1 || wd < 1 || dim % heads[st] || (w < ph) != (w < pw))
            return ct_set_error(ctx, CT_E_SHAPE,
                                "%s: input %lldx%lld: stage %d's map is %dx%d (%lldx%lld padded to the window %lld): "
                                "it must be at least 1x1, shift on both axes or neither (one side larger than the "
                                "window, the other not, is not supported), and its width %lld must split into the "
                                "%d heads (recipe keys image_size, window)",
                                c->arch, (long long)s[2], (long long)s[3], st + 1, h, wd, (long long)ph, (long long)pw,
                                (long long)w, (long long)dim, heads[st]);
    }
    ct_node w0, b0, y;
    int64_t fan = cin * 16;
    CT_TRY(ct_param(g, "features.0.0.weight", 4, (int64_t[]){E, cin, 4, 4}, CT_INIT_KAIMING_UNIFORM, fan, &w0));
    CT_TRY(ct_param(g, "features.0.0.bias", 1, &E, CT_INIT_KAIMING_UNIFORM, fan, &b0));
    CT_TRY(ct_conv2d(g, x, w0, b0, 4, 0, 1, 1, &y));
    CT_TRY(ct_node_set_name(g, y, "features.0.0"));
    CT_TRY(ct_transpose(g, y, (int[]){0, 2, 3, 1}, &y));
    CT_TRY(layernorm(g, y, "features.0.2", E, &y));
    int nb[4], total = 0, id = 0;
    for (int st = 0; st < 4; st++) {
        nb[st] = c->max_blocks > 0 && depths[st] > c->max_blocks ? c->max_blocks : depths[st];
        total += nb[st];
    }
    char pre[48];
    int64_t dim = E;
    for (int st = 0; st < 4; st++) {
        for (int i = 0; i < nb[st]; i++, id++) {
            snprintf(pre, sizeof pre, "features.%d.%d", 1 + 2 * st, i);
            float sd = total > 1 ? (float)((double)c->drop_path * id / (total - 1)) : 0.0f;
            CT_TRY(block(g, y, pre, N, H, W, dim, heads[st], w, i % 2, sd, &y));
        }
        if (st < 3) { /* patch merging: x0 (even h, even w), x1 (odd h), x2 (odd w), x3 -> 4C; odd sides padded */
            CT_TRY(ct_pad(g, y, 1, 0, H % 2, &y));
            CT_TRY(ct_pad(g, y, 2, 0, W % 2, &y));
            H += H % 2, W += W % 2;
            CT_TRY(ct_reshape(g, y, 6, (int64_t[]){N, H / 2, 2, W / 2, 2, dim}, &y));
            CT_TRY(ct_transpose(g, y, (int[]){0, 1, 3, 4, 2, 5}, &y));
            CT_TRY(ct_reshape(g, y, 4, (int64_t[]){N, H / 2, W / 2, 4 * dim}, &y));
            snprintf(pre, sizeof pre, "features.%d", 2 + 2 * st);
            char nm[80];
            ct_node wr;
            snprintf(nm, sizeof nm, "%s.reduction.weight", pre);
            CT_TRY(ct_param_normal(g, nm, 2, (int64_t[]){2 * dim, 4 * dim}, 0.02f, &wr));
            snprintf(nm, sizeof nm, "%s.norm", pre);
            CT_TRY(layernorm(g, y, nm, 4 * dim, &y));
            CT_TRY(ct_linear(g, y, wr, CT_NONE, &y));
            snprintf(nm, sizeof nm, "%s.reduction", pre);
            CT_TRY(ct_node_set_name(g, y, nm));
            H /= 2, W /= 2, dim *= 2;
        }
    }
    CT_TRY(layernorm(g, y, "norm", dim, &y));
    CT_TRY(ct_mean(g, y, (1u << 1) | (1u << 2), 0, &y));
    CT_TRY(ct_node_set_name(g, y, "avgpool"));
    return linear(g, y, "head", c->num_classes, dim, 1, logits);
}

/* ---- its rows of the model table: embedding width, depths, heads, stochastic depth ------------ */

#define SWIN_DEF_(v, embed, d2, h0, dp)                                                                              \
    const ct_model_def ct_model_def_swin_##v = {                                                                  \
        .build_default = ct_vis_build_default,                                                                    \
        .build = ct_vis_build_recipe,                                                                             \
        .config = &(const ct_vis_arch){.build = swin,                                                             \
                                       .width_mult = 1,                                                           \
                                       .depth_mult = 1,                                                           \
                                       .swin_embed = embed,                                                       \
                                       .depths = {2, 2, d2, 2},                                                   \
                                       .heads = {h0, 2 * h0, 4 * h0, 8 * h0},                                     \
                                       .drop_path = dp},                                                          \
        .vision = 1};
SWIN_DEF_(t, 96, 6, 3, 0.2f)
SWIN_DEF_(s, 96, 18, 3, 0.3f)
SWIN_DEF_(b, 128, 18, 4, 0.5f)
