/* sm_90a's asynchronous copies and barriers for the Hopper GEMM
 * (gemm_wgmma.h) and the probes in tools/hopper_probes: mbarriers,
 * 1D bulk copies and 2D TMA loads that complete on them, the fence that
 * hands threads' shared-memory stores to wgmma, a warpgroup's registers
 * (setmaxnreg) within its launch's, and the shared memory
 * descriptor of a 128-byte-swizzled K-major wgmma operand. Declared
 * for the host pass and for sm_90a device code only: other targets'
 * device code must not see these instructions. */
#ifndef GPTOSS_KERNELS_HOPPER_H
#define GPTOSS_KERNELS_HOPPER_H

#include <stdint.h>

/* the registers a thread that a launch of THREADS a block, one block an SM,
 * is given (the kernels' role constants, read on every target) */
template <int THREADS> constexpr int launch_registers = 65536 / THREADS / 8 * 8;

#if defined(__HIP_PLATFORM_NVIDIA__) || defined(__CUDACC__)
#include <cuda.h>

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace {

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, uint32_t bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n}" ::"r"(smem_addr(b)),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}
__device__ __forceinline__ void tma_2d(void *dst, const CUtensorMap *map, int x, int y, uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
                     "r"(smem_addr(dst)),
                 "l"(map), "r"(x), "r"(y), "r"(smem_addr(bar))
                 : "memory");
}
/* A warpgroup's registers a thread, from the launch's LAUNCH to R. The
 * block's pool is what its launch was given (LAUNCH x threads): a raise
 * beyond what the other warpgroups released waits forever. */
template <int R, int LAUNCH> __device__ __forceinline__ void warpgroup_registers() {
    static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg takes 24 .. 256 in steps of 8");
    if constexpr (R < LAUNCH)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
    else if constexpr (R > LAUNCH)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
/* the thread's shared-memory stores made visible to the async proxy (wgmma's reads of its operands) */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* a K-major operand with the 128-byte swizzle: rows of 128 bytes, groups of 8 rows 1 KiB apart */
__device__ __forceinline__ uint64_t swizzled_desc(const void *p) {
    const uint64_t a = smem_addr(p);
    return ((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

} // namespace
#endif
#endif

#endif
