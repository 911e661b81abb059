/* The GPU sampler: one token per row of logits, the same ids as the CPU's
 * gptoss_sample_with (src/core/sampler.c, docs/api.md#default-mode).
 *
 * One block per row, never sorting. The row's logit bias is added in place
 * first (the replaced logits kept in shared memory and put back at the end,
 * so the logits read back are the model's), then a penalized row's
 * penalties over its slot's counted ids (sample_adjust.h), which that row
 * extends with its id at the end. A first pass finds the first maximum
 * and checks the logits (a NaN or +inf, or nothing above -inf, is no token,
 * greedy or not); greedy rows stop there. The filters keep a prefix
 * of the ranks (logit desc, id asc): every token whose 64-bit rank key
 * (order-preserving logit bits above the id reversed) is >= the key of the
 * last kept rank. Radix selection over that key, one 8-bit digit per pass
 * over the row, finds that bound for top_k (by counts) and then top_p (by
 * weight sums among what top_k kept); min_p is one more pass. The draw
 * then sums the kept weights over ranges of ids and walks the one range
 * where the running sum passes u * total.
 *
 * Weight sums are integers, w * 2^Q rounded, with Q as large as a bound
 * on the row's weight sum (taken in the first pass) lets the sum fit 64
 * bits: exact, so sums in any order, shared-memory atomics included, give
 * the same result, run after run. Each weight rounds by at most 2^-Q-1,
 * so a sum of n weights is off by at most n * 2^-62 times the row's weight
 * sum, less than the CPU's sequential double sums may be
 * (docs/api.md#default-mode lets sums associate differently).
 *
 * A constrained row reads the tokens its mask leaves out as -inf in every
 * load (its logits stay the model's); an unconstrained row reads no mask.
 *
 * A row that asks for log-probabilities gets gptoss_logprobs' values: the
 * log-sum-exp in double (summed in another order than the CPU's), and the
 * top ranks found by the same radix selection as top_k. */
#include "device.h"
#include "../contract/launchers.h"
#include "../src/core/counter_rng.h"
#include "../src/core/course_math.h"
#include "sample_adjust.h"

#include <limits.h>

namespace {

constexpr int THREADS = 512;
constexpr int MAX_WARPS = THREADS / 32; /* warpSize is 32 (NVIDIA) or 64 (AMD) */
constexpr int UNROLL = 8;               /* loads in flight per thread in a sweep */
constexpr int RADIX = 256;
/* Copies of each histogram bin, picked by thread: hot bins (most logits
 * share their top byte) would otherwise serialise a warp's atomics. */
constexpr int COPIES = 8;
constexpr int RANGES_PER_WARP = 8;
constexpr int MAX_RANGES = MAX_WARPS * RANGES_PER_WARP;
static_assert(THREADS >= RADIX && THREADS >= MAX_RANGES, "one thread per bin and per range");

struct Shared {
    /* bin d of copy c at d * COPIES + c, so the copies of a bin sit in different banks */
    uint32_t count[RADIX * COPIES], sum_lo[RADIX * COPIES], sum_hi[RADIX * COPIES];
    uint64_t slot64[MAX_WARPS];
    double slotd[MAX_WARPS];
    int slot32[MAX_WARPS];
    float slotf[MAX_WARPS];
    uint64_t range_sum[MAX_RANGES];
    int range_last[MAX_RANGES];
    int bin, range;
    uint64_t bin_count, bin_count_before, bin_sum_before, range_before;
    float replaced[GPTOSS_MAX_LOGIT_BIAS]; /* the logits the row's bias changed */
    uint64_t found[GPTOSS_MAX_LOGPROBS];   /* the rank keys of the top logprobs */
    int n_found;
};

struct Row {
    const float *x;
    const uint32_t *mask; /* the tokens it allows, or nullptr: all */
    int n, id_bytes; /* bytes of the reversed id that can differ */
    float m, t;      /* the maximum logit, the temperature */
    double scale;    /* 2^Q */

