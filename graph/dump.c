/* mk dump: the program as text or JSON, with per-op tasks, bytes, counters and barriers. */
#include <inttypes.h>
#include <stdio.h>

#include "graph/program.h"

const char *mk_opcode_name(uint32_t op) {
    switch (op) {
    case MK_OP_NOP: return "nop";
    case MK_OP_EMBED: return "embed";
    case MK_OP_MATVEC_RESIDUAL: return "matvec_residual";
    case MK_OP_NORM_QKV_ROPE: return "norm_qkv_rope";
    case MK_OP_ATTN_PARTIAL: return "attn_partial";
    case MK_OP_ATTN_COMBINE: return "attn_combine";
    case MK_OP_NORM_GATE_UP_SILU: return "norm_gate_up_silu";
    case MK_OP_NORM_LM_HEAD: return "norm_lm_head";
    case MK_OP_SAMPLE: return "sample";
    case MK_OP_BARRIER: return "barrier";
    case MK_OP_ATTN_OUTPUT: return "attn_output";
    case MK_OP_ATTN_CHUNK: return "attn_chunk";
    }
    return "unknown";
}

static uint64_t mk_full(const struct mk_program *p, uint32_t w) {
    return w < p->n_weights ? (uint64_t)p->weights[w].rows * p->weights[w].row_bytes : 0;
}

uint64_t mk_program_instr_weight_bytes(const struct mk_program *p, uint32_t i) {
    const struct mk_instr *in = &p->instrs[i];
    if (in->op == MK_OP_EMBED) return in->weight[0] < p->n_weights ? p->weights[in->weight[0]].row_bytes : 0;
    uint64_t b = 0;
    for (int k = 0; k < 4; k++) b += mk_full(p, in->weight[k]);
    if (in->op == MK_OP_NORM_QKV_ROPE) {
        /* The weights its arguments name: three biases, two norms, the frequency divisors. */
        const struct mk_args_qkv *a = &in->args.qkv;
        for (uint32_t k = 0; k < 3 && a->bias != MK_NO_WEIGHT; k++) b += mk_full(p, a->bias + k);
        for (uint32_t k = 0; k < 2 && a->qk_norm != MK_NO_WEIGHT; k++) b += mk_full(p, a->qk_norm + k);
        b += mk_full(p, a->rope_freqs);
    }
    return b;
}

/* A weight index for JSON: -1 for none. */
static int mk_dump_widx(uint32_t w) { return w == MK_NO_WEIGHT ? -1 : (int)w; }

uint32_t mk_kv_type_size(enum mk_kv_type t) { return t == MK_KV_F16 ? 2u : 4u; }

const char *mk_kv_type_name(enum mk_kv_type t) { return t == MK_KV_F16 ? "f16" : "f32"; }

uint64_t mk_program_kv_bytes(const struct mk_program *p) {
    return 2ull * p->n_layer * p->n_ctx * p->kv_dim * mk_kv_type_size(p->kv_type);
}

uint64_t mk_program_weight_bytes(const struct mk_program *p) {
    uint64_t b = 0;
    for (uint32_t i = 0; i < p->n_instr; i++) b += mk_program_instr_weight_bytes(p, i);
    return b;
}

/* The int8-level copies instruction in reads and writes (abi.h, MK_XQ_* and MK_XQN_*): "i8<" its
 * input's, "i8>" its output's (the FFN hidden vector, the attention vector), "n8<" the normalized residual stream's,
 * "n8>" the one it writes for the next norm op. Empty when none: an executor plan at a glance. */
static void mk_dump_copies(const struct mk_instr *in, char *buf, size_t size) {
    const bool b2 = in->buf[2] != MK_NO_BUF, b3 = in->buf[3] != MK_NO_BUF;
    const char *a = "", *b = "";
    switch (in->op) {
    case MK_OP_MATVEC_RESIDUAL: a = b2 ? "i8<" : "", b = b3 ? "n8>" : ""; break;
    case MK_OP_ATTN_OUTPUT: b = b3 ? "n8>" : ""; break;
    case MK_OP_NORM_GATE_UP_SILU: a = b3 ? "n8<" : "", b = b2 ? "i8>" : ""; break;
    case MK_OP_ATTN_COMBINE: b = b2 ? "i8>" : ""; break;
    case MK_OP_ATTN_PARTIAL: b = b3 ? "i8>" : ""; break;
    case MK_OP_NORM_QKV_ROPE:
    case MK_OP_NORM_LM_HEAD: a = b3 ? "n8<" : ""; break;
    default: break;
    }
    snprintf(buf, size, "%s%s%s", a, *a && *b ? " " : "", b);
}

