/* Option-value parsing shared by the mk subcommands: strict, range-checked, with clear errors. */
#ifndef MK_TOOLS_CLI_H
#define MK_TOOLS_CLI_H

#include <stdint.h>

#include "graph/executor.h"
#include "runtime/mk.h"

/* The whole of s as a base-10 integer in [lo, hi]; 0 on success, -1 otherwise. */
int mk_cli_parse_long(const char *s, long long lo, long long hi, long long *out);
/* The whole of s as a finite number in [lo, hi]; 0 on success, -1 otherwise. */
int mk_cli_parse_float(const char *s, float lo, float hi, float *out);
/* v as an integer in [lo, hi] for option opt of command cmd; prints why not and returns -1. */
int mk_cli_uint(const char *cmd, const char *opt, const char *v, uint32_t lo, uint32_t hi, uint32_t *out);

/* Usage lines of the GPU backend flags that mk_cli_gpu_flag takes. */
extern const char mk_cli_gpu_usage[];

/* argv[*i] as one of the GPU backend flags (--schedule static|dynamic, --tasks-per-worker N,
 * --attn-block N, --attn-solo N, --fuse-attn-output, --blocks-per-sm N, --no-rope-table, --chunk-dequant-min N, --trace off|on|fetch,
 * --kernel-image FILE) into *s, *i moved past its value: 1 when it is one, 0 when argv[*i] is
 * something else, -1 after printing why its value is bad. */
int mk_cli_gpu_flag(const char *cmd, int argc, char **argv, int *i, struct mk_gpu_settings *s);

/* Usage lines of the chunk-step flags that mk_cli_chunk_flag takes. */
extern const char mk_cli_chunk_usage[];

/* argv[*i] as one of --ubatch N, --spec lookup|off, --draft K (the fields of the same names in
 * struct mk_session_params; spec as enum mk_spec), *i moved past its value: 1 when it is one,
 * 0 when it is something else, -1 after printing why its value is bad. */
int mk_cli_chunk_flag(const char *cmd, int argc, char **argv, int *i, uint32_t *ubatch, int *spec, uint32_t *n_draft);

/* argv[*i] as --chunk-act bf16|f32 into *act_f32 (struct mk_session_params.act_f32), as
 * mk_cli_kv_flag. */
int mk_cli_act_flag(const char *cmd, int argc, char **argv, int *i, int *act_f32);

/* Usage lines of --kv-type and --chunk-act. */
extern const char mk_cli_kv_usage[];

/* argv[*i] as --kv-type f16|f32 into *kv, *i moved past its value: 1 when it is that flag, 0 when
 * it is something else, -1 after printing why its value is bad. */
int mk_cli_kv_flag(const char *cmd, int argc, char **argv, int *i, enum mk_kv_type *kv);

/* The MK_CUDA_* environment overrides into *s (flags parsed afterwards win); -1 after printing
 * why one is malformed. */
int mk_cli_gpu_env(const char *cmd, struct mk_gpu_settings *s);

/* The session's plain mirror of the GPU settings (runtime/mk.h). */
void mk_cli_gpu_params(const struct mk_gpu_settings *s, struct mk_gpu_params *out);

#endif
