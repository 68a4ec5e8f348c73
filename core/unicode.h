/* Unicode for the tokenizers: codepoint classes, UTF-8, and the small regex engine behind the pre-tokenizer splits. */
#ifndef MK_UNICODE_H
#define MK_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Class bits: the general categories L, N, P, M, S and the White_Space property. */
enum {
    MK_UNI_LETTER = 1,
    MK_UNI_NUMBER = 2,
    MK_UNI_PUNCT = 4,
    MK_UNI_MARK = 8,
    MK_UNI_SYMBOL = 16,
    MK_UNI_SPACE = 32,
};

/* Codepoints from first up to the next run's first share flags (core/unicode_data.c, generated). */
struct mk_unicode_run {
    uint32_t first;
    uint8_t flags;
};
extern const struct mk_unicode_run mk_unicode_runs[];
extern const size_t mk_unicode_n_runs;

/* Class bits of a codepoint; 0 past U+10FFFF. */
uint8_t mk_unicode_flags(uint32_t cpt);

/* Length of the UTF-8 sequence at s (n >= 1 bytes available) and its codepoint, accepting what
 * llama.cpp accepts: a lead byte and the right number of continuation bytes (overlong forms
 * included). Returns 0 for an invalid sequence. */
size_t mk_unicode_utf8_decode(const unsigned char *s, size_t n, uint32_t *cpt);
/* Writes c as UTF-8 (1 to 4 bytes) and returns the length. */
size_t mk_unicode_utf8_encode(uint32_t c, char *out);

/* A compiled pattern in the regex dialect of llama.cpp's pre-tokenizers: alternation, (?:...),
 * (...), (?=...), (?!...), classes with ranges, \s \S \d \p{L} \p{N} \p{P} \p{M} \p{S}, the
 * quantifiers ? * + {n} {n,m} {n,} (greedy, backtracking, leftmost alternative first) and $. */
struct mk_unicode_regex;
enum mk_status mk_unicode_regex_compile(const char *pattern, struct mk_unicode_regex **out, struct mk_error *err);
void mk_unicode_regex_free(struct mk_unicode_regex *re);

/* Word lengths (in codepoints) of a split text. */
struct mk_unicode_spans {
    size_t *len; /* (cap) */
    size_t n, cap;
};

/* Splits each span of in (over the codepoints cpt, with their class bits fl) into the pattern's
 * matches and the text between them, as llama.cpp's regex split does: a pattern never sees past
 * its span. Appends to out. */
enum mk_status mk_unicode_regex_split(const struct mk_unicode_regex *re, const uint32_t *cpt, const uint8_t *fl,
                                      const struct mk_unicode_spans *in, struct mk_unicode_spans *out);
enum mk_status mk_unicode_spans_add(struct mk_unicode_spans *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
