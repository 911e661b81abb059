/* The backend of a CPU-only build: no devices. */
#include "backend.h"

#include <stdio.h>

const char *gptoss_hip_platform(void) { return "cpu"; }
int gptoss_hip_device_count(void) { return 0; }
int gptoss_hip_device_info(int index, gptoss_device_info *out) {
    (void)index;
    (void)out;
    return -1;
}

int gptoss_hip_synth_read(int device, const gptoss_synth_param *p, uint64_t first, uint64_t count,
                          float *host_out, char *err) {
    (void)p;
    (void)first;
    (void)count;
    (void)host_out;
    snprintf(err, GPTOSS_ERR_LEN, "device %d: this is a CPU-only build", device + 1);
    return -1;
}