    /* larger key = better rank; equal logits (-0 and +0 too) rank by lower id */
    __device__ uint64_t key(int i, float v) const {
        uint32_t b = __float_as_uint(v);
        b = b == 0x80000000u ? 0u : b;
        uint32_t up = b & 0x80000000u ? ~b : b | 0x80000000u;
        return (uint64_t)up << 32 | (uint32_t)(n - 1 - i);
    }
    __device__ float weight(float v) const { return gptoss_expf((v - m) / t); }
    /* w has 24 significant bits, so w * 2^Q is exact and only rint rounds */
    __device__ uint64_t fixed(float w) const { return (uint64_t)rint((double)w * scale); }
};

/* Visits x[i] (gptoss_masked_logit) for i = begin + first, + stride, ... < end,
 * issuing UNROLL loads before using them. Each thread sees its ids in increasing order. */
template <class F>
__device__ void sweep(const float *x, const uint32_t *mask, int begin, int end, int first, int stride, F f) {
    for (int b = begin + first; b < end; b += stride * UNROLL) {
        float v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            v[u] = u * stride < end - b ? gptoss_masked_logit(x, mask, b + u * stride) : 0.0f;
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            if (u * stride < end - b)
                f(b + u * stride, v[u]);
    }
}

/* the sum of v over the threads before this one; *total gets the block's */
__device__ uint64_t block_scan(uint64_t v, uint64_t *total, uint64_t *slots) {
    int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    uint64_t incl = warp_inclusive_sum(v);
    if (lane == warpSize - 1)
        slots[warp] = incl;
    __syncthreads();
    uint64_t before = 0, all = 0;
    for (int w = 0; w < (int)(blockDim.x / warpSize); w++) {
        before += w < warp ? slots[w] : 0;
        all += slots[w];
    }
    __syncthreads();
    *total = all;
    return before + incl - v;
}

__device__ uint64_t add(uint64_t a, uint64_t b) { return a + b; }

/* a 64-bit add from two native 32-bit atomics (a 64-bit one is a
 * compare-and-swap loop on NVIDIA), the carry read off the low word */
__device__ void add_wide(uint32_t *lo, uint32_t *hi, uint64_t v) {
    uint32_t low = (uint32_t)v, high = (uint32_t)(v >> 32);
    if (low) {
        uint32_t old = atomicAdd(lo, low);
        high += (uint32_t)(old + low) < low;
    }
    if (high)
        atomicAdd(hi, high);
}

/* The least key of a rank prefix among the candidates (key >= floor): the
 * first k ranks (BY_SUM false), or the shortest prefix whose weight reaches
 * top_p times the candidates' (BY_SUM true). Returns a bound T such that the
 * prefix is the candidates with key >= T. Each level histograms one digit
 * of the keys that share the digits fixed so far and keeps the bin holding
 * the last rank of the prefix; it stops once that rank is the bin's last. */
template <bool BY_SUM>
__device__ uint64_t radix_cut(Shared &sh, const Row &r, uint64_t floor, uint64_t k, double top_p) {
    const int tid = threadIdx.x, copy = tid % COPIES;
    uint64_t prefix = 0, mask = 0, count_above = 0, sum_above = 0;
    double goal = 0;
    for (int level = 0;; level++) {
        /* the logit's four bytes, then the id's bytes that can differ */
        int shift = level < 4 ? 56 - 8 * level : 8 * (r.id_bytes - 1 - (level - 4));
        for (int j = tid; j < RADIX * COPIES; j += blockDim.x)
            sh.count[j] = sh.sum_lo[j] = sh.sum_hi[j] = 0;
        __syncthreads();
        sweep(r.x, r.mask, 0, r.n, tid, blockDim.x, [&](int i, float v) {
            uint64_t key = r.key(i, v);
            if (key < floor || (key & mask) != prefix)
                return;
            int at = (int)(key >> shift & 0xFF) * COPIES + copy;
            atomicAdd(&sh.count[at], 1u);
            if (BY_SUM)
                add_wide(&sh.sum_lo[at], &sh.sum_hi[at], r.fixed(r.weight(v)));
        });
        __syncthreads();
        /* thread t holds bin 255 - t, so the scans run from the best rank down */
        uint64_t c = 0, s = 0;
        if (tid < RADIX)
            for (int j = (RADIX - 1 - tid) * COPIES; j < (RADIX - tid) * COPIES; j++) {
                c += sh.count[j];
                s += (uint64_t)sh.sum_hi[j] << 32 | sh.sum_lo[j];
            }
        uint64_t c_all, s_all = 0;
        uint64_t c_before = block_scan(c, &c_all, sh.slot64);
        uint64_t s_before = BY_SUM ? block_scan(s, &s_all, sh.slot64) : 0;
        bool here;
        if (BY_SUM) {
            if (level == 0)
                goal = top_p * (double)s_all;
            here = (double)(sum_above + s_before) < goal && (double)(sum_above + s_before + s) >= goal;
        } else {
            here = count_above + c_before < k && k <= count_above + c_before + c;
        }
        if (tid < RADIX && here) {
            sh.bin = RADIX - 1 - tid;
            sh.bin_count = c;
            sh.bin_count_before = c_before;
            sh.bin_sum_before = s_before;
        }
        __syncthreads();
        prefix |= (uint64_t)sh.bin << shift;
        mask |= (uint64_t)0xFF << shift;
        count_above += sh.bin_count_before;
        sum_above += sh.bin_sum_before;
        /* the exact sums guarantee one bin per level, and the last level's
         * bins hold one key each */
        if (BY_SUM ? sh.bin_count == 1 : count_above + sh.bin_count == k)
            return prefix;
    }
}

/* The row's log-probabilities into out as gptoss_logprobs computes them,
 * token drawn (every thread calls this, r.m the row's maximum): the
 * chosen token's and the k best ranks' (logit desc, id asc). */
__device__ void write_logprobs(Shared &sh, const Row &r, int k, int token, gptoss_row_logprobs *out) {
    const int tid = threadIdx.x;
    __syncthreads(); /* the draw is done with sh */
    double sum = 0;
    sweep(r.x, r.mask, 0, r.n, tid, blockDim.x, [&](int, float v) { sum += exp((double)v - (double)r.m); });
    const double lse = (double)r.m + log(block_all(sum, op_add(), sh.slotd));
    k = k < r.n ? k : r.n;
    const uint64_t cut = k > 0 && k < r.n ? radix_cut<false>(sh, r, 0, (uint64_t)k, 0) : 0;
    if (tid == 0)
        sh.n_found = 0;
    __syncthreads();
    if (k > 0)
        sweep(r.x, r.mask, 0, r.n, tid, blockDim.x, [&](int i, float v) {
            uint64_t key = r.key(i, v);
            if (key >= cut)
                sh.found[atomicAdd(&sh.n_found, 1)] = key;
        });
    __syncthreads();
    if (tid != 0)
        return;
    for (int a = 1; a < k; a++) { /* at most 20 keys: insertion, best first */
        uint64_t key = sh.found[a];
        int b = a;
        for (; b > 0 && sh.found[b - 1] < key; b--)
            sh.found[b] = sh.found[b - 1];
        sh.found[b] = key;
    }
    for (int j = 0; j < k; j++) {
        int id = r.n - 1 - (int)(uint32_t)sh.found[j];
        out->top_id[j] = id;
        out->top_logprob[j] = (double)r.x[id] - lse;
    }
    out->n_top = k;
    out->logprob = (double)r.x[token] - lse;
}

/* The thread's share of the first pass over the row: its first maximum,
 * its flags (1: a NaN or +inf, 2: a logit above -inf) and its sum of
 * exp((v - own_max) / t), taken online: only a bound for Q */
__device__ __forceinline__ void scan_row(const float *x, const uint32_t *mask, int n, float t, float &top, int &top_i,
                                         int &flags, float &own_max, float &own_sum) {
    sweep(x, mask, 0, n, threadIdx.x, blockDim.x, [&](int i, float v) {
        take_better(top, top_i, v, i);
        flags |= (v != v || v == INFINITY) | (v != -INFINITY) << 1;
        if (t > 0 && v > -INFINITY) {
            if (v > own_max) {
                own_sum = own_sum * __expf((own_max - v) / t) + 1.0f;
                own_max = v;
            } else {
                own_sum += __expf((v - own_max) / t);
            }
        }
    });
}

/* The filters' bound, filtered rows keeping key >= it (0 where no filter
 * applies): top_k, then top_p among what top_k kept, then min_p. The CPU
 * trims the prefix from its end while w < min_p: the new last rank is the
 * lowest kept one with w >= min_p (the first rank has w = 1). */
__device__ __forceinline__ uint64_t filter_cut(Shared &sh, const Row &r, const gptoss_row_sampling &p, bool have_k,
                                               bool have_p) {
    uint64_t cut = 0;
    if (have_k)
        cut = radix_cut<false>(sh, r, 0, (uint64_t)p.top_k, 0);
    if (have_p) {
        uint64_t by_p = radix_cut<true>(sh, r, cut, 0, p.top_p);
        cut = by_p > cut ? by_p : cut;
    }
    if ((have_k || have_p) && p.min_p > 0) {
        uint64_t least = UINT64_MAX;
        sweep(r.x, r.mask, 0, r.n, threadIdx.x, blockDim.x, [&](int i, float v) {
            uint64_t key = r.key(i, v);
            if (key >= cut && key < least && (double)r.weight(v) >= p.min_p)
                least = key;
        });
        cut = block_all(least, op_min(), sh.slot64);
    }
    return cut;
}

/* A kept token's weight, 0 for the others: filtered rows keep the ranks
 * from cut on, the others every token with w >= min_p. */
struct kept_weight {
    const Row &r;
    bool filtered;
    uint64_t cut;
    double min_p;
    __device__ float operator()(int i, float v) const {
        if (filtered)
            return r.key(i, v) >= cut ? r.weight(v) : 0.0f;
        float w = r.weight(v);
        return (double)w >= min_p ? w : 0.0f;
    }
};

/* Each range of len ids, warp w taking ranges 8 w .. 8 w + 7: its kept
 * weight's sum and its last kept id with w > 0, into sh */
__device__ __forceinline__ void sum_ranges(Shared &sh, const Row &r, const kept_weight &kept_w, int len) {
    const int tid = threadIdx.x, warp = tid / warpSize, lane = tid % warpSize, n = r.n;
    for (int q = warp * RANGES_PER_WARP; q < (warp + 1) * RANGES_PER_WARP; q++) {
        int begin = q * len < n ? q * len : n, end = n - begin < len ? n : begin + len;
        int last = -1;
        uint64_t sum = 0;
        sweep(r.x, r.mask, begin, end, lane, warpSize, [&](int i, float v) {
            float w = kept_w(i, v);
            if (w > 0) {
                sum += r.fixed(w);
                last = i;
            }
        });
        sum = warp_all(sum, add);
        last = warp_all(last, op_max());
        if (lane == 0) {
            sh.range_sum[q] = sum;
            sh.range_last[q] = last;
        }
    }
}

/* The token of range sh.range (of len ids), whose kept weights before it
 * sum to sh.range_before: the range's ids in contiguous pieces, one per
 * thread, and the first id where the running sum passes target. The
 * range's sum passes target exactly, so some thread hits. */
__device__ __forceinline__ int walk_range(Shared &sh, const Row &r, const kept_weight &kept_w, int len,
                                          double target) {
    const int tid = threadIdx.x, n = r.n;
    int begin = sh.range * len, end = n - begin < len ? n : begin + len;
    int piece = (end - begin + (int)blockDim.x - 1) / (int)blockDim.x;
    int a = end - begin < tid * piece ? end : begin + tid * piece;
    int b = end - a < piece ? end : a + piece;
    uint64_t own = 0, unused;
    for (int i = a; i < b; i++)
        own += r.fixed(kept_w(i, gptoss_masked_logit(r.x, r.mask, i)));
    uint64_t run = sh.range_before + block_scan(own, &unused, sh.slot64);
    int hit = INT_MAX;
    for (int i = a; i < b; i++) {
        run += r.fixed(kept_w(i, gptoss_masked_logit(r.x, r.mask, i)));
        if ((double)run > target) {
            hit = i;
            break;
        }
    }
    return block_all(hit, op_min(), sh.slot32);
}

/* The draw of a row that is neither greedy nor invalid: the filters'
 * bound, the kept weights summed over ranges of ids, the range where the
 * running sum passes u * total, and the id within it */
__device__ __forceinline__ int draw_token(Shared &sh, Row &r, const gptoss_row_sampling &p, float own_max,
                                          float own_sum) {
    const int tid = threadIdx.x, n = r.n;
    /* 2^Q: twice the estimate exceeds the weight sum whatever __expf's and
     * the float sums' errors, and 2^Q * bound < 2^63 leaves room for the
     * rounding of each weight. The top weight is 1, so Q <= 61. */
    double bound = 2 * block_all((double)own_sum * __expf((own_max - r.m) / r.t), op_add(), sh.slotd);
    int bits;
    frexp(bound, &bits);
    r.scale = (double)(1ull << (63 - bits));
    const bool have_k = p.top_k > 0 && p.top_k < n, have_p = p.top_p > 0 && p.top_p < 1;
    const bool filtered = have_k || have_p;
    const kept_weight kept_w{r, filtered, filter_cut(sh, r, p, have_k, have_p), p.min_p};
    const int warps = blockDim.x / warpSize, ranges = warps * RANGES_PER_WARP, len = (n + ranges - 1) / ranges;
    sum_ranges(sh, r, kept_w, len);
    if (tid == 0)
        sh.range = -1;
    __syncthreads();
    uint64_t mine = tid < ranges ? sh.range_sum[tid] : 0, total;
    uint64_t before = block_scan(mine, &total, sh.slot64);
    int last = block_all(tid < ranges ? sh.range_last[tid] : -1, op_max(), sh.slot32);
    double target = gptoss_sample_uniform(p.seed, p.position) * (double)total;
    if (tid < ranges && (double)before <= target && (double)(before + mine) > target) {
        sh.range = tid;
        sh.range_before = before;
    }
    __syncthreads();
    if (sh.range < 0)
        return last; /* rounding left no crossing: the last kept id with w > 0 */
    return walk_range(sh, r, kept_w, len, target);
}

} // namespace

