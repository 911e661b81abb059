/* Programmatic dependent launch (NVIDIA sm_90 and later): a kernel launched
 * with programmatic stream serialization may start while the kernel before
 * it in the stream is still running, so that a step's chain of small
 * kernels does not drain the GPU between one and the next. The kernel's side:
 *  - pdl_wait() before its first read of anything an earlier kernel wrote
 *    (activations, the KV cache, routing and tile tables) and before its
 *    first write of anything an earlier kernel may still read. It returns
 *    once the previous grid has completed and its writes are visible.
 *    Weights, which no kernel of a step writes, may be loaded before it.
 *    Every thread that touches such memory waits itself, and no block
 *    exits before its wait, so a grid's completion implies that of the
 *    grids before it.
 *  - pdl_launch_dependents() once its main loop's loads are issued: the
 *    next kernel may then begin (a hint only; its own wait orders it).
 * Both are griddepcontrol in NVIDIA device code for sm_90 and later and
 * nothing elsewhere. A kernel launched without the attribute starts after
 * its predecessor has completed, so its wait finds no grid in flight and
 * returns at once, and its trigger releases no dependent: without the
 * attribute they change nothing. */
#ifndef GPTOSS_KERNELS_LAUNCH_H
#define GPTOSS_KERNELS_LAUNCH_H

#include <utility>

#include "../contract/platform.h"

#if defined(__HIP_PLATFORM_NVIDIA__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GPTOSS_PDL 1
#endif

__device__ __forceinline__ void pdl_wait() {
#if defined(GPTOSS_PDL)
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(GPTOSS_PDL)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* kernel<<<grid, block, shared, stream>>>(args...), with programmatic
 * stream serialization when asked (gptoss_gpu_shape.programmatic) on
 * NVIDIA; the launch's status, as hipGetLastError gives it after
 * hipLaunchKernelGGL. A kernel launched so must call pdl_wait(). */
template <class... Params, class... Args>
hipError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, hipStream_t stream,
                         bool programmatic, Args &&...args) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    if (programmatic) {
        cudaLaunchAttribute serialization = {};
        serialization.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        serialization.val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t config = {};
        config.gridDim = grid;
        config.blockDim = block;
        config.dynamicSmemBytes = shared;
        config.stream = stream;
        config.attrs = &serialization;
        config.numAttrs = 1;
        cudaError_t e = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
        hipError_t last = hipGetLastError(); /* cleared, as after any launch */
        return e != cudaSuccess ? hipCUDAErrorTohipError(e) : last;
    }
#else
    (void)programmatic;
#endif
    hipLaunchKernelGGL(kernel, grid, block, shared, stream, std::forward<Args>(args)...);
    return hipGetLastError();
}

/* Runs probe(flag) alone on the stream and returns the flag it wrote, 0
 * where it could not run: what the device code built for the stream's
 * device has (gemm.hip's Hopper GEMM, launch.hip's programmatic waits), which
 * only that code can say (an sm_90 GPU running code compiled from sm_80's
 * PTX has no griddepcontrol, whatever the GPU could do). */
inline int gptoss_device_flag(void (*probe)(int *), hipStream_t stream) {
    int *flag = nullptr, value = 0;
    if (hipMalloc(&flag, sizeof *flag) != hipSuccess)
        return 0;
    hipLaunchKernelGGL(probe, dim3(1), dim3(1), 0, stream, flag);
    if (hipGetLastError() != hipSuccess ||
        hipMemcpyAsync(&value, flag, sizeof value, hipMemcpyDeviceToHost, stream) != hipSuccess ||
        hipStreamSynchronize(stream) != hipSuccess)
        value = 0;
    (void)hipFree(flag);
    return value;
}

#endif
