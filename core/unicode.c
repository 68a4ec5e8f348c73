/* Unicode for the tokenizers: class lookup, UTF-8, and a backtracking regex engine over codepoints for the pre-tokenizer splits. */
#include "core/unicode.h"

#include <stdlib.h>
#include <string.h>

uint8_t mk_unicode_flags(uint32_t cpt) {
    if (cpt >= 0x110000) return 0;
    size_t lo = 0, hi = mk_unicode_n_runs; /* the last run whose first <= cpt */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (mk_unicode_runs[mid].first <= cpt)
            lo = mid;
        else
            hi = mid;
    }
    return mk_unicode_runs[lo].flags;
}

size_t mk_unicode_utf8_decode(const unsigned char *s, size_t n, uint32_t *cpt) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *cpt = c;
        return 1;
    }
    size_t len = c < 0xC0 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    uint32_t v = c & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cpt = v;
    return len;
}

size_t mk_unicode_utf8_encode(uint32_t c, char *out) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

#define MK_UNI_RX_MAX_INST (1 << 16) /* far above any pattern llama.cpp lists */

/* Instructions of the backtracking machine; jump targets are relative to the instruction, so a
 * compiled piece can be copied or shifted as it is. */
enum mk_uni_op { MK_RX_CLASS, MK_RX_SPLIT, MK_RX_JMP, MK_RX_EOL, MK_RX_LOOK, MK_RX_MATCH };

struct mk_uni_inst {
    uint8_t op;
    bool neg;    /* LOOK: (?!...) */
    int32_t x;   /* SPLIT: first choice; JMP: target; LOOK: the sub-pattern */
    int32_t y;   /* SPLIT: second choice; LOOK: where to go on */
    int32_t cls; /* CLASS: index into classes */
};

/* One set of codepoints: whole categories (cats) plus ranges, maybe negated. */
struct mk_uni_class {
    uint8_t cats;
    bool neg;
    uint32_t first, n; /* ranges[first .. first + n) */
};

struct mk_unicode_regex {
    struct mk_uni_inst *code;
    size_t n_code, cap_code;
    struct mk_uni_class *classes;
    size_t n_classes, cap_classes;
    uint32_t (*ranges)[2];
    size_t n_ranges, cap_ranges;
};

struct mk_uni_parser {
    struct mk_unicode_regex *re;
    const char *pat, *p, *end;
    struct mk_error *err;
    enum mk_status st;
};

static bool mk_uni_grow(void **a, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *b = realloc(*a, c * elem);
    if (!b) return false;
    *a = b;
    *cap = c;
    return true;
}

static bool mk_uni_fail(struct mk_uni_parser *ps, enum mk_status st, const char *what) {
    if (ps->st == MK_OK)
        ps->st = mk_error_set(ps->err, st, "regex \"%s\": %s at offset %zu", ps->pat, what, (size_t)(ps->p - ps->pat));
    return false;
}

/* Inserts k instructions at position at (shifting the rest); returns false when out of memory. */
static bool mk_uni_insert(struct mk_uni_parser *ps, size_t at, const struct mk_uni_inst *ins, size_t k) {
    struct mk_unicode_regex *re = ps->re;
    if (re->n_code + k > MK_UNI_RX_MAX_INST) return mk_uni_fail(ps, MK_ERR_UNSUPPORTED, "pattern too large");
    if (!mk_uni_grow((void **)&re->code, &re->cap_code, re->n_code + k, sizeof *re->code))
        return mk_uni_fail(ps, MK_ERR_NOMEM, "out of memory");
    memmove(re->code + at + k, re->code + at, (re->n_code - at) * sizeof *re->code);
    memcpy(re->code + at, ins, k * sizeof *ins);
    re->n_code += k;
    return true;
}

static bool mk_uni_emit(struct mk_uni_parser *ps, struct mk_uni_inst in) {
    return mk_uni_insert(ps, ps->re->n_code, &in, 1);
}

static int32_t mk_uni_new_class(struct mk_uni_parser *ps, bool neg) {
    struct mk_unicode_regex *re = ps->re;
    if (!mk_uni_grow((void **)&re->classes, &re->cap_classes, re->n_classes + 1, sizeof *re->classes)) {
        mk_uni_fail(ps, MK_ERR_NOMEM, "out of memory");
        return -1;
    }
    re->classes[re->n_classes] = (struct mk_uni_class){ 0, neg, (uint32_t)re->n_ranges, 0 };
    return (int32_t)re->n_classes++;
}

