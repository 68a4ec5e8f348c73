/* The tensor-graph IR of one decode step, its Llama builder, and the compiler passes over it. */
#ifndef MK_GRAPH_H
#define MK_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "graph/program.h"
#include "core/model.h"
#include "core/status.h"

enum mk_node_op {
    /* Unfused ops, as the builder writes them. */
    MK_NODE_EMBED,     /* out = token_embd[token] */
    MK_NODE_RMSNORM,   /* out = in * rsqrt(mean(in^2) + eps) * w0 */
    MK_NODE_MATVEC,    /* out = w0 . in */
    MK_NODE_ROPE,      /* out = rope(in) at the step's position (in place) */
    MK_NODE_KV_APPEND, /* cache[layer][pos] = (in0, in1) */
    MK_NODE_ATTENTION, /* out = softmax(q . K^T / sqrt(d)) V over the layer's cache */
    MK_NODE_ADD,       /* out = in0 + in1 */
    MK_NODE_SILU_MUL,  /* out = silu(in0) * in1 */
    MK_NODE_SAMPLE,    /* token from logits */
    /* Fused ops, made by the fuse pass; each lowers to one opcode (attention to two). */
    MK_NODE_NORM_QKV_ROPE,
    MK_NODE_MATVEC_RESIDUAL,
    MK_NODE_NORM_GATE_UP_SILU,
    MK_NODE_NORM_LM_HEAD,
    MK_NODE_ATTN_OUTPUT, /* attention whose output only the attention-output matvec reads */
};

#define MK_NODE_MAX_IN 3
#define MK_NODE_MAX_W  4

/* A value is an activation vector; values the fuse pass folds into a neighbour are never placed. */
struct mk_value {
    char name[40];
    uint32_t n;   /* floats */
    int alias;    /* index of the value whose storage this one shares (in-place ops), or -1 */
    uint32_t off; /* arena offset in floats, set by the placement pass */
    bool placed;
};

struct mk_node {
    enum mk_node_op op;
    char label[40];
    int in[MK_NODE_MAX_IN]; /* value indices, -1 unused */
    int out;                /* value index, -1 none */
    const struct mk_weight *w[MK_NODE_MAX_W];
    uint32_t layer;
    float eps;
    bool dead; /* folded into another node by fusion */
};

struct mk_graph {
    const struct mk_model *model;
    struct mk_node *nodes;
    uint32_t n_nodes, cap_nodes;
    struct mk_value *values;
    uint32_t n_values, cap_values;
    int x;      /* the residual stream value */
    int logits; /* the logits value */
};

enum mk_status mk_graph_build_llama(const struct mk_model *m, struct mk_graph *g, struct mk_error *err);
void mk_graph_free(struct mk_graph *g);

/* Pass 1: fold norms, residual adds, RoPE + KV append and SwiGLU into matvec nodes. Fails if a
 * node is left that no executor implements. */
enum mk_status mk_graph_fuse(struct mk_graph *g, const struct mk_compile_params *p, struct mk_error *err);

/* Passes 2-4 (tile, depend, schedule) and placement, emitting the program. */
enum mk_status mk_graph_lower(const struct mk_graph *g, const struct mk_compile_params *p, struct mk_program **out,
                              struct mk_error *err);

const char *mk_node_op_name(enum mk_node_op op);

#endif
