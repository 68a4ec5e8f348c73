/* Option-value parsing shared by the mk subcommands. */
#include "tools/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int mk_cli_parse_long(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int mk_cli_parse_float(const char *s, float lo, float hi, float *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = (float)v;
    return 0;
}

int mk_cli_uint(const char *cmd, const char *opt, const char *v, uint32_t lo, uint32_t hi, uint32_t *out) {
    long long x;
    if (mk_cli_parse_long(v, lo, hi, &x) != 0) {
        fprintf(stderr, "mk %s: %s needs an integer in [%u, %u], got '%s'\n", cmd, opt, lo, hi, v ? v : "");
        return -1;
    }
    *out = (uint32_t)x;
    return 0;
}