static bool mk_uni_add_range(struct mk_uni_parser *ps, int32_t cls, uint32_t lo, uint32_t hi) {
    struct mk_unicode_regex *re = ps->re;
    if (lo > hi) return mk_uni_fail(ps, MK_ERR_INVALID_ARG, "range out of order");
    if (!mk_uni_grow((void **)&re->ranges, &re->cap_ranges, re->n_ranges + 1, sizeof *re->ranges))
        return mk_uni_fail(ps, MK_ERR_NOMEM, "out of memory");
    re->ranges[re->n_ranges][0] = lo;
    re->ranges[re->n_ranges][1] = hi;
    re->n_ranges++;
    re->classes[cls].n++;
    return true;
}

/* Next literal codepoint of the pattern (UTF-8). */
static bool mk_uni_next_cpt(struct mk_uni_parser *ps, uint32_t *c) {
    size_t len = mk_unicode_utf8_decode((const unsigned char *)ps->p, (size_t)(ps->end - ps->p), c);
    if (len == 0) return mk_uni_fail(ps, MK_ERR_INVALID_ARG, "invalid UTF-8");
    ps->p += len;
    return true;
}

/* After a backslash: \p{..} and \s add categories (*cats), \d a range; anything else is the
 * literal *c (\r, \n, \t or the escaped character). Returns 1 for a category, 0 for a literal. */
static int mk_uni_escape(struct mk_uni_parser *ps, uint8_t *cats, uint32_t *c) {
    if (ps->p >= ps->end) {
        mk_uni_fail(ps, MK_ERR_INVALID_ARG, "trailing backslash");
        return -1;
    }
    char e = *ps->p++;
    if (e == 's') {
        *cats = MK_UNI_SPACE;
        return 1;
    }
    if (e == 'p') {
        static const struct {
            const char *name;
            uint8_t cats;
        } names[] = { { "{L}", MK_UNI_LETTER },  { "{N}", MK_UNI_NUMBER },  { "{P}", MK_UNI_PUNCT },
                      { "{M}", MK_UNI_MARK },    { "{S}", MK_UNI_SYMBOL },  { "{Lu}", MK_UNI_LETTER },
                      { "{Ll}", MK_UNI_LETTER }, { "{Lt}", MK_UNI_LETTER }, { "{Lm}", MK_UNI_LETTER },
                      { "{Lo}", MK_UNI_LETTER } };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            size_t n = strlen(names[i].name);
            if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, names[i].name, n) == 0) {
                ps->p += n;
                *cats = names[i].cats;
                return 1;
            }
        }
        mk_uni_fail(ps, MK_ERR_UNSUPPORTED, "unknown \\p class");
        return -1;
    }
    if (e == 'd') return 2;
    *c = e == 'r' ? '\r' : e == 'n' ? '\n' : e == 't' ? '\t' : (uint32_t)(unsigned char)e;
    if ((unsigned char)e >= 0x80 || (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
        if (e != 'r' && e != 'n' && e != 't') {
            mk_uni_fail(ps, MK_ERR_UNSUPPORTED, "unsupported escape");
            return -1;
        }
    }
    return 0;
}

static bool mk_uni_parse_class(struct mk_uni_parser *ps) {
    bool neg = ps->p < ps->end && *ps->p == '^';
    if (neg) ps->p++;
    int32_t cls = mk_uni_new_class(ps, neg);
    if (cls < 0) return false;
    while (ps->p < ps->end && *ps->p != ']') {
        uint32_t lo, hi;
        if (*ps->p == '\\') {
            ps->p++;
            uint8_t cats = 0;
            int k = mk_uni_escape(ps, &cats, &lo);
            if (k < 0) return false;
            if (k == 1) {
                ps->re->classes[cls].cats |= cats;
                continue;
            }
            if (k == 2) {
                if (!mk_uni_add_range(ps, cls, '0', '9')) return false;
                continue;
            }
        } else if (!mk_uni_next_cpt(ps, &lo)) {
            return false;
        }
        hi = lo;
        if (ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            if (*ps->p == '\\') {
                ps->p++;
                uint8_t cats = 0;
                if (mk_uni_escape(ps, &cats, &hi) != 0) return mk_uni_fail(ps, MK_ERR_UNSUPPORTED, "class in range");
            } else if (!mk_uni_next_cpt(ps, &hi)) {
                return false;
            }
        }
        if (!mk_uni_add_range(ps, cls, lo, hi)) return false;
    }
    if (ps->p >= ps->end) return mk_uni_fail(ps, MK_ERR_INVALID_ARG, "unclosed [");
    ps->p++;
    return mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_CLASS, .cls = cls });
}

