/* The fuse pass: folds norms, RoPE + KV append, SwiGLU, residual adds and the LM head into
 * the matvec nodes they feed or follow, so each step reads every weight once and writes little. */
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"

/* The live node that computes v (in-place RoPE nodes do not count as producers). */
static int mk_fuse_producer(const struct mk_graph *g, int v) {
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct mk_node *n = &g->nodes[i];
        if (!n->dead && n->out == v && n->op != MK_NODE_ROPE) return (int)i;
    }
    return -1;
}

/* Live nodes reading v, in node order; returns how many (writes at most cap). */
static int mk_fuse_consumers(const struct mk_graph *g, int v, int *out, int cap) {
    int k = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct mk_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int j = 0; j < MK_NODE_MAX_IN; j++)
            if (n->in[j] == v) {
                if (k < cap) out[k] = (int)i;
                k++;
                break;
            }
    }
    return k;
}

static int mk_fuse_single_consumer(const struct mk_graph *g, int v) {
    int c[2];
    return mk_fuse_consumers(g, v, c, 2) == 1 ? c[0] : -1;
}

/* The live node of kind op reading v as input slot, or -1. */
static int mk_fuse_find(const struct mk_graph *g, enum mk_node_op op, int slot, int v) {
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op == op && g->nodes[i].in[slot] == v) return (int)i;
    return -1;
}

/* RMSNorm -> {q, k, v matvecs} -> RoPE(q), RoPE(k) -> KV append  ==>  NORM_QKV_ROPE. */
static void mk_fuse_qkv(struct mk_graph *g) {
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        struct mk_node *norm = &g->nodes[i];
        if (norm->dead || norm->op != MK_NODE_RMSNORM) continue;
        int c[4];
        if (mk_fuse_consumers(g, norm->out, c, 4) != 3) continue;
        int kv = -1, qm = -1, km = -1, vm = -1;
        for (int j = 0; j < 3; j++) {
            if (g->nodes[c[j]].op != MK_NODE_MATVEC) goto next;
            int app = mk_fuse_find(g, MK_NODE_KV_APPEND, 0, g->nodes[c[j]].out);
            if (app >= 0) {
                kv = app;
                km = c[j];
            }
        }
        if (kv < 0) continue;
        for (int j = 0; j < 3; j++) {
            if (c[j] == km) continue;
            if (g->nodes[c[j]].out == g->nodes[kv].in[1])
                vm = c[j];
            else
                qm = c[j];
        }
        if (qm < 0 || vm < 0) continue;
        int rq = mk_fuse_find(g, MK_NODE_ROPE, 0, g->nodes[qm].out);
        int rk = mk_fuse_find(g, MK_NODE_ROPE, 0, g->nodes[km].out);
        if (rq < 0 || rk < 0) continue;
        /* k and v must feed nothing but the cache: they are never stored in the arena. */
        int kc[4];
        if (mk_fuse_consumers(g, g->nodes[km].out, kc, 4) != 2 || mk_fuse_single_consumer(g, g->nodes[vm].out) != kv)
            continue;
        struct mk_node fused = *norm;
        fused.op = MK_NODE_NORM_QKV_ROPE;
        snprintf(fused.label, sizeof fused.label, "blk.%u.attn_qkv", norm->layer);
        fused.out = g->nodes[qm].out;
        fused.w[1] = g->nodes[qm].w[0];
        fused.w[2] = g->nodes[km].w[0];
        fused.w[3] = g->nodes[vm].w[0];
        int gone[] = { qm, km, vm, rq, rk, kv };
        for (size_t j = 0; j < sizeof gone / sizeof gone[0]; j++) g->nodes[gone[j]].dead = true;
        *norm = fused;
    next:;
    }
}

/* RMSNorm -> gate, up matvecs -> silu(gate) * up  ==>  NORM_GATE_UP_SILU. */
static void mk_fuse_swiglu(struct mk_graph *g) {
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        struct mk_node *s = &g->nodes[i];
        if (s->dead || s->op != MK_NODE_SILU_MUL) continue;
        int mg = mk_fuse_producer(g, s->in[0]), mu = mk_fuse_producer(g, s->in[1]);
        if (mg < 0 || mu < 0 || g->nodes[mg].op != MK_NODE_MATVEC || g->nodes[mu].op != MK_NODE_MATVEC) continue;
        if (g->nodes[mg].in[0] != g->nodes[mu].in[0]) continue;
        if (mk_fuse_single_consumer(g, s->in[0]) != (int)i || mk_fuse_single_consumer(g, s->in[1]) != (int)i) continue;
        int nn = mk_fuse_producer(g, g->nodes[mg].in[0]);
        if (nn < 0 || g->nodes[nn].op != MK_NODE_RMSNORM) continue;
        int c[3];
        if (mk_fuse_consumers(g, g->nodes[nn].out, c, 3) != 2) continue;
        struct mk_node *norm = &g->nodes[nn];
        struct mk_node fused = *s;
        fused.op = MK_NODE_NORM_GATE_UP_SILU;
        snprintf(fused.label, sizeof fused.label, "blk.%u.ffn_gate_up", norm->layer);
        fused.layer = norm->layer;
        fused.in[0] = norm->in[0];
        fused.in[1] = -1;
        fused.eps = norm->eps;
        fused.w[0] = norm->w[0];
        fused.w[1] = g->nodes[mg].w[0];
        fused.w[2] = g->nodes[mu].w[0];
        norm->dead = g->nodes[mg].dead = g->nodes[mu].dead = true;
        *s = fused;
    }
}

