/* The HIP backend seen from C: device discovery now; replicas, streams and
 * step plans with the GPU engine. A CPU build links cpu_only.c instead of
 * the .hip files, with the same functions reporting no device. */
#ifndef GPTOSS_HIP_BACKEND_H
#define GPTOSS_HIP_BACKEND_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[256];
    size_t memory; /* bytes of device memory */
    int warp;      /* threads per warp / wavefront */
    char arch[64]; /* "sm_90" on NVIDIA, "gfx90a" on AMD */
} gptoss_device_info;

/* "nvidia", "amd" or "cpu": what this build was compiled for */
const char *gptoss_hip_platform(void);

/* GPUs visible to this process; 0 without a GPU, a driver, or a GPU build */
int gptoss_hip_device_count(void);

/* 0-based index; 0 on success */
int gptoss_hip_device_info(int index, gptoss_device_info *out);

#ifdef __cplusplus
}
#endif

#endif