static bool mk_uni_parse_alt(struct mk_uni_parser *ps);

static bool mk_uni_parse_atom(struct mk_uni_parser *ps) {
    char c = *ps->p;
    if (c == '(') {
        ps->p++;
        int look = 0; /* 1: (?=, 2: (?! */
        if (ps->end - ps->p >= 2 && ps->p[0] == '?') {
            look = ps->p[1] == '=' ? 1 : ps->p[1] == '!' ? 2 : 0;
            if (!look && ps->p[1] != ':') return mk_uni_fail(ps, MK_ERR_UNSUPPORTED, "unsupported group");
            ps->p += 2;
        }
        size_t at = ps->re->n_code;
        if (look && !mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_LOOK, .neg = look == 2, .x = 1 })) return false;
        if (!mk_uni_parse_alt(ps)) return false;
        if (ps->p >= ps->end || *ps->p != ')') return mk_uni_fail(ps, MK_ERR_INVALID_ARG, "unclosed (");
        ps->p++;
        if (look) {
            if (!mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_MATCH })) return false;
            ps->re->code[at].y = (int32_t)(ps->re->n_code - at);
        }
        return true;
    }
    if (c == '[') {
        ps->p++;
        return mk_uni_parse_class(ps);
    }
    if (c == '$') {
        ps->p++;
        return mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_EOL });
    }
    if (c == '.' || c == '^' || c == '*' || c == '+' || c == '?' || c == '{')
        return mk_uni_fail(ps, MK_ERR_UNSUPPORTED, "unsupported or misplaced operator");
    uint8_t cats = 0;
    uint32_t lit = 0;
    int k = 0;
    if (c == '\\') {
        ps->p++;
        if (ps->p < ps->end && *ps->p == 'S') { /* \S: not a space */
            ps->p++;
            int32_t cls = mk_uni_new_class(ps, true);
            if (cls < 0) return false;
            ps->re->classes[cls].cats = MK_UNI_SPACE;
            return mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_CLASS, .cls = cls });
        }
        if ((k = mk_uni_escape(ps, &cats, &lit)) < 0) return false;
    } else if (!mk_uni_next_cpt(ps, &lit)) {
        return false;
    }
    int32_t cls = mk_uni_new_class(ps, false);
    if (cls < 0) return false;
    ps->re->classes[cls].cats = cats;
    if (k == 0 && !mk_uni_add_range(ps, cls, lit, lit)) return false;
    if (k == 2 && !mk_uni_add_range(ps, cls, '0', '9')) return false;
    return mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_CLASS, .cls = cls });
}

static bool mk_uni_parse_count(struct mk_uni_parser *ps, int32_t *v) {
    int64_t n = 0;
    const char *s = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9' && n < 100000) n = n * 10 + (*ps->p++ - '0');
    if (ps->p == s || n >= 100000) return mk_uni_fail(ps, MK_ERR_UNSUPPORTED, "bad repeat count");
    *v = (int32_t)n;
    return true;
}

