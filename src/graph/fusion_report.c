/* src/graph/fusion_report.c - the plan as text and as Graphviz DOT (ctrain
 * graph): live nodes with op, shape, dtype, kernel and fused group; the fused
 * groups; memory by category and the peak (with what is live there). */
#include <string.h>

#include "plan.h"

static int shown(const ct_plan *p, int i) {
    ct_op op = p->g.nodes[i].op;
    return p->pn[i].live && op != CT_OP_PARAM && op != CT_OP_BUFFER;
}

static const char *kernel_of(const ct_plan *p, int i) {
    ct_op op = p->g.nodes[i].op;
    if (op == CT_OP_INPUT) return "-";
    if (op == CT_OP_RESHAPE) return "alias";
    return ct_kernel_slot_name(p->pn[i].slot);
}

#define MIB(x) ((double)(x) / 1048576.0)

ct_status ct_plan_write_summary(const ct_plan *p, FILE *f) {
    if (!p || !f || !p->pn) return CT_E_INVALID_ARG;
    const ct_graph *g = &p->g;
    int live = 0, fwd = 0, bwd = 0;
    size_t in_b = 0, fwd_b = 0, bwd_b = 0, aux_b = 0;
    for (int i = 0; i < g->n; i++) {
        if (!p->pn[i].live) continue;
        const ct_node_def *d = &g->nodes[i];
        live++;
        if (d->op == CT_OP_PARAM || d->op == CT_OP_BUFFER || d->op == CT_OP_RESHAPE) continue;
        size_t b = p->pn[i].arena == CT_ARENA_ACT ? p->pn[i].bytes : 0;
        if (d->op == CT_OP_INPUT) in_b += b;
        else if (d->flags & CT_NODE_BACKWARD) bwd++, bwd_b += b;
        else fwd++, fwd_b += b;
        aux_b += p->pn[i].aux_bytes;
    }
    fprintf(f, "nodes: %d in the plan, %d live (%d forward ops, %d backward ops), %d fused groups, fusion level %d\n",
            g->n, live, fwd, bwd, p->n_groups, p->fusion_level);
    fprintf(f, "\n%-5s %-4s %-20s %-36s %-18s %-5s %-8s %s\n", "id", "pass", "op", "name", "shape", "dtype", "kernel",
            "group");
    for (int i = 0; i < g->n; i++) {
        if (!shown(p, i)) continue;
        const ct_node_def *d = &g->nodes[i];
        char shape[64], grp[16] = "";
        ct_shape_str(d->ndim, d->shape, shape, sizeof shape);
        if (p->fused_group && p->fused_group[i] >= 0) snprintf(grp, sizeof grp, "#%d", p->fused_group[i]);
        fprintf(f, "%-5d %-4s %-20s %-36.36s %-18s %-5s %-8s %s\n", i, d->flags & CT_NODE_BACKWARD ? "bwd" : "fwd",
                ct_op_table(d->op)->name, d->name, shape, ct_dtype_name(d->dtype), kernel_of(p, i), grp);
    }
    fprintf(f, "\nfused groups: %d\n", p->n_groups);
    for (int k = 0; k < p->n_groups; k++) {
        const ct_fused_group *gr = &p->groups[k];
        fprintf(f, "  #%-3d %-18s %s (absorbed %s)", k, ct_fusion_pattern_name(gr->pattern), g->nodes[gr->nodes[0]].name,
                gr->absorbed[0]);
        if (gr->n_nodes > 1) { /* the other nodes it rewrote: backward ones, or forward (add+layernorm's sum) */
            int all_bwd = 1;
            for (int j = 1; j < gr->n_nodes; j++) all_bwd &= (g->nodes[gr->nodes[j]].flags & CT_NODE_BACKWARD) != 0;
            fprintf(f, all_bwd ? "; backward:" : "; with:");
            for (int j = 1; j < gr->n_nodes; j++) fprintf(f, " %d:%s", gr->nodes[j], ct_op_table(g->nodes[gr->nodes[j]].op)->name);
        }
        if (gr->rule >= 0) fprintf(f, " [rule %d]", gr->rule + 1);
        fprintf(f, "\n");
    }
    for (int k = 0; k < ct_fusion_num_patterns(); k++) {
        int c = ct_plan_fusion_count(p, ct_fusion_pattern_name(k));
        if (c) fprintf(f, "  %-18s x %d\n", ct_fusion_pattern_name(k), c);
    }
    if (p->n_rules) {
        fprintf(f, "fusion rules: %d\n", p->n_rules);
        for (int k = 0; k < p->n_rules; k++) fprintf(f, "  rule %d matched %d times\n", k + 1, p->rule_hits[k]);
    }
    size_t pb = p->n_param_floats * sizeof(float), bb = p->n_buffer_floats * sizeof(float);
    fprintf(f, "\nmemory (MiB):\n");
    fprintf(f, "  parameters            %10.2f\n", MIB(pb));
    fprintf(f, "  gradients             %10.2f\n", MIB(p->loss != CT_NONE ? pb : 0));
    fprintf(f, "  buffers               %10.2f\n", MIB(bb));
    if (p->wcast_bytes) /* model state: the casts of the parameters, kept between steps */
        fprintf(f, "  %s weight copies     %10.2f\n", ct_dtype_name(p->wcast_dtype), MIB(p->wcast_bytes));
    fprintf(f, "  activations (sum of every value, no reuse):\n");
    fprintf(f, "    inputs              %10.2f\n", MIB(in_b));
    fprintf(f, "    forward values      %10.2f\n", MIB(fwd_b));
    fprintf(f, "    backward values     %10.2f\n", MIB(bwd_b));
    fprintf(f, "    saved state (aux)   %10.2f\n", MIB(aux_b));
    fprintf(f, "    all, no reuse       %10.2f\n", MIB(p->act_bytes_no_reuse));
    fprintf(f, "  activation arena      %10.2f  (placed by lifetime, reuse %s; the most bytes live at once: %.2f)\n",
            MIB(p->act_bytes), p->memory_opt ? "on" : "off", MIB(p->act_bytes_min));
    const ct_act_peak *pk = &p->act_peak;
    if (p->memory_opt && pk->at >= 0 && pk->at < p->g.n) {
        const ct_node_def *at = &p->g.nodes[pk->at];
        fprintf(f, "    at that peak, node %d (%s, %s %s):\n", pk->at, at->name,
                at->flags & CT_NODE_BACKWARD ? "backward" : "forward", ct_op_table(at->op)->name);
        fprintf(f, "      forward values %.2f, backward values %.2f, saved state %.2f, FP32 copies %.2f, inputs %.2f\n",
                MIB(pk->fwd), MIB(pk->bwd), MIB(pk->aux), MIB(pk->cvt), MIB(pk->inputs));
        fprintf(f, "      values by dtype:");
        for (int d = 0; d < CT_DTYPE_COUNT; d++)
            if (pk->by_dtype[d]) fprintf(f, " %s %.2f", ct_dtype_name((ct_dtype)d), MIB(pk->by_dtype[d]));
        fprintf(f, "\n      largest:");
        for (int k = 0; k < pk->n_top; k++) {
            const ct_node_def *d = &p->g.nodes[pk->top[k].node];
            fprintf(f, "%s %s %s %.2f", k ? "," : "", d->name,
                    pk->top[k].kind == 1   ? "(saved state)"
                    : pk->top[k].kind == 2 ? "(FP32 copies)"
                                           : ct_dtype_name(d->dtype),
                    MIB(pk->top[k].bytes));
        }
        fprintf(f, "\n");
    }
    fprintf(f, "  workspace             %10.2f\n", MIB(p->ws_bytes));
    fprintf(f, "  peak (all of the above) %8.2f\n",
            MIB(pb * (p->loss != CT_NONE ? 2 : 1) + bb + p->wcast_bytes + p->act_bytes + p->ws_bytes));
    return ferror(f) ? CT_E_IO : CT_OK;
}

