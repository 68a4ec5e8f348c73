/* Option-value parsing shared by the mk subcommands: strict, range-checked, with clear errors. */
#ifndef MK_TOOLS_CLI_H
#define MK_TOOLS_CLI_H

#include <stdint.h>

/* The whole of s as a base-10 integer in [lo, hi]; 0 on success, -1 otherwise. */
int mk_cli_parse_long(const char *s, long long lo, long long hi, long long *out);
/* The whole of s as a finite number in [lo, hi]; 0 on success, -1 otherwise. */
int mk_cli_parse_float(const char *s, float lo, float hi, float *out);
/* v as an integer in [lo, hi] for option opt of command cmd; prints why not and returns -1. */
int mk_cli_uint(const char *cmd, const char *opt, const char *v, uint32_t lo, uint32_t hi, uint32_t *out);

#endif
