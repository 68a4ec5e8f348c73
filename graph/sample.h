/* Host sampler: picks a step's next token from the logits with the step command's parameters. */
#ifndef MK_SAMPLE_H
#define MK_SAMPLE_H

#include <stdint.h>

#include "megakernel/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of candidates the sampler keeps for top_k on a vocabulary of vocab tokens: top_k when
 * 0 < top_k <= MK_SAMPLE_MAX_CAND and top_k <= vocab, else min(vocab, MK_SAMPLE_MAX_CAND). */
int mk_sample_cand_count(int32_t top_k, int vocab);

/* The n best (logit, id) pairs of logits, sorted by logit descending, then id ascending
 * (mk_sample_before). n must be <= vocab; returns n. */
int mk_sample_top_k(const float *logits, int vocab, int n, float *cand_logit, int32_t *cand_id);

/* Index of the greatest logit, the lowest index on ties. */
int32_t mk_sample_argmax(const float *logits, int vocab);

/* The token for one step: greedy when cmd->temperature <= 0, else top-k candidates fed to
 * mk_sample_pick with u = mk_sample_uniform(cmd->seed, cmd->pos). Every executor uses this (or
 * its device twin) so that they all draw the same token from the same logits. */
int32_t mk_sample_token(const float *logits, int vocab, const struct mk_step_cmd *cmd);

#ifdef __cplusplus
}
#endif
#endif
