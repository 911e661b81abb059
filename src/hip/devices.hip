/* Device discovery through the HIP runtime (NVIDIA or AMD). */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "hip_runtime_compat.h"

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
