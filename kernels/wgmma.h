/* sm_90a's warpgroup matrix multiply for the Hopper GEMM (gemm_wgmma.h):
 * wgmma.mma_async m64 by n32 .. n128 by k16 with the A operand from
 * registers or from shared memory and B from shared memory, by descriptor
 * (hopper.h), and what keeps A's registers alive while an instruction group
 * is in flight.
 * Compiled only where __CUDA_ARCH_FEAT_SM90_ALL is defined (GPTOSS_WGMMA). */
#ifndef GPTOSS_KERNELS_WGMMA_H
#define GPTOSS_KERNELS_WGMMA_H

#include <stdint.h>

#include "../contract/platform.h"

#if defined(__HIP_PLATFORM_NVIDIA__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GPTOSS_WGMMA 1

namespace {

/* d += A B over one k16 step, m64 by n32 .. n128 (the tile's rows rounded
 * up to 32): `run` with A from registers, `run_ss` with A from shared
 * memory by descriptor; accumulator 4j + e is row group j's. */
#define WG_D4(i) "+f"(d[i]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define WG_D16(i) WG_D4(i), WG_D4((i) + 4), WG_D4((i) + 8), WG_D4((i) + 12)
#define WG_MMA(n) "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.bf16.bf16 "
#define WG_STRIP(...) __VA_ARGS__
template <int N> struct wg_mma;
/* one specialization per N: its accumulators' operands, their list, then
 * the operand lists after it of the register form and of the shared one */
#define WG_SPEC(n, D, DLIST, RS, SS)                                                                                  \
    template <> struct wg_mma<n> {                                                                                     \
        __device__ static __forceinline__ void run(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2,            \
                                                   uint32_t a3, uint64_t b) {                                        \
            asm volatile(WG_MMA(n) DLIST RS : WG_STRIP D : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));               \
        }                                                                                                              \
        __device__ static __forceinline__ void run_ss(float (&d)[64], uint64_t a, uint64_t b) {                      \
            asm volatile(WG_MMA(n) DLIST SS : WG_STRIP D : "l"(a), "l"(b));                                          \
        }                                                                                                              \
    };
WG_SPEC(32, (WG_D16(0)),
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}",
        ", {%16,%17,%18,%19}, %20, 1, 1, 1, 0;", ", %16, %17, 1, 1, 1, 0, 0;")
WG_SPEC(64, (WG_D16(0), WG_D16(16)),
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
        "%26,%27,%28,%29,%30,%31}",
        ", {%32,%33,%34,%35}, %36, 1, 1, 1, 0;", ", %32, %33, 1, 1, 1, 0, 0;")
WG_SPEC(96, (WG_D16(0), WG_D16(16), WG_D16(32)),
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
        "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}",
        ", {%48,%49,%50,%51}, %52, 1, 1, 1, 0;", ", %48, %49, 1, 1, 1, 0, 0;")
WG_SPEC(128, (WG_D16(0), WG_D16(16), WG_D16(32), WG_D16(48)),
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
        "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,"
        "%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}",
        ", {%64,%65,%66,%67}, %68, 1, 1, 1, 0;", ", %64, %65, 1, 1, 1, 0, 0;")
#undef WG_SPEC
#undef WG_STRIP
#undef WG_D4
#undef WG_D16
#undef WG_MMA

/* the instruction group's fence, commit, and the wait until at most N
 * groups are in flight */
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* keeps a's registers allocated up to here: wgmma reads them until its group completes */
__device__ __forceinline__ void wg_hold(uint4 (&a)[2]) {
    asm volatile("" : "+r"(a[0].x), "+r"(a[0].y), "+r"(a[0].z), "+r"(a[0].w), "+r"(a[1].x), "+r"(a[1].y),
                 "+r"(a[1].z), "+r"(a[1].w));
}

} // namespace

#endif

#endif
