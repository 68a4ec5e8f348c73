/* Lowering passes after fusion: place values in the arena, tile ops into tasks, derive
 * dependency counters (and barriers where waits get too wide), schedule, and emit the program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"

/* Buffers the depend pass tracks: root arena values, per-instruction scratch, per-layer KV. */
#define MK_LOWER_MAX_ACCESS 4

struct mk_lower_instr {
    struct mk_instr ins;
    char label[40];
    int reads[MK_LOWER_MAX_ACCESS], n_reads;
    int writes[MK_LOWER_MAX_ACCESS], n_writes;
};

struct mk_lower {
    const struct mk_graph *g;
    const struct mk_compile_params *p;
    struct mk_lower_instr *li;
    uint32_t n, cap;
    const struct mk_weight **wt; /* (n_weights) distinct weights */
    uint32_t n_wt;
    uint32_t arena;                      /* floats allocated so far */
    uint32_t n_buf;                      /* buffer ids: values [0, n_values), then scratch, then KV */
    uint32_t ubatch;                     /* rows of every activation buffer (1: the one-token program) */
    uint32_t tokens_off, out_tokens_off; /* chunk programs' int32 (ubatch) token arrays, else MK_NO_BUF */
    uint32_t n_arrive;                   /* ATTN_PARTIAL's arrival counters, placed after the signals */
};

static uint32_t mk_lower_alloc(struct mk_lower *L, uint64_t n) {
    uint32_t off = L->arena;
    L->arena += (uint32_t)((n + 15) / 16 * 16); /* 64-byte aligned buffers */
    return off;
}

static int mk_lower_root(const struct mk_graph *g, int v) {
    while (g->values[v].alias >= 0) v = g->values[v].alias;
    return v;
}

static uint32_t mk_lower_weight(struct mk_lower *L, const struct mk_weight *w) {
    for (uint32_t i = 0; i < L->n_wt; i++)
        if (L->wt[i]->data == w->data && L->wt[i]->rows == w->rows && L->wt[i]->cols == w->cols) return i;
    L->wt[L->n_wt] = w;
    return L->n_wt++;
}

/* Appends n weights at consecutive indices (ops that name a set of weights by its first index),
 * or finds them already there in that order. */
static uint32_t mk_lower_weight_run(struct mk_lower *L, const struct mk_weight *const *ws, uint32_t n) {
    for (uint32_t i = 0; i + n <= L->n_wt; i++) {
        uint32_t k = 0;
        while (k < n && L->wt[i + k]->data == ws[k]->data && L->wt[i + k]->cols == ws[k]->cols) k++;
        if (k == n) return i;
    }
    uint32_t first = L->n_wt;
    for (uint32_t k = 0; k < n; k++) L->wt[L->n_wt++] = ws[k];
    return first;
}

static struct mk_lower_instr *mk_lower_emit(struct mk_lower *L, uint16_t op, uint32_t n_tasks, const char *label) {
    if (L->n == L->cap) {
        uint32_t cap = L->cap ? L->cap * 2 : 128;
        struct mk_lower_instr *li = realloc(L->li, cap * sizeof *li);
        if (!li) return NULL;
        L->li = li;
        L->cap = cap;
    }
    struct mk_lower_instr *x = &L->li[L->n++];
    memset(x, 0, sizeof *x);
    x->ins.op = op;
    x->ins.n_tasks = n_tasks;
    x->ins.signal = MK_NO_COUNTER;
    for (int i = 0; i < 2; i++) x->ins.wait[i].ctr = MK_NO_COUNTER;
    for (int i = 0; i < 4; i++) x->ins.weight[i] = MK_NO_WEIGHT, x->ins.buf[i] = MK_NO_BUF;
    snprintf(x->label, sizeof x->label, "%s", label);
    return x;
}

static void mk_lower_access(struct mk_lower_instr *x, int rd0, int rd1, int wr0, int wr1) {
    int rd[2] = { rd0, rd1 }, wr[2] = { wr0, wr1 };
    for (int i = 0; i < 2; i++) {
        if (rd[i] >= 0) x->reads[x->n_reads++] = rd[i];
        if (wr[i] >= 0) x->writes[x->n_writes++] = wr[i];
    }
}

static uint32_t mk_lower_div_up(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

/* Rows per task for a matvec of `rows` outputs: about tasks_per_worker tiles per worker, but no
 * tile under `min_rows` (tiny tiles cost more in waits than they save), and a multiple of `mult`. */
static uint32_t mk_lower_tile_rows(const struct mk_compile_params *p, uint32_t rows, uint32_t mult) {
    uint32_t tpw = p->tasks_per_worker ? p->tasks_per_worker : 1;
    uint32_t want = p->n_workers * tpw;
    uint32_t r = mk_lower_div_up(rows, want ? want : 1);
    if (r < 2) r = 2;
    r = (r + mult - 1) / mult * mult;
    if (r > rows) r = (rows + mult - 1) / mult * mult;
    return r;
}

/* What the per-node emitters share: shapes, where each root value lives, and the scratch buffers. */
struct mk_lower_ops_ctx {
    const struct mk_llama_config *c;
    uint32_t q_dim, kv_dim, attn_block, n_blocks;
    uint32_t attn_solo; /* mk_args_attn.solo of every attention instruction */
    uint32_t *voff;     /* (n_values) arena offset of each placed root value */
    uint32_t *xqoff;    /* (n_values) its int8-level copy (abi.h, MK_XQ_*), or MK_NO_BUF */
    uint32_t *xqnoff;   /* (n_values) its normalized copy (abi.h, MK_XQN_*), or MK_NO_BUF */
    int kv_buf0;        /* KV cache of layer l is buffer kv_buf0 + l */
    int scratch;        /* next scratch buffer id */
    uint32_t lm_tiles_off, lm_tiles, lm_rpt;
};

static uint32_t mk_lower_off(struct mk_lower *L, const struct mk_lower_ops_ctx *k, int v) {
    return k->voff[mk_lower_root(L->g, v)];
}

/* Places every root value a live node touches, in order of first use. */
static enum mk_status mk_lower_place(struct mk_lower *L, uint32_t *voff, struct mk_error *err) {
    const struct mk_graph *g = L->g;
    bool *placed = calloc(g->n_values ? g->n_values : 1, sizeof *placed);
    if (!placed) return mk_error_set(err, MK_ERR_NOMEM, "out of memory lowering the graph");
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct mk_node *n = &g->nodes[i];
        if (n->dead) continue;
        int vs[MK_NODE_MAX_IN + 1] = { n->in[0], n->in[1], n->in[2], n->out };
        for (int j = 0; j < MK_NODE_MAX_IN + 1; j++) {
            if (vs[j] < 0) continue;
            int r = mk_lower_root(g, vs[j]);
            if (!placed[r]) {
                voff[r] = mk_lower_alloc(L, (uint64_t)g->values[r].n * L->ubatch);
                placed[r] = true;
            }
        }
    }
    free(placed);
    return MK_OK;
}