static void mk_dump_wait(FILE *f, const struct mk_wait *w, bool json) {
    if (json)
        fprintf(f, "{\"counter\":%u,\"per_step\":%u,\"add\":%u}", w->ctr, w->mul, w->add);
    else if (w->ctr == MK_COUNTER_ALL)
        fprintf(f, " all>=s*%u+%u", w->mul, w->add);
    else
        fprintf(f, " c%u>=s*%u+%u", w->ctr, w->mul, w->add);
}

/* The opcode's named arguments as a JSON object (field names as in megakernel/abi.h). */
static void mk_dump_args_json(FILE *f, const struct mk_instr *in) {
    const union mk_op_args *a = &in->args;
    switch (in->op) {
    case MK_OP_EMBED:
        fprintf(f, "{\"elems_per_task\":%u,\"n_embd\":%u}", a->embed.elems_per_task, a->embed.n_embd);
        break;
    case MK_OP_MATVEC_RESIDUAL: fprintf(f, "{\"rows_per_task\":%u}", a->matvec.rows_per_task); break;
    case MK_OP_NORM_QKV_ROPE:
        fprintf(f,
                "{\"rows_per_task\":%u,\"layer\":%u,\"q_dim\":%u,\"kv_dim\":%u,\"head_dim\":%u,\"n_rot\":%u,"
                "\"eps\":%g,\"rope_base\":%g,\"bias\":%d,\"qk_norm\":%d,\"rope_freqs\":%d,\"flags\":%u,"
                "\"rope_scale\":%g,\"v_rows_per_task\":%u}",
                a->qkv.rows_per_task, a->qkv.layer, a->qkv.q_dim, a->qkv.kv_dim, a->qkv.head_dim, a->qkv.n_rot,
                (double)a->qkv.eps, (double)a->qkv.rope_base, mk_dump_widx(a->qkv.bias), mk_dump_widx(a->qkv.qk_norm),
                mk_dump_widx(a->qkv.rope_freqs), a->qkv.flags, (double)a->qkv.rope_scale, a->qkv.v_rows_per_task);
        break;
    case MK_OP_ATTN_PARTIAL:
    case MK_OP_ATTN_CHUNK:
        fprintf(f,
                "{\"block\":%u,\"n_blocks\":%u,\"layer\":%u,\"n_head\":%u,\"n_head_kv\":%u,\"head_dim\":%u,"
                "\"arrive\":%u,\"solo\":%u}",
                a->attn.block, a->attn.n_blocks, a->attn.layer, a->attn.n_head, a->attn.n_head_kv, a->attn.head_dim,
                a->attn.arrive, a->attn.solo);
        break;
    case MK_OP_ATTN_COMBINE:
        fprintf(f, "{\"n_blocks\":%u,\"n_head\":%u,\"head_dim\":%u}", a->combine.n_blocks, a->combine.n_head,
                a->combine.head_dim);
        break;
    case MK_OP_ATTN_OUTPUT:
        fprintf(f, "{\"rows_per_task\":%u,\"n_blocks\":%u,\"block\":%u,\"n_head\":%u,\"head_dim\":%u,\"solo\":%u}",
                a->attn_out.rows_per_task, a->attn_out.n_blocks, a->attn_out.block, a->attn_out.n_head,
                a->attn_out.head_dim, a->attn_out.solo);
        break;
    case MK_OP_NORM_GATE_UP_SILU:
    case MK_OP_NORM_LM_HEAD:
        /* gate_up and lm_head share one struct type. */
        fprintf(f, "{\"rows_per_task\":%u,\"eps\":%g}", a->gate_up.rows_per_task, (double)a->gate_up.eps);
        break;
    case MK_OP_SAMPLE:
        fprintf(f, "{\"n_tiles\":%u,\"vocab\":%u,\"rows_per_tile\":%u}", a->sample.n_tiles, a->sample.vocab,
                a->sample.rows_per_tile);
        break;
    default: fputs("{}", f);
    }
}