__global__ __launch_bounds__(THREADS) void sample_kernel(float *logits, int n, const gptoss_row_sampling *params,
                                                         const gptoss_logit_bias *bias, const uint32_t *masks,
                                                         gptoss_drawn_counts drawn, int *tokens,
                                                         gptoss_row_logprobs *logprobs) {
    __shared__ Shared sh;
    const int tid = threadIdx.x;
    float *x = logits + (size_t)blockIdx.x * n;
    const gptoss_row_sampling p = params[blockIdx.x];
    const uint32_t *mask = p.mask ? masks + (size_t)(p.mask - 1) * gptoss_mask_words(n) : nullptr;
    const gptoss_logit_bias *b = bias + (size_t)p.slot * GPTOSS_MAX_LOGIT_BIAS;
    apply_bias(sh.replaced, x, b, p.n_bias);
    __syncthreads();
    if (p.penalize) { /* the same for the whole block */
        apply_penalties(x, drawn, p);
        __syncthreads();
    }

    float top = -INFINITY;
    int top_i = INT_MAX, flags = 0;
    float own_max = -INFINITY, own_sum = 0.0f;
    scan_row(x, mask, n, p.temperature, top, top_i, flags, own_max, own_sum);
    warp_best(top, top_i); /* the block's first maximum, in every thread */
    if (tid % warpSize == 0) {
        sh.slotf[tid / warpSize] = top;
        sh.slot32[tid / warpSize] = top_i;
    }
    __syncthreads();
    for (int w = 0; w < (int)(blockDim.x / warpSize); w++)
        take_better(top, top_i, sh.slotf[w], sh.slot32[w]);
    __syncthreads();
    flags = block_all(flags, op_or(), sh.slot32);
    const int id_bytes = n - 1 < (1 << 8) ? 1 : n - 1 < (1 << 16) ? 2 : n - 1 < (1 << 24) ? 3 : 4;
    Row r{x, mask, n, id_bytes, top, p.temperature, 0.0};
    int token;
    if (flags != 2) /* a NaN or +inf (-1), or nothing above -inf (-2): no token, greedy or not (as the CPU) */
        token = flags & 1 ? -1 : -2;
    else if (r.t == 0)
        token = top_i;
    else
        token = draw_token(sh, r, p, own_max, own_sum);
    if (logprobs && p.want_logprobs && token >= 0) /* token is the same in every thread */
        write_logprobs(sh, r, p.top_logprobs, token, &logprobs[blockIdx.x]);
    else if (logprobs && tid == 0)
        logprobs[blockIdx.x].n_top = -1;
    __syncthreads();
    if (p.penalize) { /* before the bias's: the penalties replaced biased logits */
        restore_and_count(sh.slot32, x, drawn, p, token);
        __syncthreads();
    }
    restore_bias(sh.replaced, x, b, p.n_bias);
    if (tid == 0)
        tokens[blockIdx.x] = token;
}

hipError_t gptoss_launch_sample(float *logits, int rows, int vocab, const gptoss_row_sampling *params,
                                const gptoss_logit_bias *bias, const uint32_t *masks, gptoss_drawn_counts drawn,
                                int *tokens, gptoss_row_logprobs *logprobs, hipStream_t stream) {
    /* the bound keeps every index of a sweep within int */
    if (rows < 0 || vocab < 1 || vocab > (1 << 30))
        return hipErrorInvalidValue;
    if (rows == 0)
        return hipSuccess;
    hipLaunchKernelGGL(sample_kernel, dim3(rows), dim3(THREADS), 0, stream, logits, vocab, params, bias, masks,
                       drawn, tokens, logprobs);
    return hipGetLastError();
}