#define OFF(v) mk_lower_off(L, k, (v))
#define BUF(v) mk_lower_root(L->g, (v))

static struct mk_lower_instr *mk_lower_embed(struct mk_lower *L, struct mk_lower_ops_ctx *k, const struct mk_node *n) {
    const struct mk_llama_config *c = k->c;
    const struct mk_compile_params *p = L->p;
    struct mk_lower_instr *x;
    uint32_t chunk = mk_lower_tile_rows(p, c->n_embd, 64);
    if (chunk < 256) chunk = 256;
    x = mk_lower_emit(L, MK_OP_EMBED, mk_lower_div_up(c->n_embd, chunk), n->label);
    if (!x) return NULL;
    x->ins.weight[0] = mk_lower_weight(L, n->w[0]);
    x->ins.buf[0] = OFF(n->out);
    if (L->ubatch > 1) x->ins.buf[1] = L->tokens_off = mk_lower_alloc(L, L->ubatch);
    x->ins.args.embed.elems_per_task = chunk;
    x->ins.args.embed.n_embd = c->n_embd;
    mk_lower_access(x, -1, -1, BUF(n->out), -1);
    return x;
}

/* Rows per task over wv apart from wq and wk (mk_args_qkv.v_rows_per_task), or 0. Where wv's format
 * costs more a row than wq's and wk's (Q4_K_M's Q6_K wv in half the layers: 1.46x the bytes), tasks of
 * one size let the wv tasks set the op's span (llama-8b: 19 us against 13 for the wq tasks;
 * BENCHMARKS.md, 2026-11-27 nineteenth session). The GPU's K-quant products work on 16-row tiles whose
 * super-blocks are shared among the block's warps, so a task's time follows its tiles more than its
 * rows: wq and wk take whole tiles sized from the op's cost over the workers, wv the most whole tiles
 * that cost no more (or, under one tile, the most even rows), and the split is kept only where every
 * task still gets a worker of its own. */
static uint32_t mk_lower_qkv_v_rows(const struct mk_lower *L, const struct mk_node *n, uint32_t q_dim, uint32_t kv_dim,
                                    uint32_t *rpt) {
    const uint32_t tile = 16;
    const struct mk_weight *wq = n->w[1], *wk = n->w[2], *wv = n->w[3];
    const struct mk_compile_params *p = L->p;
    if (L->ubatch > 1 || !mk_dtype_is_block(wq->type) || !mk_dtype_is_block(wv->type) || wk->type != wq->type ||
        wv->row_bytes <= wq->row_bytes || kv_dim < tile)
        return 0;
    const uint64_t want = (uint64_t)p->n_workers * (p->tasks_per_worker ? p->tasks_per_worker : 1);
    const uint64_t qk = (uint64_t)q_dim + kv_dim, cost = qk * wq->row_bytes + (uint64_t)kv_dim * wv->row_bytes;
    const uint64_t per = want ? cost / want : cost;
    uint64_t r = (per + wq->row_bytes - 1) / wq->row_bytes;
    r = (r + tile - 1) / tile * tile;
    const uint64_t fit = r * wq->row_bytes / wv->row_bytes; /* < r: wv's rows cost more */
    const uint64_t v = fit >= tile ? fit / tile * tile : fit / 2 * 2;
    if (v == 0 || r > qk || (qk + r - 1) / r + (kv_dim + v - 1) / v > want) return 0;
    *rpt = (uint32_t)r;
    return (uint32_t)v;
}