static void dot_node(const ct_plan *p, FILE *f, int i, const char *indent) {
    const ct_node_def *d = &p->g.nodes[i];
    char shape[64];
    ct_shape_str(d->ndim, d->shape, shape, sizeof shape);
    const char *style = d->op == CT_OP_INPUT ? "shape=parallelogram" : d->flags & CT_NODE_BACKWARD
                                                                          ? "shape=box, style=\"rounded,filled\", fillcolor=\"#fde2c8\""
                                                                          : "shape=box, style=\"rounded,filled\", fillcolor=\"#d7e8fb\"";
    fprintf(f, "%sn%d [%s, label=\"%s\\n%s\\n%s %s\"];\n", indent, i, style, d->name, ct_op_table(d->op)->name, shape,
            kernel_of(p, i));
}

ct_status ct_plan_write_dot(const ct_plan *p, FILE *f) {
    if (!p || !f || !p->pn) return CT_E_INVALID_ARG;
    const ct_graph *g = &p->g;
    fprintf(f, "digraph plan {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
    fprintf(f, "  label=\"forward (blue) and backward (orange); fused groups as clusters; fusion level %d\";\n",
            p->fusion_level);
    for (int k = 0; k < p->n_groups; k++) {
        const ct_fused_group *gr = &p->groups[k];
        fprintf(f, "  subgraph cluster_fused_%d {\n    style=filled; color=\"#8fbc8f\"; fillcolor=\"#eef7ee\";\n", k);
        fprintf(f, "    label=\"#%d %s (absorbed %s)\";\n", k, ct_fusion_pattern_name(gr->pattern), gr->absorbed[0]);
        for (int j = 0; j < gr->n_nodes; j++)
            if (shown(p, gr->nodes[j])) dot_node(p, f, gr->nodes[j], "    ");
        fprintf(f, "  }\n");
    }
    for (int i = 0; i < g->n; i++) {
        if (!shown(p, i) || (p->fused_group && p->fused_group[i] >= 0)) continue;
        dot_node(p, f, i, "  ");
    }
    for (int i = 0; i < g->n; i++) {
        if (!shown(p, i)) continue;
        const ct_node_def *d = &g->nodes[i];
        for (int j = 0; j < d->n_in; j++)
            if (shown(p, d->in[j])) fprintf(f, "  n%d -> n%d;\n", d->in[j], i);
    }
    fprintf(f, "}\n");
    return ferror(f) ? CT_E_IO : CT_OK;
}
