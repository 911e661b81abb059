/* Whether a device runs the programmatic waits of launch.h, asked of the
 * device code itself (gptoss_device_flag). */
#include "../contract/launchers.h"
#include "launch.h"

namespace {

__global__ void programmatic_probe_kernel(int *out) {
#if defined(GPTOSS_PDL)
    *out = 1;
#else
    *out = 0;
#endif
}

} // namespace

int gptoss_programmatic_built(hipStream_t stream) { return gptoss_device_flag(programmatic_probe_kernel, stream); }