static struct mk_lower_instr *mk_lower_qkv(struct mk_lower *L, struct mk_lower_ops_ctx *k, const struct mk_node *n) {
    const struct mk_llama_config *c = k->c;
    const struct mk_compile_params *p = L->p;
    const uint32_t q_dim = k->q_dim, kv_dim = k->kv_dim;
    struct mk_lower_instr *x;
    const struct mk_layer_weights *lw = &L->g->model->layers[n->layer];
    uint32_t flags = (c->rope_neox ? MK_QKV_NEOX : 0u) | (c->has_qk_norm ? MK_QKV_QK_NORM : 0u);
    /* NEOX pairs span half a head and the q/k norms a whole one: such tasks hold whole heads. */
    uint32_t rows = q_dim + 2 * kv_dim, rpt = mk_lower_tile_rows(p, rows, flags ? c->head_dim : 2);
    const uint32_t v_rpt = flags ? 0 : mk_lower_qkv_v_rows(L, n, q_dim, kv_dim, &rpt);
    const uint32_t tasks =
        v_rpt ? mk_lower_div_up(q_dim + kv_dim, rpt) + mk_lower_div_up(kv_dim, v_rpt) : mk_lower_div_up(rows, rpt);
    x = mk_lower_emit(L, MK_OP_NORM_QKV_ROPE, tasks, n->label);
    if (!x) return NULL;
    for (int w = 0; w < 4; w++) x->ins.weight[w] = mk_lower_weight(L, n->w[w]);
    x->ins.buf[3] = k->xqnoff[n->in[0]];
    const struct mk_weight *bias[3] = { &lw->bq, &lw->bk, &lw->bv }, *norms[2] = { &lw->q_norm, &lw->k_norm };
    x->ins.buf[0] = OFF(n->in[0]);
    x->ins.buf[1] = OFF(n->out);
    x->ins.args.qkv =
        (struct mk_args_qkv){ .rows_per_task = rpt,
                              .layer = n->layer,
                              .q_dim = q_dim,
                              .kv_dim = kv_dim,
                              .head_dim = c->head_dim,
                              .n_rot = c->n_rot,
                              .eps = n->eps,
                              .rope_base = c->rope_base,
                              .bias = c->has_qkv_bias ? mk_lower_weight_run(L, bias, 3) : MK_NO_WEIGHT,
                              .qk_norm = c->has_qk_norm ? mk_lower_weight_run(L, norms, 2) : MK_NO_WEIGHT,
                              .rope_freqs =
                                  c->has_rope_freqs ? mk_lower_weight(L, &L->g->model->rope_freqs) : MK_NO_WEIGHT,
                              .flags = flags,
                              .rope_scale = c->rope_freq_scale,
                              .v_rows_per_task = v_rpt };
    mk_lower_access(x, BUF(n->in[0]), -1, BUF(n->out), k->kv_buf0 + (int)n->layer);
    return x;
}

/* The norm op that reads value v (the residual stream after a residual add) where it can take the
 * normalized copy (abi.h, MK_XQN_*) instead of normalizing v in every task: a one-token program, an
 * f32 norm weight over whole groups, every matrix of the op in a block format. NULL otherwise. */
static const struct mk_node *mk_lower_norm_reader(const struct mk_lower *L, int v) {
    if (L->ubatch > 1 || v < 0) return NULL;
    const struct mk_graph *g = L->g;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct mk_node *m = &g->nodes[i];
        int mats;
        if (m->dead || m->in[0] != v) continue;
        switch (m->op) {
        case MK_NODE_NORM_QKV_ROPE: mats = 3; break;
        case MK_NODE_NORM_GATE_UP_SILU: mats = 2; break;
        case MK_NODE_NORM_LM_HEAD: mats = 1; break;
        default: continue;
        }
        if (m->w[0]->type != MK_DTYPE_F32 || m->w[0]->cols % MK_XQ_GROUP) return NULL;
        for (int w = 1; w <= mats; w++)
            if (!mk_dtype_is_block(m->w[w]->type)) return NULL;
        return m;
    }
    return NULL;
}

/* A residual add's instruction x (rows of n->w[0], rpt a task) also writes the normalized copy of
 * its output for the norm op that reads it next, where that op takes one and the tasks hold whole
 * groups. */
static void mk_lower_norm_copy(struct mk_lower *L, struct mk_lower_ops_ctx *k, const struct mk_node *n,
                               struct mk_lower_instr *x, uint32_t rows, uint32_t rpt) {
    if (!mk_dtype_is_block(n->w[0]->type) || rows % MK_XQ_GROUP || rpt % MK_XQ_GROUP) return;
    const struct mk_node *r = mk_lower_norm_reader(L, n->out);
    if (!r) return;
    x->ins.weight[1] = mk_lower_weight(L, r->w[0]);
    x->ins.buf[3] = k->xqnoff[n->out] = mk_lower_alloc(L, MK_XQN_FLOATS(rows));
}

/* Whether a live block-format MATVEC_RESIDUAL reads value v of n elements: then the op producing
 * v also writes its int8-level copy, so that the matvec's tasks do not each quantize it again
 * (one-token programs; the groups of 32 are whole in the producer's tiles). */
static bool mk_lower_wants_xq(const struct mk_lower *L, int v, uint64_t n) {
    if (L->ubatch > 1 || n % MK_XQ_GROUP) return false;
    const struct mk_graph *g = L->g;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct mk_node *m = &g->nodes[i];
        if (!m->dead && m->op == MK_NODE_MATVEC_RESIDUAL && m->in[0] >= 0 &&
            mk_lower_root(g, m->in[0]) == mk_lower_root(g, v) && mk_dtype_is_block(m->w[0]->type))
            return true;
    }
    return false;
}

/* The arena offset of value v's int8-level copy (n elements), placed on first use: its producer
 * writes there and the matvec reading v finds it under the same buffer id. */
static uint32_t mk_lower_xq_out(struct mk_lower *L, struct mk_lower_ops_ctx *k, int v, uint64_t n) {
    uint32_t *xo = &k->xqoff[BUF(v)];
    if (*xo == MK_NO_BUF) *xo = mk_lower_alloc(L, MK_XQ_FLOATS(n));
    return *xo;
}

/* Whether the last split of each KV head merges it (an ATTN_PARTIAL with arrival counters) rather
 * than an op: as asked, or under `auto` while a KV head's partials fit the split's shared memory. */
static bool mk_lower_merge_in_splits(const struct mk_compile_params *p, const struct mk_llama_config *c,
                                     uint32_t n_blocks) {
    const uint64_t merge_floats = (uint64_t)(c->n_head / c->n_head_kv) * n_blocks * (c->head_dim + 2);
    return p->attn_merge == MK_ATTN_MERGE_SPLITS ||
           (p->attn_merge == MK_ATTN_MERGE_AUTO && merge_floats <= MK_ATTN_MERGE_SPLIT_MAX);
}