void mk_program_dump(const struct mk_program *p, FILE *f, bool json) {
    uint32_t barriers = 0, waits = 0;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        barriers += p->instrs[i].op == MK_OP_BARRIER;
        for (int k = 0; k < 2; k++) waits += p->instrs[i].wait[k].ctr != MK_NO_COUNTER;
    }
    uint64_t wbytes = mk_program_weight_bytes(p);
    uint64_t kv_bytes = mk_program_kv_bytes(p);
    const char *kv_name = mk_kv_type_name(p->kv_type);
    const char *sched = p->schedule == MK_SCHED_STATIC ? "static" : "dynamic";
    const uint32_t ubatch = p->ubatch > 1 ? p->ubatch : 1;
    if (json) {
        fprintf(f,
                "{\"abi_version\":%u,\"workers\":%u,\"schedule\":\"%s\",\"n_ctx\":%u,\"ubatch\":%u,\"tokens_off\":%d,"
                "\"out_tokens_off\":%d,\"act_bf16_min\":%u,\"instructions\":[",
                MK_ABI_VERSION, p->n_workers, sched, p->n_ctx, ubatch, ubatch > 1 ? (int)p->tokens_off : -1,
                ubatch > 1 ? (int)p->out_tokens_off : -1, p->act_bf16_min);
        for (uint32_t i = 0; i < p->n_instr; i++) {
            const struct mk_instr *in = &p->instrs[i];
            fprintf(f,
                    "%s{\"index\":%u,\"label\":\"%s\",\"op\":\"%s\",\"tasks\":%u,\"weight_bytes\":%" PRIu64
                    ",\"signal\":%u,\"waits\":[",
                    i ? "," : "", i, p->labels[i], mk_opcode_name(in->op), in->n_tasks,
                    mk_program_instr_weight_bytes(p, i), in->signal);
            bool first = true;
            for (int k = 0; k < 2; k++) {
                if (in->wait[k].ctr == MK_NO_COUNTER) continue;
                if (!first) fputc(',', f);
                mk_dump_wait(f, &in->wait[k], true);
                first = false;
            }
            char copies[16];
            mk_dump_copies(in, copies, sizeof copies);
            fprintf(f, "],\"copies\":\"%s\",\"args\":", copies);
            mk_dump_args_json(f, in);
            fputc('}', f);
        }
        fprintf(f,
                "],\"totals\":{\"instructions\":%u,\"tasks\":%u,\"counters\":%u,\"waits\":%u,\"barriers\":%u,"
                "\"weight_bytes\":%" PRIu64 ",\"arena_bytes\":%" PRIu64 ",\"kv_cache_bytes\":%" PRIu64
                ",\"kv_type\":\"%s\"}}\n",
                p->n_instr, p->n_tasks, p->n_counters, waits, barriers, wbytes, (uint64_t)p->arena_floats * 4, kv_bytes,
                kv_name);
        return;
    }
    fprintf(f, "program: ABI v%u, %u workers, %s schedule, context %u, %u token%s per step\n", MK_ABI_VERSION,
            p->n_workers, sched, p->n_ctx, ubatch, ubatch > 1 ? "s" : "");
    if (ubatch > 1)
        fprintf(f,
                "chunk program: tokens (int32, %u) at arena float %u, output tokens (int32, %u) at %u; activations "
                "have %u rows\n",
                ubatch, p->tokens_off, ubatch, p->out_tokens_off, ubatch);
    if (ubatch > 1 && p->act_bf16_min)
        fprintf(f, "products over bf16 weights of %u token rows or more take their inputs rounded to bf16\n",
                p->act_bf16_min);
    fprintf(f, "%4s  %-22s %-18s %6s %14s %6s  %-7s  %s\n", "#", "label", "op", "tasks", "bytes/task", "signal",
            "copies", "waits");
    bool any_copy = false;
    for (uint32_t i = 0; i < p->n_instr; i++) {
        const struct mk_instr *in = &p->instrs[i];
        char copies[16];
        mk_dump_copies(in, copies, sizeof copies);
        any_copy |= copies[0] != 0;
        fprintf(f, "%4u  %-22s %-18s %6u %14" PRIu64 " %6u  %-7s ", i, p->labels[i], mk_opcode_name(in->op),
                in->n_tasks, mk_program_instr_weight_bytes(p, i) / in->n_tasks, in->signal, copies);
        for (int k = 0; k < 2; k++)
            if (in->wait[k].ctr != MK_NO_COUNTER) mk_dump_wait(f, &in->wait[k], false);
        if (in->op == MK_OP_ATTN_PARTIAL && in->args.attn.arrive)
            fprintf(f, "  (last split of a KV head merges it: arrivals c%u..c%u)", in->args.attn.arrive,
                    in->args.attn.arrive + in->args.attn.n_head_kv - 1u);
        fputc('\n', f);
    }
    if (any_copy)
        fputs("copies: int8 levels of x for block-format products: i8 the op's input (<) or output (>), n8 the "
              "residual stream normalized for the next norm op\n",
              f);
    /* A chunk step reads each weight once for all its tokens. */
    const char *per = ubatch > 1 ? "step" : "token";
    fprintf(f, "totals: %u instructions, %u tasks, %u counters, %u waits, %u barriers per %s\n", p->n_instr, p->n_tasks,
            p->n_counters, waits, barriers, per);
    fprintf(f,
            "weights read per %s: %" PRIu64 " bytes (%.3f GB); arena %" PRIu64 " bytes; KV cache %" PRIu64
            " bytes (%s)\n",
            per, wbytes, wbytes / 1e9, (uint64_t)p->arena_floats * 4, kv_bytes, kv_name);
}
