/* Builds the unfused tensor graph of one Llama decode step from the model description. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

static int mk_graph_add_value(struct mk_graph *g, const char *name, uint32_t n) {
    if (g->n_values == g->cap_values) {
        uint32_t cap = g->cap_values ? g->cap_values * 2 : 64;
        struct mk_value *v = realloc(g->values, cap * sizeof *v);
        if (!v) return -1;
        g->values = v;
        g->cap_values = cap;
    }
    struct mk_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->n = n;
    v->alias = -1;
    return (int)g->n_values++;
}

static struct mk_node *mk_graph_add_node(struct mk_graph *g, enum mk_node_op op, const char *label, int out) {
    if (g->n_nodes == g->cap_nodes) {
        uint32_t cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        struct mk_node *n = realloc(g->nodes, cap * sizeof *n);
        if (!n) return NULL;
        g->nodes = n;
        g->cap_nodes = cap;
    }
    struct mk_node *n = &g->nodes[g->n_nodes++];
    memset(n, 0, sizeof *n);
    n->op = op;
    snprintf(n->label, sizeof n->label, "%s", label);
    for (int i = 0; i < MK_NODE_MAX_IN; i++) n->in[i] = -1;
    n->out = out;
    return n;
}

void mk_graph_free(struct mk_graph *g) {
    free(g->nodes);
    free(g->values);
    memset(g, 0, sizeof *g);
}

const char *mk_node_op_name(enum mk_node_op op) {
    switch (op) {
    case MK_NODE_EMBED: return "embed";
    case MK_NODE_RMSNORM: return "rmsnorm";
    case MK_NODE_MATVEC: return "matvec";
    case MK_NODE_ROPE: return "rope";
    case MK_NODE_KV_APPEND: return "kv_append";
    case MK_NODE_ATTENTION: return "attention";
    case MK_NODE_ADD: return "add";
    case MK_NODE_SILU_MUL: return "silu_mul";
    case MK_NODE_SAMPLE: return "sample";
    case MK_NODE_NORM_QKV_ROPE: return "norm_qkv_rope";
    case MK_NODE_MATVEC_RESIDUAL: return "matvec_residual";
    case MK_NODE_NORM_GATE_UP_SILU: return "norm_gate_up_silu";
    case MK_NODE_NORM_LM_HEAD: return "norm_lm_head";
    case MK_NODE_ATTN_OUTPUT: return "attn_output";
    }
    return "?";
}

enum mk_status mk_graph_build_llama(const struct mk_model *m, struct mk_graph *g, struct mk_error *err) {
    memset(g, 0, sizeof *g);
    g->model = m;
    const struct mk_llama_config *c = &m->cfg;
    if (m->vocab_only)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "model has no tensors (vocab-only file): nothing to compile");
    uint32_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
    char name[40];
#define V(nm, n)             mk_graph_add_value(g, (nm), (n))
#define NODE(op, label, out) mk_graph_add_node(g, (op), (label), (out))
    int x = V("x", c->n_embd);
    struct mk_node *n = NODE(MK_NODE_EMBED, "token_embd", x);
    if (x < 0 || !n) goto nomem;
    n->w[0] = &m->token_embd;
    g->x = x;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        const struct mk_layer_weights *L = &m->layers[l];
        int xn, q, k, v, att, o, x2, xn2, gt, up, h, d, x3;
#define LV(var, suffix, sz)                              \
    snprintf(name, sizeof name, "blk.%u.%s", l, suffix); \
    var = V(name, sz);                                   \
    if (var < 0) goto nomem;
#define LN(op, suffix, out)                              \
    snprintf(name, sizeof name, "blk.%u.%s", l, suffix); \
    n = NODE(op, name, out);                             \
    if (!n) goto nomem;                                  \
    n->layer = l;
        LV(xn, "attn_norm.out", c->n_embd);
        LN(MK_NODE_RMSNORM, "attn_norm", xn);
        n->in[0] = x;
        n->w[0] = &L->attn_norm;
        n->eps = c->rms_eps;
        LV(q, "q", q_dim);
        LN(MK_NODE_MATVEC, "attn_q", q);
        n->in[0] = xn;
        n->w[0] = &L->wq;
        LV(k, "k", kv_dim);
        LN(MK_NODE_MATVEC, "attn_k", k);
        n->in[0] = xn;
        n->w[0] = &L->wk;
        LV(v, "v", kv_dim);
        LN(MK_NODE_MATVEC, "attn_v", v);
        n->in[0] = xn;
        n->w[0] = &L->wv;
        LN(MK_NODE_ROPE, "rope_q", q);
        n->in[0] = q;
        LN(MK_NODE_ROPE, "rope_k", k);
        n->in[0] = k;
        LN(MK_NODE_KV_APPEND, "kv_append", -1);
        n->in[0] = k;
        n->in[1] = v;
        LV(att, "attn.out", q_dim);
        LN(MK_NODE_ATTENTION, "attn", att);
        n->in[0] = q;
        LV(o, "attn_output.out", c->n_embd);
        LN(MK_NODE_MATVEC, "attn_output", o);
        n->in[0] = att;
        n->w[0] = &L->wo;
        LV(x2, "x.attn", c->n_embd);
        LN(MK_NODE_ADD, "attn_residual", x2);
        n->in[0] = x;
        n->in[1] = o;
        LV(xn2, "ffn_norm.out", c->n_embd);
        LN(MK_NODE_RMSNORM, "ffn_norm", xn2);
        n->in[0] = x2;
        n->w[0] = &L->ffn_norm;
        n->eps = c->rms_eps;
        LV(gt, "gate", c->n_ff);
        LN(MK_NODE_MATVEC, "ffn_gate", gt);
        n->in[0] = xn2;
        n->w[0] = &L->w_gate;
        LV(up, "up", c->n_ff);
        LN(MK_NODE_MATVEC, "ffn_up", up);
        n->in[0] = xn2;
        n->w[0] = &L->w_up;
        LV(h, "ffn.hidden", c->n_ff);
        LN(MK_NODE_SILU_MUL, "ffn_swiglu", h);
        n->in[0] = gt;
        n->in[1] = up;
        LV(d, "ffn_down.out", c->n_embd);
        LN(MK_NODE_MATVEC, "ffn_down", d);
        n->in[0] = h;
        n->w[0] = &L->w_down;
        LV(x3, "x.ffn", c->n_embd);
        LN(MK_NODE_ADD, "ffn_residual", x3);
        n->in[0] = x2;
        n->in[1] = d;
        x = x3;
#undef LV
#undef LN
    }
    int xf = V("output_norm.out", c->n_embd);
    n = NODE(MK_NODE_RMSNORM, "output_norm", xf);
    if (xf < 0 || !n) goto nomem;
    n->in[0] = x;
    n->w[0] = &m->output_norm;
    n->eps = c->rms_eps;
    int logits = V("logits", c->n_vocab);
    n = NODE(MK_NODE_MATVEC, "output", logits);
    if (logits < 0 || !n) goto nomem;
    n->in[0] = xf;
    n->w[0] = &m->output;
    g->logits = logits;
    n = NODE(MK_NODE_SAMPLE, "sample", -1);
    if (!n) goto nomem;
    n->in[0] = logits;
#undef V
#undef NODE
    return MK_OK;
nomem:
    mk_graph_free(g);
    return mk_error_set(err, MK_ERR_NOMEM, "out of memory building the decode graph");
}