/* Attention partials, then either the combine or the fused attention-output matvec. */
static struct mk_lower_instr *mk_lower_attention(struct mk_lower *L, struct mk_lower_ops_ctx *k,
                                                 const struct mk_node *n) {
    const struct mk_llama_config *c = k->c;
    const struct mk_compile_params *p = L->p;
    const uint32_t attn_block = k->attn_block, n_blocks = k->n_blocks, solo = k->attn_solo;
    struct mk_lower_instr *x;
    if (L->ubatch > 1) {
        /* Every task needs all q rows and writes its head of every row: no partials in the arena. */
        x = mk_lower_emit(L, MK_OP_ATTN_CHUNK, c->n_head, n->label);
        if (!x) return NULL;
        x->ins.buf[0] = OFF(n->in[0]);
        x->ins.buf[1] = OFF(n->out);
        x->ins.args.attn = (struct mk_args_attn){ .block = attn_block,
                                                  .n_blocks = n_blocks,
                                                  .layer = n->layer,
                                                  .n_head = c->n_head,
                                                  .n_head_kv = c->n_head_kv,
                                                  .head_dim = c->head_dim,
                                                  .solo = solo };
        mk_lower_access(x, BUF(n->in[0]), k->kv_buf0 + (int)n->layer, BUF(n->out), -1);
        return x;
    }
    uint32_t part = mk_lower_alloc(L, (uint64_t)c->n_head * n_blocks * (c->head_dim + 2));
    int part_buf = k->scratch++;
    x = mk_lower_emit(L, MK_OP_ATTN_PARTIAL, c->n_head_kv * n_blocks, n->label);
    if (!x) return NULL;
    x->ins.buf[0] = OFF(n->in[0]);
    x->ins.buf[1] = part;
    x->ins.args.attn = (struct mk_args_attn){ .block = attn_block,
                                              .n_blocks = n_blocks,
                                              .layer = n->layer,
                                              .n_head = c->n_head,
                                              .n_head_kv = c->n_head_kv,
                                              .head_dim = c->head_dim,
                                              .solo = solo };
    if (n->op != MK_NODE_ATTN_OUTPUT && mk_lower_merge_in_splits(p, c, n_blocks)) {
        /* The last split of each KV head merges it. Until the depend pass has counted the
         * signals, arrive holds 1 + the index among the arrival counters (0 means none). */
        x->ins.args.attn.arrive = 1u + L->n_arrive;
        L->n_arrive += c->n_head_kv;
        x->ins.buf[2] = OFF(n->out);
        const uint64_t n_attn = (uint64_t)c->n_head * c->head_dim;
        if (c->head_dim % MK_XQ_GROUP == 0 && mk_lower_wants_xq(L, n->out, n_attn))
            x->ins.buf[3] = mk_lower_xq_out(L, k, n->out, n_attn);
        mk_lower_access(x, BUF(n->in[0]), k->kv_buf0 + (int)n->layer, part_buf, BUF(n->out));
        return x;
    }
    mk_lower_access(x, BUF(n->in[0]), k->kv_buf0 + (int)n->layer, part_buf, -1);
    if (n->op == MK_NODE_ATTN_OUTPUT) {
        uint32_t rows = (uint32_t)n->w[0]->rows, rpt = mk_lower_tile_rows(p, rows, 2);
        char lab[40];
        snprintf(lab, sizeof lab, "blk.%u.attn_output", n->layer);
        x = mk_lower_emit(L, MK_OP_ATTN_OUTPUT, mk_lower_div_up(rows, rpt), lab);
        if (!x) return NULL;
        x->ins.weight[0] = mk_lower_weight(L, n->w[0]);
        x->ins.buf[0] = part;
        x->ins.buf[1] = OFF(n->out);
        mk_lower_norm_copy(L, k, n, x, rows, rpt);
        x->ins.args.attn_out = (struct mk_args_attn_out){ .rows_per_task = rpt,
                                                          .n_blocks = n_blocks,
                                                          .block = attn_block,
                                                          .n_head = c->n_head,
                                                          .head_dim = c->head_dim,
                                                          .solo = solo };
        mk_lower_access(x, part_buf, BUF(n->out), BUF(n->out), -1);
        return x;
    }
    char lab[40];
    snprintf(lab, sizeof lab, "blk.%u.attn_combine", n->layer);
    x = mk_lower_emit(L, MK_OP_ATTN_COMBINE, c->n_head, lab);
    if (!x) return NULL;
    x->ins.buf[0] = part;
    x->ins.buf[1] = OFF(n->out);
    const uint64_t n_attn = (uint64_t)c->n_head * c->head_dim;
    if (c->head_dim % MK_XQ_GROUP == 0 && mk_lower_wants_xq(L, n->out, n_attn))
        x->ins.buf[2] = mk_lower_xq_out(L, k, n->out, n_attn);
    x->ins.args.combine =
        (struct mk_args_combine){ .n_blocks = n_blocks, .n_head = c->n_head, .head_dim = c->head_dim };
    mk_lower_access(x, part_buf, -1, BUF(n->out), -1);
    return x;
}

static struct mk_lower_instr *mk_lower_matvec(struct mk_lower *L, struct mk_lower_ops_ctx *k, const struct mk_node *n) {
    const struct mk_compile_params *p = L->p;
    struct mk_lower_instr *x;
    uint32_t rows = (uint32_t)n->w[0]->rows, rpt = mk_lower_tile_rows(p, rows, 2);
    x = mk_lower_emit(L, MK_OP_MATVEC_RESIDUAL, mk_lower_div_up(rows, rpt), n->label);
    if (!x) return NULL;
    x->ins.weight[0] = mk_lower_weight(L, n->w[0]);
    x->ins.buf[0] = OFF(n->in[0]);
    x->ins.buf[1] = OFF(n->out);
    /* The int8-level copy shares the value's buffer id: it has the same writer and readers. */
    if (mk_dtype_is_block(n->w[0]->type)) x->ins.buf[2] = k->xqoff[BUF(n->in[0])];
    mk_lower_norm_copy(L, k, n, x, rows, rpt);
    x->ins.args.matvec.rows_per_task = rpt;
    mk_lower_access(x, BUF(n->in[0]), BUF(n->out), BUF(n->out), -1);
    return x;
}