/* RMSNorm -> matvec whose output only the sampler reads  ==>  NORM_LM_HEAD. */
static void mk_fuse_lm_head(struct mk_graph *g) {
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        struct mk_node *mv = &g->nodes[i];
        if (mv->dead || mv->op != MK_NODE_MATVEC) continue;
        int s = mk_fuse_single_consumer(g, mv->out);
        if (s < 0 || g->nodes[s].op != MK_NODE_SAMPLE) continue;
        int nn = mk_fuse_producer(g, mv->in[0]);
        if (nn < 0 || g->nodes[nn].op != MK_NODE_RMSNORM || mk_fuse_single_consumer(g, mv->in[0]) != (int)i) continue;
        struct mk_node *norm = &g->nodes[nn];
        mv->op = MK_NODE_NORM_LM_HEAD;
        mv->in[0] = norm->in[0];
        mv->eps = norm->eps;
        mv->w[1] = mv->w[0];
        mv->w[0] = norm->w[0];
        norm->dead = true;
    }
}

/* t = W . a; y = r + t  ==>  r += W . a in place (y takes r's storage), when nothing reads r
 * after the add. */
static void mk_fuse_residual(struct mk_graph *g) {
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        struct mk_node *add = &g->nodes[i];
        if (add->dead || add->op != MK_NODE_ADD) continue;
        for (int side = 0; side < 2; side++) {
            int t = add->in[side], r = add->in[1 - side];
            int mv = mk_fuse_producer(g, t);
            if (mv < 0 || g->nodes[mv].op != MK_NODE_MATVEC || mk_fuse_single_consumer(g, t) != (int)i) continue;
            int c[16], nc = mk_fuse_consumers(g, r, c, 16);
            bool later = false;
            for (int j = 0; j < nc && j < 16; j++) later |= c[j] > (int)i;
            if (later || nc > 16) continue;
            add->op = MK_NODE_MATVEC_RESIDUAL;
            add->in[0] = g->nodes[mv].in[0];
            add->in[1] = r;
            add->w[0] = g->nodes[mv].w[0];
            snprintf(add->label, sizeof add->label, "%s", g->nodes[mv].label);
            g->values[add->out].alias = r;
            g->nodes[mv].dead = true;
            break;
        }
    }
}

/* attention -> (its only reader) x += Wo . att  ==>  ATTN_OUTPUT: the combine of the attention's
 * sequence blocks moves into every Wo task, saving an op and a wait per layer. */
static void mk_fuse_attn_output(struct mk_graph *g) {
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        struct mk_node *att = &g->nodes[i];
        if (att->dead || att->op != MK_NODE_ATTENTION) continue;
        int mv = mk_fuse_single_consumer(g, att->out);
        if (mv < 0 || g->nodes[mv].op != MK_NODE_MATVEC_RESIDUAL || g->nodes[mv].in[0] != att->out) continue;
        struct mk_node *o = &g->nodes[mv];
        att->op = MK_NODE_ATTN_OUTPUT;
        att->w[0] = o->w[0];
        att->in[1] = o->in[1];
        att->out = o->out;
        o->dead = true;
        /* The attention node stands where the matvec stood: move it there to keep node order. */
        struct mk_node moved = *att;
        att->dead = true;
        *o = moved;
        o->dead = false;
    }
}

enum mk_status mk_graph_fuse(struct mk_graph *g, const struct mk_compile_params *p, struct mk_error *err) {
    mk_fuse_qkv(g);
    mk_fuse_swiglu(g);
    mk_fuse_lm_head(g);
    mk_fuse_residual(g);
    if (p->fuse_attn_output) mk_fuse_attn_output(g);
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct mk_node *n = &g->nodes[i];
        if (n->dead) continue;
        switch (n->op) {
        case MK_NODE_EMBED:
        case MK_NODE_NORM_QKV_ROPE:
        case MK_NODE_ATTENTION:
        case MK_NODE_MATVEC_RESIDUAL:
        case MK_NODE_NORM_GATE_UP_SILU:
        case MK_NODE_NORM_LM_HEAD:
        case MK_NODE_ATTN_OUTPUT:
        case MK_NODE_SAMPLE: break;
        default:
            return mk_error_set(err, MK_ERR_UNSUPPORTED,
                                "graph node '%s' (%s) could not be fused into an executable op", n->label,
                                mk_node_op_name(n->op));
        }
    }
    return MK_OK;
}
