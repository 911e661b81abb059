/* Device discovery and measurements through the HIP runtime (NVIDIA or
 * AMD). */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "../../contract/platform.h"

extern "C" const char *gptoss_hip_platform(void) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    return "nvidia";
#else
    return "amd";
#endif
}

extern "C" int gptoss_hip_device_count(void) {
    int n = 0;
    /* no driver or no GPU: the runtime reports an error, which means none */
    if (hipGetDeviceCount(&n) != hipSuccess) {
        (void)hipGetLastError();
        return 0;
    }
    return n;
}

extern "C" int gptoss_hip_device_info(int index, gptoss_device_info *out) {
    hipDeviceProp_t p;
    if (hipGetDeviceProperties(&p, index) != hipSuccess)
        return -1;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->memory = p.totalGlobalMem;
    out->warp = p.warpSize;
#if defined(__HIP_PLATFORM_NVIDIA__)
    snprintf(out->arch, sizeof out->arch, "sm_%d%d", p.major, p.minor);
#else
    snprintf(out->arch, sizeof out->arch, "%s", p.gcnArchName);
#endif
    return 0;
}

extern "C" gptoss_status gptoss_hip_device_free(int index, uint64_t *free_bytes, char *err) {
    size_t free_b = 0, total_b = 0;
    hipError_t e = hipSetDevice(index);
    if (e == hipSuccess)
        e = hipMemGetInfo(&free_b, &total_b);
    if (e != hipSuccess) {
        (void)hipGetLastError();
        return gptoss_fail(err, GPTOSS_E_DEVICE, "device %d: cannot read free memory: %s", index,
                           hipGetErrorString(e));
    }
    *free_bytes = free_b;
    return GPTOSS_OK;
}

extern "C" gptoss_status gptoss_hip_copy_bandwidth(int device, size_t bytes, double *out, char *err) {
    char *a = NULL, *b = NULL;
    hipEvent_t t0 = NULL, t1 = NULL;
    float ms = 0;
    const int reps = 20;
    hipError_t e = hipSetDevice(device);
    if (e == hipSuccess)
        e = hipMalloc((void **)&a, bytes);
    if (e == hipSuccess)
        e = hipMalloc((void **)&b, bytes);
    if (e == hipSuccess)
        e = hipMemset(a, 1, bytes);
    if (e == hipSuccess)
        e = hipEventCreate(&t0);
    if (e == hipSuccess)
        e = hipEventCreate(&t1);
    for (int i = 0; i < 3 && e == hipSuccess; i++) /* warm up */
        e = hipMemcpy(b, a, bytes, hipMemcpyDeviceToDevice);
    if (e == hipSuccess)
        e = hipEventRecord(t0, 0);
    for (int i = 0; i < reps && e == hipSuccess; i++)
        e = hipMemcpyAsync(b, a, bytes, hipMemcpyDeviceToDevice, 0);
    if (e == hipSuccess)
        e = hipEventRecord(t1, 0);
    if (e == hipSuccess)
        e = hipEventSynchronize(t1);
    if (e == hipSuccess)
        e = hipEventElapsedTime(&ms, t0, t1);
    if (a)
        (void)hipFree(a);
    if (b)
        (void)hipFree(b);
    if (t0)
        (void)hipEventDestroy(t0);
    if (t1)
        (void)hipEventDestroy(t1);
    if (e != hipSuccess) {
        (void)hipGetLastError();
        return gptoss_fail(err, e == hipErrorOutOfMemory ? GPTOSS_E_DEVICE_MEMORY : GPTOSS_E_DEVICE,
                           "device %d: copy bandwidth: %s", device, hipGetErrorString(e));
    }
    *out = 2.0 * (double)bytes * reps / (ms / 1000.0);
    return GPTOSS_OK;
}