static struct mk_lower_instr *mk_lower_gate_up(struct mk_lower *L, struct mk_lower_ops_ctx *k,
                                               const struct mk_node *n) {
    const struct mk_compile_params *p = L->p;
    struct mk_lower_instr *x;
    uint32_t rows = (uint32_t)n->w[1]->rows;
    const bool xq = mk_lower_wants_xq(L, n->out, rows);
    uint32_t rpt = mk_lower_tile_rows(p, rows, xq ? MK_XQ_GROUP : 2);
    x = mk_lower_emit(L, MK_OP_NORM_GATE_UP_SILU, mk_lower_div_up(rows, rpt), n->label);
    if (!x) return NULL;
    for (int w = 0; w < 3; w++) x->ins.weight[w] = mk_lower_weight(L, n->w[w]);
    x->ins.buf[0] = OFF(n->in[0]);
    x->ins.buf[1] = OFF(n->out);
    x->ins.buf[3] = k->xqnoff[n->in[0]];
    if (xq) x->ins.buf[2] = mk_lower_xq_out(L, k, n->out, rows);
    x->ins.args.gate_up = (struct mk_args_norm_matvec){ .rows_per_task = rpt, .eps = n->eps };
    mk_lower_access(x, BUF(n->in[0]), -1, BUF(n->out), -1);
    return x;
}

static struct mk_lower_instr *mk_lower_lm_head(struct mk_lower *L, struct mk_lower_ops_ctx *k,
                                               const struct mk_node *n) {
    const struct mk_compile_params *p = L->p;
    struct mk_lower_instr *x;
    uint32_t rows = (uint32_t)n->w[1]->rows, rpt = mk_lower_tile_rows(p, rows, 2);
    k->lm_tiles = mk_lower_div_up(rows, rpt);
    k->lm_rpt = rpt;
    k->lm_tiles_off = mk_lower_alloc(L, 2ull * k->lm_tiles * L->ubatch);
    x = mk_lower_emit(L, MK_OP_NORM_LM_HEAD, k->lm_tiles, n->label);
    if (!x) return NULL;
    for (int w = 0; w < 2; w++) x->ins.weight[w] = mk_lower_weight(L, n->w[w]);
    x->ins.buf[0] = OFF(n->in[0]);
    x->ins.buf[1] = OFF(n->out);
    x->ins.buf[2] = k->lm_tiles_off;
    x->ins.buf[3] = k->xqnoff[n->in[0]];
    x->ins.args.lm_head = (struct mk_args_norm_matvec){ .rows_per_task = rpt, .eps = n->eps };
    mk_lower_access(x, BUF(n->in[0]), -1, BUF(n->out), k->scratch);
    return x;
}

static struct mk_lower_instr *mk_lower_sample(struct mk_lower *L, struct mk_lower_ops_ctx *k, const struct mk_node *n) {
    const struct mk_llama_config *c = k->c;
    struct mk_lower_instr *x;
    x = mk_lower_emit(L, MK_OP_SAMPLE, 1, n->label);
    if (!x) return NULL;
    x->ins.buf[1] = OFF(n->in[0]);
    x->ins.buf[2] = k->lm_tiles_off;
    if (L->ubatch > 1) x->ins.buf[3] = L->out_tokens_off = mk_lower_alloc(L, L->ubatch);
    x->ins.args.sample =
        (struct mk_args_sample){ .n_tiles = k->lm_tiles, .vocab = c->n_vocab, .rows_per_tile = k->lm_rpt };
    mk_lower_access(x, BUF(n->in[0]), k->scratch, -1, -1);
    k->scratch++;
    return x;
}

#undef OFF
#undef BUF

