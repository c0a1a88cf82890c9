/* src/models/vision.c - the torchvision image classifiers by name (the
 * public ct_vision_* API): the vision rows of the model table, their
 * default configurations, and ct_model_vision. The architectures are
 * resnet.c, efficientnet.c and swin.c; what they share is vision_common.c. */
#include <stdio.h>
#include <string.h>

#include "vision_internal.h"

/* The vision row named `name`, or NULL. */
static const ct_model_row *find_arch(const char *name) {
    const ct_model_row *m = ct_model_row_find(name);
    return m && m->def->vision ? m : NULL;
}

/* Vision row i (in table order), or NULL. */
static const ct_model_row *arch_at(int i) {
    for (int m = 0; ct_model_row_at(m); m++)
        if (ct_model_row_at(m)->def->vision && i-- == 0) return ct_model_row_at(m);
    return NULL;
}

int ct_vision_num_archs(void) {
    int n = 0;
    while (arch_at(n)) n++;
    return n;
}

const char *ct_vision_arch_name(int i) {
    const ct_model_row *m = arch_at(i);
    return m ? m->name : NULL;
}

static ct_status unknown_arch(ct_context *ctx, const char *name) {
    char list[256];
    size_t o = 0;
    list[0] = 0;
    const ct_model_row *m;
    for (int i = 0; (m = arch_at(i)) && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", m->name);
    return ct_set_error(ctx, CT_E_INVALID_ARG, "unknown image model '%s'; known: %s", name ? name : "(null)", list);
}

ct_status ct_vision_config_default(ct_context *ctx, const char *arch, ct_vision_config *out) {
    const ct_model_row *m = find_arch(arch);
    if (!m || !out) return unknown_arch(ctx, arch);
    ct_vis_config(m, out);
    return CT_OK;
}

ct_status ct_model_vision(ct_graph *g, ct_node x, const ct_vision_config *c, ct_node *logits) {
    ct_context *ctx = ct_graph_context(g);
    if (!c || !logits) return ct_set_error(ctx, CT_E_INVALID_ARG, "vision model: config and logits must not be NULL");
    const ct_model_row *m = memchr(c->arch, 0, sizeof c->arch) ? find_arch(c->arch) : NULL;
    if (!m) return unknown_arch(ctx, memchr(c->arch, 0, sizeof c->arch) ? c->arch : "(not terminated)");
    return ct_vis_build(g, x, c, m->def->config, logits);
}
