/* src/models/registry.c - the rows of the model table (CT_MODEL_TABLE in
 * include/ctrain/models.h, one per model) and every lookup by name: the
 * recipe's models and presets, `ctrain graph --model NAME` and parameter
 * counts by name. Each row's builder lives in its own file (mlp.c, cnn.c,
 * transformer.c, resnet.c, ...), which defines ct_model_def_<name>. */
#include <stdio.h>
#include <string.h>

#include "model_def.h"

#define CT_MODEL_ROW_(ID, nm, fam, k, d) [CT_MODEL_##ID] = {#nm, CT_MODEL_FAMILY_##fam, k, d, &ct_model_def_##nm},
static const ct_model_row k_rows[] = {CT_MODEL_TABLE(CT_MODEL_ROW_)};
#undef CT_MODEL_ROW_
_Static_assert(sizeof k_rows / sizeof k_rows[0] == CT_MODEL_COUNT, "one row per ct_model_kind");
_Static_assert(CT_MODEL_COUNT <= 32, "ct_recipe_key_info.models holds one bit per model");

const ct_model_row *ct_model_row_at(int m) { return m >= 0 && m < CT_MODEL_COUNT ? &k_rows[m] : NULL; }

const ct_model_row *ct_model_row_find(const char *name) {
    for (int m = 0; name && m < CT_MODEL_COUNT; m++)
        if (!strcmp(k_rows[m].name, name)) return &k_rows[m];
    return NULL;
}

const char *ct_model_name(ct_model_kind m) { return ct_model_row_at((int)m) ? k_rows[m].name : "?"; }
ct_model_family ct_model_family_of(ct_model_kind m) {
    return ct_model_row_at((int)m) ? k_rows[m].family : CT_MODEL_FAMILY_IMAGE;
}
const char *ct_model_keys(ct_model_kind m) { return ct_model_row_at((int)m) ? k_rows[m].keys : ""; }
const char *ct_model_desc(ct_model_kind m) { return ct_model_row_at((int)m) ? k_rows[m].desc : ""; }
int ct_model_is_vision(ct_model_kind m) { return ct_model_row_at((int)m) && k_rows[m].def->vision; }

const char *ct_model_preset_name(ct_model_kind m, int i) {
    const ct_model_preset *p = ct_model_row_at((int)m) ? k_rows[m].def->presets : NULL;
    for (int j = 0; p && p[j].name; j++)
        if (j == i) return p[j].name;
    return NULL;
}

/* ---- every name: the rows', each followed by its presets' ---------------------------------- */

int ct_model_num_builtin(void) {
    int n = 0;
    for (int m = 0; m < CT_MODEL_COUNT; m++, n++)
        for (int j = 0; ct_model_preset_name((ct_model_kind)m, j); j++) n++;
    return n;
}

/* Name i of ct_model_builtin_name: row *m, preset *p (-1: the row itself). */
static int builtin_at(int i, int *m, int *p) {
    for (*m = 0; i >= 0 && *m < CT_MODEL_COUNT; ++*m) {
        if (i-- == 0) return *p = -1, 1;
        const ct_model_preset *ps = k_rows[*m].def->presets;
        for (*p = 0; ps && ps[*p].name; ++*p)
            if (i-- == 0) return 1;
    }
    return 0;
}

const char *ct_model_builtin_name(int i) {
    int m, p;
    if (!builtin_at(i, &m, &p)) return NULL;
    return p < 0 ? k_rows[m].name : k_rows[m].def->presets[p].name;
}

const char *ct_model_builtin_desc(int i) {
    int m, p;
    if (!builtin_at(i, &m, &p)) return NULL;
    return p < 0 ? k_rows[m].desc : k_rows[m].def->presets[p].desc;
}

ct_status ct_model_find(ct_context *ctx, const char *name, ct_model_kind *kind, const char **preset) {
    for (int m = 0; name && m < CT_MODEL_COUNT; m++) {
        const ct_model_preset *ps = k_rows[m].def->presets;
        const char *hit = NULL;
        int found = !strcmp(k_rows[m].name, name);
        for (int p = 0; !found && ps && ps[p].name; p++)
            if (!strcmp(ps[p].name, name)) hit = ps[p].name, found = 1;
        if (!found) continue;
        if (kind) *kind = (ct_model_kind)m;
        if (preset) *preset = hit;
        return CT_OK;
    }
    char list[1024];
    size_t o = 0;
    list[0] = 0;
    for (int i = 0; o < sizeof list; i++) {
        const char *n = ct_model_builtin_name(i);
        if (!n) break;
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", n);
    }
    return ct_set_error(ctx, CT_E_INVALID_ARG, "model '%s' is unknown; built-in models: %s", name ? name : "(null)",
                        list);
}

/* ---- building by name ---------------------------------------------------------------------- */

static ct_status build_named(ct_graph *g, const char *name, int64_t batch, int64_t n_classes, ct_node *out) {
    ct_model_kind m;
    const char *preset;
    CT_TRY(ct_model_find(ct_graph_context(g), name, &m, &preset));
    return k_rows[m].def->build_default(g, &k_rows[m], preset, batch, n_classes, out);
}

ct_status ct_model_by_name(ct_graph *g, const char *name, int64_t batch, ct_node *out) {
    if (!g || !name || !out || batch < 1) return CT_E_INVALID_ARG;
    return build_named(g, name, batch, 0, out);
}

ct_status ct_model_build(ct_graph *g, ct_node x, const ct_recipe *r, int64_t n_classes, ct_node *logits) {
    if (!g || !r || !logits) return CT_E_INVALID_ARG;
    const ct_model_row *m = ct_model_row_at((int)r->model);
    if (!m) return ct_set_error(ct_graph_context(g), CT_E_INVALID_ARG, "model %d is not a ct_model_kind", (int)r->model);
    return m->def->build(g, m, x, r, n_classes, logits);
}

/* Sum of the parameter sizes of a built graph. */
static int64_t graph_params(const ct_graph *g) {
    int64_t tot = 0;
    for (int i = 0; i < ct_graph_num_nodes(g); i++) {
        if (strcmp(ct_node_op_name(g, i), "param")) continue;
        int nd;
        int64_t s[CT_MAX_DIMS], n = 1;
        if (ct_node_shape(g, i, &nd, s) != CT_OK) continue;
        for (int d = 0; d < nd; d++) n *= s[d];
        tot += n;
    }
    return tot;
}

ct_status ct_model_num_params_by_name(ct_context *ctx, const char *name, int64_t num_classes, int64_t *out) {
    if (!name || !out) return ct_set_error(ctx, CT_E_INVALID_ARG, "model name and output must not be NULL");
    ct_model_kind m;
    const char *preset;
    CT_TRY(ct_model_find(ctx, name, &m, &preset));
    if (k_rows[m].def->num_params) { /* counted, not built (gpt2: 124M) */
        *out = k_rows[m].def->num_params(preset);
        return CT_OK;
    }
    ct_graph *g;
    CT_TRY(ct_graph_create(ctx, &g));
    ct_node logits;
    ct_status st = build_named(g, name, 1, num_classes, &logits);
    if (st == CT_OK) *out = graph_params(g);
    ct_graph_free(g);
    return st;
}