/* One instruction (two for attention) per live node, in graph order. */
static enum mk_status mk_lower_ops(struct mk_lower *L, struct mk_error *err) {
    const struct mk_graph *g = L->g;
    const struct mk_llama_config *c = &g->model->cfg;
    struct mk_lower_ops_ctx k = { .c = c };
    k.q_dim = c->n_head * c->head_dim;
    k.kv_dim = c->n_head_kv * c->head_dim;
    /* 128, not 64: up to position 127 split 0 alone holds positions, and the megakernel's tasks of
     * a KV head then share its query heads and write the output themselves, with no merge
     * (mk_attn_solo; BENCHMARKS.md, run129, run137). 256 keeps that up to position 255 but is
     * slower at depth, where each split holds more positions (run138). */
    k.attn_block = L->p->attn_block ? L->p->attn_block : 128;
    if (k.attn_block > L->p->n_ctx) k.attn_block = L->p->n_ctx;
    /* Splits per KV head: as many as make one attention task per worker; each split lengthens with
     * the position (mk_attn_span), so a step's attention costs what its positions cost. */
    uint32_t splits = L->p->attn_splits ? L->p->attn_splits : L->p->n_workers / c->n_head_kv;
    if (!L->p->attn_splits && splits < 2) splits = 2;
    k.n_blocks = mk_lower_div_up(L->p->n_ctx, k.attn_block);
    if (k.n_blocks > splits) k.n_blocks = splits;
    /* Past the first unit, too, split 0 alone holds the positions below MK_ATTN_SOLO_DEFAULT(_64)
     * where the megakernel's solo step runs (the splits merge themselves; up to 8 query heads a KV
     * head, of 64 or 128): a task per query head over all of them ends sooner than two to four
     * splits of four heads and their merge: llama-1b's token 6 % faster at positions 128-255, 2 % at
     * 384-511 and 1 % at 512-639, level past 640 (BENCHMARKS.md, forty-third session). With the
     * one-pass merge and the one-head loop at four rows a lane, llama-1b's (head size 64) solo step
     * stays ahead up to about 1,500: 4 % at 640-767, 2 % at 1000-1127, level at 1500; llama-8b's
     * (128) is 0.7 % behind the splits at 1000-1127 (forty-fifth session), so it keeps 640. A chunk
     * program takes the same value, so that its rows stay equal to one-token steps. */
    const bool solo_step = !L->p->fuse_attn_output && mk_lower_merge_in_splits(L->p, c, k.n_blocks) &&
                           mk_attn_solo_fits(c->n_head, c->n_head_kv, c->head_dim);
    const uint32_t solo_default = c->head_dim <= 64u ? MK_ATTN_SOLO_DEFAULT_64 : MK_ATTN_SOLO_DEFAULT;
    k.attn_solo = L->p->attn_solo ? L->p->attn_solo : solo_step ? solo_default : 0u;
    k.kv_buf0 = (int)g->n_values;
    k.scratch = k.kv_buf0 + (int)c->n_layer;
    k.voff = calloc(g->n_values ? g->n_values : 1, sizeof *k.voff);
    k.xqoff = malloc((g->n_values ? g->n_values : 1) * sizeof *k.xqoff);
    k.xqnoff = malloc((g->n_values ? g->n_values : 1) * sizeof *k.xqnoff);
    if (!k.voff || !k.xqoff || !k.xqnoff) {
        free(k.voff);
        free(k.xqoff);
        free(k.xqnoff);
        return mk_error_set(err, MK_ERR_NOMEM, "out of memory lowering the graph");
    }
    for (uint32_t v = 0; v < g->n_values; v++) k.xqoff[v] = k.xqnoff[v] = MK_NO_BUF;
    enum mk_status st = mk_lower_place(L, k.voff, err);
    for (uint32_t i = 0; i < g->n_nodes && st == MK_OK; i++) {
        const struct mk_node *n = &g->nodes[i];
        if (n->dead) continue;
        struct mk_lower_instr *x = NULL;
        switch (n->op) {
        case MK_NODE_EMBED: x = mk_lower_embed(L, &k, n); break;
        case MK_NODE_NORM_QKV_ROPE: x = mk_lower_qkv(L, &k, n); break;
        case MK_NODE_ATTENTION:
        case MK_NODE_ATTN_OUTPUT: x = mk_lower_attention(L, &k, n); break;
        case MK_NODE_MATVEC_RESIDUAL: x = mk_lower_matvec(L, &k, n); break;
        case MK_NODE_NORM_GATE_UP_SILU: x = mk_lower_gate_up(L, &k, n); break;
        case MK_NODE_NORM_LM_HEAD: x = mk_lower_lm_head(L, &k, n); break;
        case MK_NODE_SAMPLE: x = mk_lower_sample(L, &k, n); break;
        default: st = mk_error_set(err, MK_ERR_INTERNAL, "unfused node '%s' reached lowering", n->label); continue;
        }
        if (!x) st = mk_error_set(err, MK_ERR_NOMEM, "out of memory lowering the graph");
    }
    L->n_buf = (uint32_t)k.scratch;
    free(k.voff);
    free(k.xqoff);
    free(k.xqnoff);
    return st;
}

/* Ancestor sets as bitsets over instructions. */
static inline bool mk_bit(const uint64_t *s, uint32_t i) { return (s[i / 64] >> (i % 64)) & 1; }
static inline void mk_bit_set(uint64_t *s, uint32_t i) { s[i / 64] |= 1ull << (i % 64); }

/* The depend pass: each instruction waits on the last writer of what it reads, and on the
 * writer and readers of what it overwrites, reduced to the predecessors no other predecessor
 * already covers. More than two left: a barrier joins everything before it instead. */
