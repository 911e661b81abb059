/* The backend of a CPU-only build: no devices. Its GPU engine plans
 * replicas (gpu_buffers.c) but refuses to make them. */
#include "backend.h"
#include "gpu_buffers.h"

const char *gptoss_hip_platform(void) { return "cpu"; }
int gptoss_hip_device_count(void) { return 0; }
int gptoss_hip_device_info(int index, gptoss_device_info *out) {
    (void)index;
    (void)out;
    return -1;
}

/* every device call: the binding checks the device number first, so this
 * answers only a caller that does not */
static gptoss_status no_device(int device, char *err) {
    return gptoss_fail(err, GPTOSS_E_UNSUPPORTED, "device %d: this is a CPU-only build", device);
}

gptoss_status gptoss_hip_device_free(int index, uint64_t *free_bytes, char *err) {
    (void)free_bytes;
    return no_device(index, err);
}

gptoss_status gptoss_hip_synth_read(int device, const gptoss_synth_param *p, uint64_t first,
                                    uint64_t count, float *host_out, char *err) {
    (void)p, (void)first, (void)count, (void)host_out;
    return no_device(device, err);
}

gptoss_status gptoss_hip_copy_bandwidth(int device, size_t bytes, double *out, char *err) {
    (void)bytes, (void)out;
    return no_device(device, err);
}

static gptoss_status refuse_create(gptoss_model *m, const gptoss_engine_opts *o, const gptoss_progress *progress,
                                   void **ctx, char *err) {
    (void)m, (void)progress, (void)ctx;
    return no_device(o->device, err);
}

/* create never succeeds, so no other call is reached */
const gptoss_engine_i *gptoss_gpu_engine(void) {
    static const gptoss_engine_i engine = {
        .reads_fed_tokens = 1,
        .resolve = gptoss_gpu_resolve,
        .plan = gptoss_gpu_plan,
        .create = refuse_create,
    };
    return &engine;
}