/* Applies the quantifier at ps->p (if any) to the piece compiled from start on. */
static bool mk_uni_parse_quant(struct mk_uni_parser *ps, size_t start) {
    struct mk_unicode_regex *re = ps->re;
    while (ps->p < ps->end && (*ps->p == '?' || *ps->p == '*' || *ps->p == '+' || *ps->p == '{')) {
        int32_t len = (int32_t)(re->n_code - start);
        int32_t lo = 0, hi = -1; /* hi -1: no upper bound */
        char q = *ps->p++;
        if (q == '?')
            hi = 1;
        else if (q == '+')
            lo = 1;
        else if (q == '{') {
            if (!mk_uni_parse_count(ps, &lo)) return false;
            hi = lo;
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                hi = -1;
                if (ps->p < ps->end && *ps->p != '}' && !mk_uni_parse_count(ps, &hi)) return false;
            }
            if (ps->p >= ps->end || *ps->p != '}' || (hi >= 0 && hi < lo))
                return mk_uni_fail(ps, MK_ERR_UNSUPPORTED, "bad repeat");
            ps->p++;
        }
        if (ps->p < ps->end && *ps->p == '?') return mk_uni_fail(ps, MK_ERR_UNSUPPORTED, "lazy quantifier");
        if (lo == 1 && hi == -1) { /* x+ : x, then back to x while it can */
            if (!mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_SPLIT, .x = -len, .y = 1 })) return false;
            continue;
        }
        /* Otherwise: lo copies of the piece, then either a loop or (hi - lo) optional copies. */
        size_t body_n = (size_t)len;
        struct mk_uni_inst *body = malloc((body_n ? body_n : 1) * sizeof *body);
        if (!body) return mk_uni_fail(ps, MK_ERR_NOMEM, "out of memory");
        memcpy(body, re->code + start, body_n * sizeof *body);
        re->n_code = start;
        bool ok = true;
        for (int32_t i = 0; i < lo && ok; i++) ok = mk_uni_insert(ps, re->n_code, body, body_n);
        if (ok && hi < 0) {
            ok = mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_SPLIT, .x = 1, .y = len + 2 }) &&
                 mk_uni_insert(ps, re->n_code, body, body_n) &&
                 mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_JMP, .x = -(len + 1) });
        }
        for (int32_t i = 0, r = hi - lo; ok && hi >= 0 && i < r; i++)
            ok = mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_SPLIT, .x = 1, .y = (r - i) * (len + 1) }) &&
                 mk_uni_insert(ps, re->n_code, body, body_n);
        free(body);
        if (!ok) return false;
    }
    return true;
}

static bool mk_uni_parse_seq(struct mk_uni_parser *ps) {
    while (ps->p < ps->end && *ps->p != '|' && *ps->p != ')') {
        size_t start = ps->re->n_code;
        if (!mk_uni_parse_atom(ps) || !mk_uni_parse_quant(ps, start)) return false;
    }
    return true;
}

static bool mk_uni_parse_alt(struct mk_uni_parser *ps) {
    size_t start = ps->re->n_code;
    if (!mk_uni_parse_seq(ps)) return false;
    while (ps->p < ps->end && *ps->p == '|') {
        ps->p++;
        /* (what came before) | (what comes next): SPLIT, before, JMP over the next. */
        int32_t len = (int32_t)(ps->re->n_code - start);
        struct mk_uni_inst split = { .op = MK_RX_SPLIT, .x = 1, .y = len + 2 };
        if (!mk_uni_insert(ps, start, &split, 1)) return false;
        size_t jmp = ps->re->n_code;
        if (!mk_uni_emit(ps, (struct mk_uni_inst){ .op = MK_RX_JMP }) || !mk_uni_parse_seq(ps)) return false;
        ps->re->code[jmp].x = (int32_t)(ps->re->n_code - jmp);
    }
    return true;
}

void mk_unicode_regex_free(struct mk_unicode_regex *re) {
    if (!re) return;
    free(re->code);
    free(re->classes);
    free(re->ranges);
    free(re);
}

enum mk_status mk_unicode_regex_compile(const char *pattern, struct mk_unicode_regex **out, struct mk_error *err) {
    *out = NULL;
    struct mk_unicode_regex *re = calloc(1, sizeof *re);
    if (!re) return mk_error_set(err, MK_ERR_NOMEM, "regex: out of memory");
    struct mk_uni_parser ps = { re, pattern, pattern, pattern + strlen(pattern), err, MK_OK };
    bool ok = mk_uni_parse_alt(&ps);
    if (ok && ps.p < ps.end) ok = mk_uni_fail(&ps, MK_ERR_INVALID_ARG, "unmatched )");
    if (ok) ok = mk_uni_emit(&ps, (struct mk_uni_inst){ .op = MK_RX_MATCH });
    if (!ok) {
        mk_unicode_regex_free(re);
        return ps.st;
    }
    *out = re;
    return MK_OK;
}

/* As in llama.cpp, a non-ASCII space is seen as U+000B (so it never equals a listed character)
 * and has no category but "space". */