static enum mk_status mk_lower_depend(struct mk_lower *L, struct mk_lower_instr **out_li, uint32_t *out_n,
                                      struct mk_error *err) {
    uint32_t n = L->n, cap = 2 * n + 1, words = (cap + 63) / 64;
    struct mk_lower_instr *res = calloc(cap, sizeof *res);
    uint64_t *anc = calloc((size_t)cap * words, sizeof *anc);
    int *last_writer = malloc(L->n_buf * sizeof *last_writer);
    int *readers = malloc((size_t)L->n_buf * cap * sizeof *readers);
    uint32_t *n_readers = calloc(L->n_buf, sizeof *n_readers);
    enum mk_status st = MK_OK;
    if (!res || !anc || !last_writer || !readers || !n_readers) {
        st = mk_error_set(err, MK_ERR_NOMEM, "out of memory in the depend pass");
        goto done;
    }
    for (uint32_t b = 0; b < L->n_buf; b++) last_writer[b] = -1;
    uint32_t m = 0, tasks_before = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct mk_lower_instr *x = &L->li[i];
        int preds[64], np = 0;
#define ADD_PRED(j)                                               \
    do {                                                          \
        int pj_ = (j);                                            \
        bool dup_ = false;                                        \
        for (int q_ = 0; q_ < np; q_++) dup_ |= preds[q_] == pj_; \
        if (pj_ >= 0 && !dup_ && np < 64) preds[np++] = pj_;      \
    } while (0)
        for (int r = 0; r < x->n_reads; r++) ADD_PRED(last_writer[x->reads[r]]);
        for (int w = 0; w < x->n_writes; w++) {
            int b = x->writes[w];
            ADD_PRED(last_writer[b]);
            for (uint32_t k = 0; k < n_readers[b]; k++) ADD_PRED(readers[(size_t)b * cap + k]);
        }
        /* Drop predecessors that are ancestors of another predecessor. */
        int keep[64], nk = 0;
        for (int a = 0; a < np; a++) {
            bool covered = false;
            for (int b = 0; b < np && !covered; b++)
                covered = a != b && mk_bit(&anc[(size_t)preds[b] * words], (uint32_t)preds[a]);
            if (!covered) keep[nk++] = preds[a];
        }
        bool barrier = nk > 2 || (L->p->barriers && nk > 0);
        if (barrier) {
            struct mk_lower_instr *bx = &res[m];
            memset(bx, 0, sizeof *bx);
            bx->ins.op = MK_OP_BARRIER;
            bx->ins.n_tasks = 1;
            bx->ins.signal = MK_NO_COUNTER;
            bx->ins.wait[0] = (struct mk_wait){ MK_COUNTER_ALL, 0, tasks_before };
            bx->ins.wait[1].ctr = MK_NO_COUNTER;
            for (int w = 0; w < 4; w++) bx->ins.weight[w] = MK_NO_WEIGHT, bx->ins.buf[w] = MK_NO_BUF;
            snprintf(bx->label, sizeof bx->label, "barrier");
            for (uint32_t k = 0; k < m; k++) {
                mk_bit_set(&anc[(size_t)m * words], k);
            }
            tasks_before += 1;
            m++;
            keep[0] = (int)m - 1;
            nk = 1;
        }
        res[m] = *x;
        for (int k = 0; k < nk; k++) {
            res[m].ins.wait[k] = (struct mk_wait){ (uint32_t)keep[k] + 1, 0, 0 }; /* mul/add set below */
            for (uint32_t wd = 0; wd < words; wd++) anc[(size_t)m * words + wd] |= anc[(size_t)keep[k] * words + wd];
            mk_bit_set(&anc[(size_t)m * words], (uint32_t)keep[k]);
        }
        /* Record this instruction's accesses (indices now refer to res). */
        for (int r = 0; r < x->n_reads; r++) {
            int b = x->reads[r];
            readers[(size_t)b * cap + n_readers[b]++] = (int)m;
        }
        for (int w = 0; w < x->n_writes; w++) {
            last_writer[x->writes[w]] = (int)m;
            n_readers[x->writes[w]] = 0;
        }
        tasks_before += x->ins.n_tasks;
        m++;
#undef ADD_PRED
    }
    /* Counters: 0 counts all tasks; instruction i signals counter i + 1. */
    for (uint32_t i = 0; i < m; i++) {
        res[i].ins.signal = i + 1;
        for (int k = 0; k < 2; k++) {
            struct mk_wait *w = &res[i].ins.wait[k];
            if (w->ctr == MK_NO_COUNTER) continue;
            if (w->ctr == MK_COUNTER_ALL) {
                w->mul = tasks_before;
            } else {
                uint32_t t = res[w->ctr - 1].ins.n_tasks;
                w->mul = t;
                w->add = t;
            }
        }
    }
    *out_li = res;
    *out_n = m;
    res = NULL;
done:
    free(res);
    free(anc);
    free(last_writer);
    free(readers);
    free(n_readers);
    return st;
}

void mk_program_free(struct mk_program *p) {
    if (!p) return;
    free(p->instrs);
    free(p->labels);
    free(p->task_base);
    free(p->weights);
    free(p->sched_offsets);
    free(p->sched_tasks);
    free(p);
}

