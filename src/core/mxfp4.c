#include "mxfp4.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Scale bytes whose power of two times any e2m1 value is a normal float:
 * the product is then exact, as ldexpf is everywhere. */
enum { PLAIN_SCALE_MIN = 2, PLAIN_SCALE_MAX = 252 };

/* the 16 values of scale byte s's block, as ldexpf gives them */
static void block_values(int s, float value[16]) {
    for (unsigned c = 0; c < 16; c++)
        value[c] = s >= PLAIN_SCALE_MIN && s <= PLAIN_SCALE_MAX ? gptoss_e2m1_value(c) * gptoss_pow2f(s - 127)
                                                                 : ldexpf(gptoss_e2m1_value(c), s - 127);
}

void gptoss_mxfp4_decode(const uint8_t *codes, const uint8_t *scales, int64_t first, int64_t n,
                         float *out) {
    float value[16];
    int last = -1; /* the scale value[] holds: neighbouring blocks often share one */
    for (int64_t k = first; k < first + n;) { /* a block at a time */
        int64_t b = k / GPTOSS_MXFP4_BLOCK, end = (b + 1) * GPTOSS_MXFP4_BLOCK;
        if (scales[b] != last)
            block_values(last = scales[b], value);
        if (k == b * GPTOSS_MXFP4_BLOCK && end <= first + n) { /* a whole block: two codes a byte */
            const uint8_t *c = codes + b * GPTOSS_MXFP4_BLOCK_BYTES;
            float *o = out + (k - first);
            for (int i = 0; i < GPTOSS_MXFP4_BLOCK_BYTES; i++) {
                o[2 * i] = value[c[i] & 15u];
                o[2 * i + 1] = value[c[i] >> 4];
            }
            k = end;
            continue;
        }
        for (; k < end && k < first + n; k++)
            out[k - first] = value[gptoss_mxfp4_code(codes, k)];
    }
}

/* the e2m1 code of v, or -1 when v is none */
static int e2m1_code(float v) {
    for (unsigned c = 0; c < 16; c++)
        if (gptoss_e2m1_value(c) == v && signbit(gptoss_e2m1_value(c)) == signbit(v))
            return (int)c;
    return -1;
}

int64_t gptoss_mxfp4_encode_row(const float *w, int64_t n, uint8_t *codes, uint8_t *scales) {
    int64_t blocks = gptoss_mxfp4_blocks(n);
    memset(codes, 0, (size_t)blocks * GPTOSS_MXFP4_BLOCK_BYTES);
    for (int64_t b = 0; b < blocks; b++) {
        int64_t first = b * GPTOSS_MXFP4_BLOCK;
        int64_t count = n - first < GPTOSS_MXFP4_BLOCK ? n - first : GPTOSS_MXFP4_BLOCK;
        float amax = 0.0f;
        for (int64_t i = 0; i < count; i++) {
            if (!isfinite(w[first + i]))
                return first + i;
            amax = fmaxf(amax, fabsf(w[first + i]));
        }
        /* the smallest s with amax <= 6 * 2^s: below it the largest value
         * needs a code past 6, above it the set's finer values are lost
         * (and any value exact under a larger scale is exact under it);
         * finite floats need no more than 2^126 */
        int s = 0;
        if (amax > 0.0f) {
            int e;
            frexpf(amax / 6.0f, &e); /* amax / 6 = m 2^e, m in [0.5, 1) */
            s = ldexpf(6.0f, e - 1) >= amax ? e - 1 : e;
            if (s < -127) /* e8m0's smallest: tinier blocks may still be exact under it */
                s = -127;
        }
        scales[b] = (uint8_t)(s + 127);
        for (int64_t i = 0; i < count; i++) {
            int c = e2m1_code(ldexpf(w[first + i], -s));
            if (c < 0 || ldexpf(gptoss_e2m1_value((unsigned)c), s) != w[first + i])
                return first + i;
            codes[b * GPTOSS_MXFP4_BLOCK_BYTES + i / 2] |= (uint8_t)(i % 2 ? c << 4 : c);
        }
    }
    return -1;
}

int64_t gptoss_mxfp4_kernels_take(const uint8_t *codes, const uint8_t *scales, int64_t n, char *why) {
    for (int64_t b = 0; b < gptoss_mxfp4_blocks(n); b++) {
        if (scales[b] >= GPTOSS_MXFP4_SCALE_MIN && scales[b] <= GPTOSS_MXFP4_SCALE_MAX)
            continue;
        for (int64_t k = b * GPTOSS_MXFP4_BLOCK; k < n && k < (b + 1) * GPTOSS_MXFP4_BLOCK; k++)
            if (gptoss_mxfp4_code(codes, k) & 7u) {
                snprintf(why, 128, "needs the MXFP4 scale byte %d, outside the %d..%d the kernels take", scales[b],
                         GPTOSS_MXFP4_SCALE_MIN, GPTOSS_MXFP4_SCALE_MAX);
                return k;
            }
    }
    return -1;
}
