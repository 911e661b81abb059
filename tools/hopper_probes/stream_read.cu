// How fast warps can stream weights into a multiprocessor, the question a
// GEMV at one row a step asks: 1 GiB read by one-warp blocks through a ring
// of shared-memory stages filled by 1D bulk copies (cp.async.bulk, by copy
// size, copies a stage and warps a multiprocessor) or by 2D tensor copies of
// 16-row boxes of a [rows][4096] bf16 matrix (as a GEMV's 16-output band
// comes), against plain 16-byte register loads by warps a multiprocessor;
// then the latency of a chain of dependent mma.sync m16n8k16 (bf16, fp32
// sums) and its throughput with more chains and warps, the rate at which one
// output's single sum can advance. Each read figure is GB/s over 5 launches.
// The barriers and copies are the engine's own (kernels/hopper.h).
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o stream_read stream_read.cu
//   ./stream_read
#include "../../kernels/hopper.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#define CK(x)                                                                                                     \
    do {                                                                                                          \
        cudaError_t e_ = (x);                                                                                     \
        if (e_ != cudaSuccess) {                                                                                  \
            printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                                     \
            return 1;                                                                                             \
        }                                                                                                         \
    } while (0)

static const int SMEM_MAX = 232448; // the most a block takes on sm_90

// A warp's share of the ring loop: stage j's copies issued by issue(j), the
// slot read (one word a lane) once they land, then refilled with stage j + stages.
template <class Issue>
__device__ void ring(uint64_t *bar, const uint8_t *slots, int stage_bytes, int stages, int count, Issue issue,
                     unsigned *sink) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++)
            mbar_init(&bar[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    for (int s = 0; s < stages && s < count; s++)
        issue(s);
    unsigned acc = 0;
    for (int j = 0; j < count; j++) {
        mbar_wait(&bar[j % stages], (j / stages) & 1);
        acc += ((const unsigned *)(slots + (j % stages) * stage_bytes))[threadIdx.x];
        __syncwarp();
        if (j + stages < count)
            issue(j + stages);
    }
    if (acc == 0x9e3779b9u)
        *sink = acc; // keeps the reads
}

// 1D: the warp's contiguous share, stages of `copies` copies of `size` bytes
__global__ void __launch_bounds__(32) bulk_read(const uint8_t *src, size_t share, int size, int copies, int stages,
                                                unsigned *sink) {
    extern __shared__ __align__(128) uint8_t bulk_buf[];
    uint64_t *bar = (uint64_t *)bulk_buf;
    uint8_t *slots = bulk_buf + 256;
    const int stage_bytes = size * copies;
    const uint8_t *from = src + blockIdx.x * share;
    ring(bar, slots, stage_bytes, stages, (int)(share / stage_bytes), [&](int j) {
        uint64_t *b = &bar[j % stages];
        if (threadIdx.x == 0) {
            mbar_expect_tx(b, stage_bytes);
            mbar_arrive(b);
        }
        __syncwarp();
        for (int c = threadIdx.x; c < copies; c += 32)
            bulk_copy(slots + (j % stages) * stage_bytes + c * size, from + (size_t)j * stage_bytes + (size_t)c * size,
                      size, b);
    }, sink);
}

// 2D: the warp's bands of 16 rows, each in boxes of box_k x 16
__global__ void __launch_bounds__(32) tensor_read(const __grid_constant__ CUtensorMap map, int bands, int k, int box_k,
                                                  int stages, unsigned *sink) {
    extern __shared__ __align__(1024) uint8_t tensor_buf[];
    uint64_t *bar = (uint64_t *)tensor_buf;
    uint8_t *slots = tensor_buf + 1024;
    const int stage_bytes = box_k * 2 * 16, per_band = k / box_k;
    ring(bar, slots, stage_bytes, stages, bands * per_band, [&](int j) {
        if (threadIdx.x != 0)
            return;
        uint64_t *b = &bar[j % stages];
        mbar_expect_tx(b, stage_bytes);
        mbar_arrive(b);
        const int band = blockIdx.x * bands + j / per_band;
        tma_2d(slots + (j % stages) * stage_bytes, &map, (j % per_band) * box_k, band * 16, b);
    }, sink);
}

// register loads: each warp its contiguous share, DEPTH 16-byte loads a lane in flight
template <int DEPTH> __global__ void register_read(const uint4 *src, size_t share, unsigned *sink) {
    const int warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint4 *from = src + warp * share;
    unsigned acc = 0;
    for (size_t i = lane; i + 32 * (DEPTH - 1) < share; i += 32 * DEPTH) {
        uint4 v[DEPTH];
#pragma unroll
        for (int d = 0; d < DEPTH; d++)
            v[d] = __ldg(from + i + 32 * d);
#pragma unroll
        for (int d = 0; d < DEPTH; d++)
            acc += v[d].x ^ v[d].w;
    }
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

// CHAINS independent accumulators, each fed 1000 dependent mma.sync
template <int CHAINS> __global__ void mma_chain(float *out, long long *cycles) {
    float acc[CHAINS][4] = {};
    const uint32_t a = threadIdx.x * 0x00010001u, b = threadIdx.x * 0x00030003u;
    const long long t0 = clock64();
    for (int i = 0; i < 1000; i++)
#pragma unroll
        for (int c = 0; c < CHAINS; c++)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                         "{%0,%1,%2,%3};"
                         : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
                         : "r"(a), "r"(b), "r"(a), "r"(b), "r"(a), "r"(b));
    const long long t1 = clock64();
    float s = 0.0f;
    for (int c = 0; c < CHAINS; c++)
        s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *cycles = t1 - t0;
}

typedef CUresult (*encode_t)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                             const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                             CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

int main() {
    const size_t total = (size_t)1 << 30;
    uint8_t *src;
    unsigned *sink;
    float *out;
    long long *cycles;
    int sms;
    CK(cudaMalloc(&src, total));
    CK(cudaMemset(src, 1, total));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMalloc(&out, 1 << 20));
    CK(cudaMalloc(&cycles, 8));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    auto gbs = [&](size_t bytes, auto launch) {
        launch();
        cudaEventRecord(e0);
        for (int r = 0; r < 5; r++)
            launch();
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        return cudaGetLastError() == cudaSuccess ? bytes / (ms / 5) / 1e6 : -1.0;
    };

    printf("1D bulk copies\n%9s %7s %7s %7s %9s\n", "warps/SM", "bytes", "copies", "stages", "GB/s");
    CK(cudaFuncSetAttribute(bulk_read, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_MAX));
    for (int per_sm : {1, 2, 4, 8, 16})
        for (int size : {256, 1024, 4096, 16384})
            for (int copies : {1, 32}) {
                const int stage = size * copies, budget = (SMEM_MAX / per_sm - 1024 - 256) & ~127;
                if (stage > budget / 2)
                    continue;
                const int stages = budget / stage > 32 ? 32 : budget / stage, warps = sms * per_sm;
                const size_t share = total / warps / stage * stage;
                double r = gbs(share * warps, [&] {
                    bulk_read<<<warps, 32, 256 + stages * stage>>>(src, share, size, copies, stages, sink);
                });
                printf("%9d %7d %7d %7d %9.0f\n", per_sm, size, copies, stages, r);
            }

    printf("2D tensor copies of a [rows][4096] bf16 matrix, boxes of 16 rows\n%9s %7s %7s %9s\n", "warps/SM", "box k",
           "stages", "GB/s");
    encode_t encode = nullptr;
    cudaDriverEntryPointQueryResult found;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &found));
    CK(cudaFuncSetAttribute(tensor_read, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_MAX));
    const int k = 4096;
    const long rows = (long)(total / (k * 2));
    for (int box_k : {64, 256})
        for (int per_sm : {1, 2, 4, 8}) {
            CUtensorMap map;
            cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)k * 2};
            cuuint32_t box[2] = {(cuuint32_t)box_k, 16}, unit[2] = {1, 1};
            if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, src, dims, strides, box, unit,
                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
                printf("cuTensorMapEncodeTiled failed\n");
                return 1;
            }
            const int stage = box_k * 32, budget = SMEM_MAX / per_sm - 2048;
            const int stages = budget / stage > 32 ? 32 : budget / stage, warps = sms * per_sm;
            const int bands = (int)(rows / 16 / warps);
            double r = gbs((size_t)bands * warps * 16 * k * 2, [&] {
                tensor_read<<<warps, 32, 1024 + stages * stage>>>(map, bands, k, box_k, stages, sink);
            });
            printf("%9d %7d %7d %9.0f\n", per_sm, box_k, stages, r);
        }

    printf("16-byte register loads\n%9s %7s %9s\n", "warps/SM", "depth", "GB/s");
    for (int per_sm : {2, 4, 8, 16, 32}) {
        const int warps = sms * per_sm;
        const size_t share = total / 16 / warps;
        printf("%9d %7d %9.0f\n", per_sm, 4, gbs(share * 16 * warps, [&] {
                   register_read<4><<<sms, 32 * per_sm>>>((const uint4 *)src, share, sink);
               }));
        printf("%9d %7d %9.0f\n", per_sm, 16, gbs(share * 16 * warps, [&] {
                   register_read<16><<<sms, 32 * per_sm>>>((const uint4 *)src, share, sink);
               }));
    }

    printf("mma.sync m16n8k16 bf16 chains (cycles per round of one mma a chain)\n");
    long long c = 0;
    auto chain = [&](const char *name, auto kernel, int blocks, int threads) {
        kernel<<<blocks, threads>>>(out, cycles);
        kernel<<<blocks, threads>>>(out, cycles);
        cudaMemcpy(&c, cycles, 8, cudaMemcpyDeviceToHost);
        printf("  %-34s %6.1f\n", name, c / 1000.0);
    };
    chain("1 chain, 1 warp", mma_chain<1>, 1, 32);
    chain("4 chains, 1 warp", mma_chain<4>, 1, 32);
    chain("8 chains, 1 warp", mma_chain<8>, 1, 32);
    chain("4 chains, 8 warps a multiprocessor", mma_chain<4>, sms, 256);
    CK(cudaDeviceSynchronize());
    return 0;
}