static bool mk_uni_class_has(const struct mk_unicode_regex *re, const struct mk_uni_class *k, uint32_t c, uint8_t f) {
    if (c > 0x7F && (f & MK_UNI_SPACE)) {
        c = 0x0B;
        f = MK_UNI_SPACE;
    }
    bool in = (f & k->cats) != 0;
    for (uint32_t i = 0; i < k->n && !in; i++)
        in = c >= re->ranges[k->first + i][0] && c <= re->ranges[k->first + i][1];
    return in != k->neg;
}

struct mk_uni_thread {
    size_t pc, sp;
};

struct mk_uni_stack {
    struct mk_uni_thread *a;
    size_t n, cap;
};

/* Runs the program from pc at sp, with the text ending at hi. Returns the end of the first match
 * in priority order, -1 when there is none, -2 when out of memory. */
static ptrdiff_t mk_uni_run(const struct mk_unicode_regex *re, size_t pc, size_t sp, const uint32_t *cpt,
                            const uint8_t *fl, size_t hi, struct mk_uni_stack *st) {
    size_t base = st->n;
    if (!mk_uni_grow((void **)&st->a, &st->cap, st->n + 1, sizeof *st->a)) return -2;
    st->a[st->n++] = (struct mk_uni_thread){ pc, sp };
    while (st->n > base) {
        struct mk_uni_thread t = st->a[--st->n];
        for (bool alive = true; alive;) {
            const struct mk_uni_inst *in = &re->code[t.pc];
            switch (in->op) {
            case MK_RX_CLASS:
                alive = t.sp < hi && mk_uni_class_has(re, &re->classes[in->cls], cpt[t.sp], fl[t.sp]);
                t.pc++;
                t.sp++;
                break;
            case MK_RX_SPLIT:
                if (!mk_uni_grow((void **)&st->a, &st->cap, st->n + 1, sizeof *st->a)) return -2;
                st->a[st->n++] = (struct mk_uni_thread){ t.pc + (size_t)(ptrdiff_t)in->y, t.sp };
                t.pc += (size_t)(ptrdiff_t)in->x;
                break;
            case MK_RX_JMP: t.pc += (size_t)(ptrdiff_t)in->x; break;
            case MK_RX_EOL:
                alive = t.sp == hi;
                t.pc++;
                break;
            case MK_RX_LOOK: {
                ptrdiff_t r = mk_uni_run(re, t.pc + 1, t.sp, cpt, fl, hi, st);
                if (r == -2) return -2;
                alive = (r >= 0) != in->neg;
                t.pc += (size_t)(ptrdiff_t)in->y;
                break;
            }
            default: st->n = base; return (ptrdiff_t)t.sp;
            }
        }
    }
    return -1;
}

enum mk_status mk_unicode_spans_add(struct mk_unicode_spans *s, size_t len) {
    if (!mk_uni_grow((void **)&s->len, &s->cap, s->n + 1, sizeof *s->len)) return MK_ERR_NOMEM;
    s->len[s->n++] = len;
    return MK_OK;
}

enum mk_status mk_unicode_regex_split(const struct mk_unicode_regex *re, const uint32_t *cpt, const uint8_t *fl,
                                      const struct mk_unicode_spans *in, struct mk_unicode_spans *out) {
    enum mk_status st = MK_OK;
    struct mk_uni_stack stack = { 0 };
    size_t lo = 0;
    for (size_t k = 0; k < in->n && st == MK_OK; k++) {
        size_t hi = lo + in->len[k], gap = lo;
        for (size_t s = lo; s < hi && st == MK_OK;) {
            ptrdiff_t e = mk_uni_run(re, 0, s, cpt + 0, fl, hi, &stack);
            if (e == -2) {
                st = MK_ERR_NOMEM;
            } else if (e > (ptrdiff_t)s) {
                if (s > gap) st = mk_unicode_spans_add(out, s - gap);
                if (st == MK_OK) st = mk_unicode_spans_add(out, (size_t)e - s);
                s = gap = (size_t)e;
            } else {
                s++; /* no match here (an empty match counts as none) */
            }
        }
        if (st == MK_OK && hi > gap) st = mk_unicode_spans_add(out, hi - gap);
        lo = hi;
    }
    free(stack.a);
    return st;
}
