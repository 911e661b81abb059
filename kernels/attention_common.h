/* What attention's kernel families (attention_partial.h, attention_mma.h,
 * attention_combine.h, attention_exact.h) share, each a part of
 * attention.hip's translation unit: the partial blocks' size, the head
 * shapes the engine takes (gptoss_attention_limits) and the blocks' shared
 * memory. */
#ifndef GPTOSS_KERNELS_ATTENTION_COMMON_H
#define GPTOSS_KERNELS_ATTENTION_COMMON_H

#include <math.h>

#include "device.h"
#include "launch.h"
#include "../contract/launchers.h"

namespace {

/* a partial block's threads, on the matrix cores or not */
constexpr int THREADS = 128;
/* the largest query group (heads a KV head serves), group times head width
 * and head width: the float partials' registers and the exact kernel's
 * outputs a thread are sized by them */
constexpr int MAX_G = 32, MAX_GD = 2048, MAX_HEAD_DIM = 256;

/* a partial block's dynamic shared memory (either family's) */
extern __shared__ float4 smem4[];

} // namespace

#endif
