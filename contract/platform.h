/* The HIP runtime on every platform, for the kernels and the GPU engine
 * alike: include this instead of <hip/hip_runtime.h>.
 *
 * On AMD it is that header. On NVIDIA, Debian's HIP 5.2 headers wrap CUDA
 * runtime calls that CUDA 12 and 13 removed or re-signed, and every wrapper
 * is compiled on inclusion, used or not. Before including HIP we map the
 * old spellings those wrappers use onto today's API (or onto a stub that
 * says "not supported"), and afterwards we take the mappings away again so
 * our own code sees the real CUDA names. What changes for HIP users on
 * NVIDIA: texture references and multi-device cooperative launches report
 * hipErrorNotSupported; hipGetDeviceProperties leaves the clock, compute
 * mode and timeout fields at 0 (query them as attributes); graph edge APIs
 * use default edge data. */
#ifndef GPTOSS_CONTRACT_PLATFORM_H
#define GPTOSS_CONTRACT_PLATFORM_H

#if !defined(__HIP_PLATFORM_NVIDIA__)
#include <hip/hip_runtime.h>
#else

#include <cuda.h>
#include <cuda_runtime.h>

#if CUDART_VERSION >= 12000
template <class... Args>
static inline cudaError_t gptoss_cuda_removed(Args &&...) {
    return cudaErrorNotSupported;
}
template <class T, int D = 1, enum cudaTextureReadMode M = cudaReadModeElementType>
struct gptoss_removed_texture {};
#define cudaBindTexture(...) gptoss_cuda_removed(__VA_ARGS__)
#define cudaBindTexture2D(...) gptoss_cuda_removed(__VA_ARGS__)
#define cudaBindTextureToArray(...) gptoss_cuda_removed(__VA_ARGS__)
#define cudaUnbindTexture(...) gptoss_cuda_removed(__VA_ARGS__)
#define cudaGetTextureAlignmentOffset(...) gptoss_cuda_removed(__VA_ARGS__)
#define texture gptoss_removed_texture
#endif

#if CUDART_VERSION >= 13000
#define cudaLaunchCooperativeKernelMultiDevice(...) gptoss_cuda_removed(__VA_ARGS__)
#define cudaDevAttrCooperativeMultiDeviceLaunch ((enum cudaDeviceAttr)96)

/* fields that left cudaDeviceProp; HIP's property copy still reads them */
struct gptoss_cuda_device_prop : cudaDeviceProp {
    int clockRate = 0;
    int memoryClockRate = 0;
    int computeMode = 0;
    int kernelExecTimeoutEnabled = 0;
    int cooperativeMultiDeviceLaunch = 0;
};
#define cudaDeviceProp gptoss_cuda_device_prop

static inline cudaMemLocation gptoss_cuda_location(int device) {
    cudaMemLocation where;
    where.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    where.id = device == cudaCpuDeviceId ? 0 : device;
    return where;
}
#define cudaMemAdvise(ptr, bytes, advice, dev) \
    cudaMemAdvise(ptr, bytes, advice, gptoss_cuda_location(dev))
#define cudaMemPrefetchAsync(ptr, bytes, dev, stream) \
    cudaMemPrefetchAsync(ptr, bytes, gptoss_cuda_location(dev), 0, stream)

#define cudaGraphAddDependencies(g, from, to, n) cudaGraphAddDependencies(g, from, to, NULL, n)
#define cudaGraphRemoveDependencies(g, from, to, n) cudaGraphRemoveDependencies(g, from, to, NULL, n)
#define cudaGraphGetEdges(g, from, to, n) cudaGraphGetEdges(g, from, to, NULL, n)
#define cudaGraphNodeGetDependencies(node, deps, n) cudaGraphNodeGetDependencies(node, deps, NULL, n)
#define cudaGraphNodeGetDependentNodes(node, deps, n) \
    cudaGraphNodeGetDependentNodes(node, deps, NULL, n)
#define cudaStreamGetCaptureInfo_v2(s, status, id, graph, deps, n) \
    cudaStreamGetCaptureInfo(s, status, id, graph, deps, NULL, n)
#define cudaStreamUpdateCaptureDependencies(s, deps, n, flags) \
    cudaStreamUpdateCaptureDependencies(s, deps, NULL, n, flags)

#undef cuCtxCreate
#define cuCtxCreate(ctx, flags, dev) cuCtxCreate_v4(ctx, NULL, flags, dev)
#endif

#include <hip/hip_runtime.h>

#if CUDART_VERSION >= 12000
#undef cudaBindTexture
#undef cudaBindTexture2D
#undef cudaBindTextureToArray
#undef cudaUnbindTexture
#undef cudaGetTextureAlignmentOffset
#undef texture
#endif
#if CUDART_VERSION >= 13000
#undef cudaLaunchCooperativeKernelMultiDevice
#undef cudaDevAttrCooperativeMultiDeviceLaunch
#undef cudaDeviceProp
#undef cudaMemAdvise
#undef cudaMemPrefetchAsync
#undef cudaGraphAddDependencies
#undef cudaGraphRemoveDependencies
#undef cudaGraphGetEdges
#undef cudaGraphNodeGetDependencies
#undef cudaGraphNodeGetDependentNodes
#undef cudaStreamGetCaptureInfo_v2
#undef cudaStreamUpdateCaptureDependencies
#undef cuCtxCreate
#define cuCtxCreate cuCtxCreate_v4
#endif

#endif /* __HIP_PLATFORM_NVIDIA__ */
#endif
