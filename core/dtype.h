/* Weight formats (ggml type ids), their block layouts, and CPU dequantize/dot/quantize routines. */
#ifndef MK_DTYPE_H
#define MK_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Values are ggml's type ids, as stored in GGUF tensor infos. */
enum mk_dtype {
    MK_DTYPE_F32 = 0,
    MK_DTYPE_F16 = 1,
    MK_DTYPE_Q4_0 = 2,
    MK_DTYPE_Q4_1 = 3,
    MK_DTYPE_Q5_0 = 6,
    MK_DTYPE_Q5_1 = 7,
    MK_DTYPE_Q8_0 = 8,
    MK_DTYPE_Q2_K = 10,
    MK_DTYPE_Q3_K = 11,
    MK_DTYPE_Q4_K = 12,
    MK_DTYPE_Q5_K = 13,
    MK_DTYPE_Q6_K = 14,
    MK_DTYPE_IQ4_NL = 20,
    MK_DTYPE_IQ4_XS = 23,
    MK_DTYPE_BF16 = 30,
};

/* Every type mk reads and writes, in ggml id order. */
#define MK_DTYPE_COUNT 15
extern const enum mk_dtype mk_dtype_all[MK_DTYPE_COUNT];

#define MK_QK4_0        32 /* also q4_1, q5_0, q5_1 and iq4_nl */
#define MK_QK8_0        32
#define MK_QK_K         256
#define MK_K_SCALE_SIZE 12

/* Block layouts, bit-compatible with ggml. fp16 fields are raw IEEE half bits. */
struct mk_block_q4_0 {
    uint16_t d;               /* scale, fp16 */
    uint8_t qs[MK_QK4_0 / 2]; /* element j in the low nibble of byte j, element j+16 in the high */
};
struct mk_block_q4_1 {
    uint16_t d; /* scale, fp16 */
    uint16_t m; /* offset (the block minimum), fp16 */
    uint8_t qs[MK_QK4_0 / 2];
};
struct mk_block_q5_0 {
    uint16_t d;    /* scale, fp16 */
    uint8_t qh[4]; /* 5th bit of element j in bit j (little-endian 32-bit word) */
    uint8_t qs[MK_QK4_0 / 2];
};
struct mk_block_q5_1 {
    uint16_t d; /* scale, fp16 */
    uint16_t m; /* offset, fp16 */
    uint8_t qh[4];
    uint8_t qs[MK_QK4_0 / 2];
};
struct mk_block_iq4_nl {
    uint16_t d;               /* scale, fp16 */
    uint8_t qs[MK_QK4_0 / 2]; /* indices into the 16-entry non-linear table, nibbles as q4_0 */
};
struct mk_block_q2_k {
    uint8_t scales[MK_QK_K / 16]; /* per 16 elements: 4-bit scale (low) and 4-bit min (high) */
    uint8_t qs[MK_QK_K / 4];      /* 2-bit quants */
    uint16_t d;                   /* super-block scale for the scales, fp16 */
    uint16_t dmin;                /* super-block scale for the mins, fp16 */
};
struct mk_block_q3_k {
    uint8_t hmask[MK_QK_K / 8];      /* high bit of each 3-bit quant */
    uint8_t qs[MK_QK_K / 4];         /* low 2 bits */
    uint8_t scales[MK_K_SCALE_SIZE]; /* 16 signed 6-bit scales, biased by 32 */
    uint16_t d;                      /* super-block scale, fp16 */
};
struct mk_block_q5_k {
    uint16_t d;                      /* super-block scale for quantized scales, fp16 */
    uint16_t dmin;                   /* super-block scale for quantized mins, fp16 */
    uint8_t scales[MK_K_SCALE_SIZE]; /* 8 scales and 8 mins, 6 bits each, packed as q4_k */
    uint8_t qh[MK_QK_K / 8];         /* 5th bits */
    uint8_t qs[MK_QK_K / 2];         /* low 4 bits */
};
struct mk_block_iq4_xs {
    uint16_t d;                     /* super-block scale, fp16 */
    uint16_t scales_h;              /* top 2 bits of the 8 6-bit sub-block scales */
    uint8_t scales_l[MK_QK_K / 64]; /* low 4 bits of the sub-block scales */
    uint8_t qs[MK_QK_K / 2];        /* table indices, 16 bytes per 32 elements, nibbles as q4_0 */
};
struct mk_block_q8_0 {
    uint16_t d; /* scale, fp16 */
    int8_t qs[MK_QK8_0];
};
struct mk_block_q4_k {
    uint16_t d;                      /* super-block scale for quantized scales, fp16 */
    uint16_t dmin;                   /* super-block scale for quantized mins, fp16 */
    uint8_t scales[MK_K_SCALE_SIZE]; /* 8 scales and 8 mins, 6 bits each */
    uint8_t qs[MK_QK_K / 2];         /* 4-bit quants */
};
struct mk_block_q6_k {
    uint8_t ql[MK_QK_K / 2];     /* low 4 bits */
    uint8_t qh[MK_QK_K / 4];     /* high 2 bits */
    int8_t scales[MK_QK_K / 16]; /* 8-bit scales */
    uint16_t d;                  /* super-block scale, fp16 */
};
_Static_assert(sizeof(struct mk_block_q4_0) == 18, "q4_0 block");
_Static_assert(sizeof(struct mk_block_q4_1) == 20, "q4_1 block");
_Static_assert(sizeof(struct mk_block_q5_0) == 22, "q5_0 block");
_Static_assert(sizeof(struct mk_block_q5_1) == 24, "q5_1 block");
_Static_assert(sizeof(struct mk_block_iq4_nl) == 18, "iq4_nl block");
_Static_assert(sizeof(struct mk_block_q2_k) == 84, "q2_k block");
_Static_assert(sizeof(struct mk_block_q3_k) == 110, "q3_k block");
_Static_assert(sizeof(struct mk_block_q5_k) == 176, "q5_k block");
_Static_assert(sizeof(struct mk_block_iq4_xs) == 136, "iq4_xs block");
_Static_assert(sizeof(struct mk_block_q8_0) == 34, "q8_0 block");
_Static_assert(sizeof(struct mk_block_q4_k) == 144, "q4_k block");
_Static_assert(sizeof(struct mk_block_q6_k) == 210, "q6_k block");

