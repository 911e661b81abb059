/* Synthetic tensors generated on a GPU and copied back: how a GPU replica
 * will fill its weights, exposed so that tests can compare the bits with the
 * CPU's. */
#include <stdio.h>

#include "../../kernels/launchers.h"
#include "backend.h"

#define CHECK(call, what)                                                                     \
    do {                                                                                      \
        hipError_t e_ = (call);                                                               \
        if (e_ != hipSuccess) {                                                               \
            snprintf(err, GPTOSS_ERR_LEN, "device %d: %s: %s", device + 1, what,      \
                     hipGetErrorString(e_));                                                  \
            goto fail;                                                                        \
        }                                                                                     \
    } while (0)

extern "C" int gptoss_hip_synth_read(int device, const gptoss_synth_param *p, uint64_t first,
                                     uint64_t count, float *host_out, char *err) {
    float *buf = NULL;
    int rc = -1;
    CHECK(hipSetDevice(device), "cannot select the device");
    CHECK(hipMalloc((void **)&buf, count * sizeof(float)), "cannot allocate the tensor");
    CHECK(gptoss_launch_synth_fill(*p, first, count, buf, 0, gptoss_tiling{0, 0}, 0), "synth_fill kernel");
    CHECK(hipMemcpy(host_out, buf, count * sizeof(float), hipMemcpyDeviceToHost), "copy back");
    rc = 0;
fail:
    if (buf)
        (void)hipFree(buf);
    return rc;
}
