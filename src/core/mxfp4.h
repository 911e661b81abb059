/* MXFP4, the experts' 4-bit format (docs/checkpoints.md#mxfp4): a row of n
 * inputs is cut into blocks of 32; each block has one e8m0 scale byte s and
 * 16 bytes of e2m1 codes, input k of a block in byte k / 2, the low nibble
 * for even k. Input k's value is e2m1[code] * 2^(s - 127). Plain C, host
 * and device (the block count is shared with the kernels). */
#ifndef GPTOSS_MXFP4_H
#define GPTOSS_MXFP4_H

#include <stdint.h>

#include "synth.h" /* GPTOSS_HD, gptoss_e2m1_value */

#ifdef __cplusplus
extern "C" {
#endif

#define GPTOSS_MXFP4_BLOCK 32       /* inputs per scale */
#define GPTOSS_MXFP4_BLOCK_BYTES 16 /* code bytes per block */
/* The scales a replica computes with (values up to 12 in magnitude): every
 * nonzero value is then a normal bf16, and so is the factor 2^(s - 1) the
 * kernels' dequantization multiplies by. */
#define GPTOSS_MXFP4_SCALE_MIN 2
#define GPTOSS_MXFP4_SCALE_MAX 128

/* blocks of one row of n inputs */
GPTOSS_HD static inline int64_t gptoss_mxfp4_blocks(int64_t n) {
    return (n + GPTOSS_MXFP4_BLOCK - 1) / GPTOSS_MXFP4_BLOCK;
}

/* the e2m1 code of input k of a row */
GPTOSS_HD static inline unsigned gptoss_mxfp4_code(const uint8_t *codes, int64_t k) {
    uint8_t byte = codes[k / GPTOSS_MXFP4_BLOCK * GPTOSS_MXFP4_BLOCK_BYTES + k % GPTOSS_MXFP4_BLOCK / 2];
    return k % 2 ? byte >> 4 : byte & 15u;
}

/* Decodes inputs [first, first + n) of one row from its blocks' codes and
 * scales (the row's, from input 0). */
void gptoss_mxfp4_decode(const uint8_t *codes, const uint8_t *scales, int64_t first, int64_t n,
                         float *out);

/* Encodes one row of n inputs exactly: every value must be an e2m1 value
 * times a power of two 2^-127..2^127 shared by its block of 32. The scale
 * is the smallest that holds the block's largest magnitude (2^-127 at
 * least; a block of zeros gets 127): a block exact under any scale is
 * exact under that one, so the encoding is canonical. The padding past n
 * is zero. Returns -1 when exact, else the first input that is not. */
int64_t gptoss_mxfp4_encode_row(const float *w, int64_t n, uint8_t *codes, uint8_t *scales);

/* -1 when the kernels take every block of an encoded row of n inputs, else
 * the first nonzero input of a block whose scale is outside
 * GPTOSS_MXFP4_SCALE_MIN..MAX, with why (128 bytes) saying so. */
int64_t gptoss_mxfp4_kernels_take(const uint8_t *codes, const uint8_t *scales, int64_t n, char *why);

#ifdef __cplusplus
}
#endif

#endif
