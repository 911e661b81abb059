/* The backend of a CPU-only build: no devices. */
#include "backend.h"

const char *gptoss_hip_platform(void) { return "cpu"; }
int gptoss_hip_device_count(void) { return 0; }
int gptoss_hip_device_info(int index, gptoss_device_info *out) {
    (void)index;
    (void)out;
    return -1;
}