struct mk_dtype_info {
    const char *name;    /* "f32", "q4_k", ... */
    uint32_t block_size; /* elements per block (1 for plain floats) */
    uint32_t type_size;  /* bytes per block */
};

/* The 16 values of the iq4_nl / iq4_xs non-linear code book. */
extern const int8_t mk_iq4nl_values[16];

/* Info for a ggml type id mk supports; NULL for any other id (known to ggml or not). */
const struct mk_dtype_info *mk_dtype_get(uint32_t type);
/* Whether type is a supported block format (blocks of 32 or 256 elements, not plain floats). */
bool mk_dtype_is_block(uint32_t type);
/* Name of any ggml type id, including ones mk does not support ("q4_0", ...), or NULL. */
const char *mk_dtype_ggml_name(uint32_t type);
/* Parses "f32", "q4_k", ... into a dtype; returns 0 on success, -1 when unknown. */
int mk_dtype_parse(const char *name, enum mk_dtype *out);
/* Bytes of a row of n elements; n must be a multiple of the block size. */
size_t mk_dtype_row_bytes(enum mk_dtype type, int64_t n);

float mk_fp16_to_fp32(uint16_t h);
/* n halves widened to floats; the loop vectorizes, where calls to mk_fp16_to_fp32 one by one do not. */
void mk_fp16_to_fp32_row(const uint16_t *src, float *dst, int64_t n);
/* The table behind it: entry h is half h as a float (filled on the first call). */
const float *mk_fp16_table(void);
uint16_t mk_fp32_to_fp16(float f); /* round to nearest even */
float mk_bf16_to_fp32(uint16_t h);
uint16_t mk_fp32_to_bf16(float f); /* round to nearest even, NaN stays NaN */

/* n elements (a multiple of the block size) of src in format type into dst floats. */
void mk_dequantize_row(enum mk_dtype type, const void *src, float *dst, int64_t n);
/* Dot product of a weight row in format type with float activations x, fp32 accumulation. */
float mk_dot_row(enum mk_dtype type, const void *row, const float *x, int64_t n);
/* Quantizes n floats into dst with ggml's reference (no importance matrix) quantizer of type, the
 * one llama-quantize runs without --imatrix; returns bytes written. */
size_t mk_quantize_row(enum mk_dtype type, const float *src, void *dst, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