enum mk_status mk_graph_lower(const struct mk_graph *g, const struct mk_compile_params *p, struct mk_program **out,
                              struct mk_error *err) {
    struct mk_lower L = {
        .g = g, .p = p, .ubatch = p->ubatch > 1 ? p->ubatch : 1, .tokens_off = MK_NO_BUF, .out_tokens_off = MK_NO_BUF
    };
    struct mk_lower_instr *li = NULL;
    struct mk_program *prog = NULL;
    uint32_t n = 0;
    enum mk_status st;
    /* Each node's weights, plus up to six per layer that NORM_QKV_ROPE names in its arguments. */
    L.wt = calloc((size_t)g->n_nodes * MK_NODE_MAX_W + 6 * (size_t)g->model->cfg.n_layer + 1, sizeof *L.wt);
    if (!L.wt) {
        st = mk_error_set(err, MK_ERR_NOMEM, "out of memory lowering the graph");
        goto fail;
    }
    if ((st = mk_lower_ops(&L, err)) != MK_OK) goto fail;
    if ((st = mk_lower_depend(&L, &li, &n, err)) != MK_OK) goto fail;
    prog = calloc(1, sizeof *prog);
    if (!prog) goto nomem;
    prog->instrs = calloc(n, sizeof *prog->instrs);
    prog->labels = calloc(n, sizeof *prog->labels);
    prog->task_base = calloc(n + 1, sizeof *prog->task_base);
    prog->weights = calloc(L.n_wt ? L.n_wt : 1, sizeof *prog->weights);
    if (!prog->instrs || !prog->labels || !prog->task_base || !prog->weights) goto nomem;
    prog->n_instr = n;
    for (uint32_t i = 0; i < n; i++) {
        prog->instrs[i] = li[i].ins;
        memcpy(prog->labels[i], li[i].label, sizeof prog->labels[i]);
        prog->task_base[i + 1] = prog->task_base[i] + li[i].ins.n_tasks;
    }
    prog->n_tasks = prog->task_base[n];
    prog->n_counters = n + 1 + L.n_arrive;
    for (uint32_t i = 0; i < n; i++) /* the arrival counters follow the n + 1 of the signals */
        if (prog->instrs[i].op == MK_OP_ATTN_PARTIAL && prog->instrs[i].args.attn.arrive)
            prog->instrs[i].args.attn.arrive += n;
    prog->n_weights = L.n_wt;
    for (uint32_t i = 0; i < L.n_wt; i++) {
        const struct mk_weight *w = L.wt[i];
        prog->weights[i] = (struct mk_weight_ref){ (uint64_t)(uintptr_t)w->data,
                                                   (uint32_t)w->type,
                                                   (uint32_t)w->rows,
                                                   (uint32_t)w->cols,
                                                   (uint32_t)w->row_bytes,
                                                   0 };
    }
    const struct mk_llama_config *c = &g->model->cfg;
    prog->arena_floats = L.arena;
    prog->n_ctx = p->n_ctx;
    prog->n_layer = c->n_layer;
    prog->kv_dim = c->n_head_kv * c->head_dim;
    prog->kv_type = p->kv_type;
    prog->n_embd = c->n_embd;
    prog->vocab = c->n_vocab;
    for (uint32_t i = 0; i < n; i++)
        if (prog->instrs[i].op == MK_OP_NORM_LM_HEAD) prog->logits_off = prog->instrs[i].buf[1];
    prog->schedule = p->schedule;
    prog->n_workers = p->n_workers;
    prog->ubatch = L.ubatch;
    prog->act_bf16_min = L.ubatch > 1 ? p->act_bf16_min : 0u;
    prog->tokens_off = L.tokens_off;
    prog->out_tokens_off = L.out_tokens_off;
    if (p->schedule == MK_SCHED_STATIC) {
        /* Round-robin each instruction's tasks over the workers, starting where the last one
         * stopped, so single-task ops spread out; every list stays in program order. */
        uint32_t W = p->n_workers;
        prog->sched_offsets = calloc(W + 1, sizeof *prog->sched_offsets);
        prog->sched_tasks = calloc(prog->n_tasks ? prog->n_tasks : 1, sizeof *prog->sched_tasks);
        uint32_t *owner = calloc(prog->n_tasks ? prog->n_tasks : 1, sizeof *owner);
        if (!prog->sched_offsets || !prog->sched_tasks || !owner) {
            free(owner);
            goto nomem;
        }
        uint32_t next = 0;
        for (uint32_t t = 0; t < prog->n_tasks; t++) {
            owner[t] = next;
            next = (next + 1) % W;
            prog->sched_offsets[owner[t] + 1]++;
        }
        for (uint32_t w = 0; w < W; w++) prog->sched_offsets[w + 1] += prog->sched_offsets[w];
        uint32_t *fill = calloc(W, sizeof *fill);
        if (!fill) {
            free(owner);
            goto nomem;
        }
        for (uint32_t t = 0; t < prog->n_tasks; t++)
            prog->sched_tasks[prog->sched_offsets[owner[t]] + fill[owner[t]]++] = t;
        free(fill);
        free(owner);
    }
    free(L.li);
    free(L.wt);
    free(li);
    *out = prog;
    return MK_OK;
nomem:
    st = mk_error_set(err, MK_ERR_NOMEM, "out of memory emitting the program");
fail:
    mk_program_free(prog);
    free(L.li);
    free(L.wt);
    free(li);
    return st;
}

struct mk_compile_params mk_compile_default_params(void) {
    struct mk_compile_params p = { 0 };
    p.n_workers = 4;
    p.n_ctx = 512;
    p.schedule = MK_SCHED_DYNAMIC;
    p.kv_type = MK_KV_F16;
    p.act_bf16_min = MK_ACT_BF16_MIN_DEFAULT;
    return p;
}

enum mk_status mk_program_compile(const struct mk_model *m, const struct mk_compile_params *p, struct mk_program **out,
                                  struct mk_error *err) {
    if (!p->n_workers || !p->n_ctx)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "compile: n_workers (%u) and n_ctx (%u) must be positive",
                            p->n_workers, p->n_ctx);
    if (m->cfg.head_dim % 2 || m->cfg.n_rot % 2 || m->cfg.n_rot > m->cfg.head_dim || !(m->cfg.rope_freq_scale > 0.0f))
        return mk_error_set(err, MK_ERR_UNSUPPORTED,
                            "compile: head_dim %u / rope dims %u must be even, rope <= head_dim, rope scale %g > 0",
                            m->cfg.head_dim, m->cfg.n_rot, (double)m->cfg.rope_freq_scale);
    if (p->kv_type != MK_KV_F32 && p->kv_type != MK_KV_F16)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "compile: KV cache type %d (want f32 = 0 or f16 = 1)",
                            (int)p->kv_type);
    if (p->ubatch > MK_UBATCH_MAX)
        return mk_error_set(err, MK_ERR_INVALID_ARG, "compile: ubatch %u is over the limit of %u tokens per step",
                            p->ubatch, MK_UBATCH_MAX);
    /* Chunk programs attend with ATTN_CHUNK, which writes the attention for the output matvec. */
    struct mk_compile_params q = *p;
    if (q.ubatch > 1) q.fuse_attn_output = false;
    struct mk_graph g;
    enum mk_status st = mk_graph_build_llama(m, &g, err);
    if (st != MK_OK) return st;
    if ((st = mk_graph_fuse(&g, &q, err)) == MK_OK) st = mk_graph_lower(&g, &q, out, err);
    mk_graph_free(&g);
    if (st == MK_OK && (st = mk_program_validate(*out, err)) != MK_OK) {
        mk_error_prefix(err, "compiled program failed validation (compiler bug)");
        mk_program_free(*out);
        *out = NULL;
    }
    return st;
}

uint32_t mk_program_instr_of_task(const struct mk_program *p, uint32_t t) {
    uint32_t lo = 0, hi = p->n_instr; /* task_base[lo] <= t < task_base[hi] */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (p->task_base[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}
