/* Synthetic tensors generated on a GPU and copied back: how a GPU replica
 * will fill its weights, exposed so that tests can compare the bits with the
 * CPU's. */
#include <stdio.h>

#include "../../contract/launchers.h"
#include "backend.h"

#define CHECK(call, what)                                                                          \
    do {                                                                                           \
        hipError_t e_ = (call);                                                                    \
        if (e_ != hipSuccess) {                                                                    \
            s = gptoss_fail(err, e_ == hipErrorOutOfMemory ? GPTOSS_E_DEVICE_MEMORY : GPTOSS_E_DEVICE, \
                            "device %d: %s: %s", device, what, hipGetErrorString(e_));             \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

extern "C" gptoss_status gptoss_hip_synth_read(int device, const gptoss_synth_param *p, uint64_t first,
                                               uint64_t count, float *host_out, char *err) {
    float *buf = NULL;
    gptoss_status s = GPTOSS_OK;
    CHECK(hipSetDevice(device), "cannot select the device");
    CHECK(hipMalloc((void **)&buf, count * sizeof(float)), "cannot allocate the tensor");
    CHECK(gptoss_launch_synth_fill(*p, first, count, buf, 0, gptoss_tiling{0, 0}, 0), "synth_fill kernel");
    CHECK(hipMemcpy(host_out, buf, count * sizeof(float), hipMemcpyDeviceToHost), "copy back");
done:
    if (buf)
        (void)hipFree(buf);
    (void)hipGetLastError();
    return s;
}
