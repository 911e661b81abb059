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

/* ---- the GPU engine: unreachable without a device (the binding checks the
 * device number first), but a clear error all the same ---- */

int gptoss_gpu_new(gptoss_model *m, const gptoss_gpu_opts *o, gptoss_gpu **out, char *err) {
    (void)m;
    (void)out;
    snprintf(err, GPTOSS_ERR_LEN, "device %d: this is a CPU-only build", o->device + 1);
    return -1;
}
void gptoss_gpu_free(gptoss_gpu *g) { (void)g; }
const gptoss_gpu_opts *gptoss_gpu_options(const gptoss_gpu *g) {
    (void)g;
    return NULL;
}
void gptoss_gpu_memory_use(const gptoss_gpu *g, gptoss_gpu_memory *out) {
    (void)g;
    (void)out;
}
int gptoss_gpu_length(const gptoss_gpu *g, int slot) {
    (void)g;
    (void)slot;
    return 0;
}
void gptoss_gpu_reset(gptoss_gpu *g, int slot) {
    (void)g;
    (void)slot;
}
int gptoss_gpu_step(gptoss_gpu *g, const gptoss_batch *b, const gptoss_row_sampling *sampling,
                    gptoss_gpu_result *res, float *logits, char *err) {
    (void)g;
    (void)b;
    (void)sampling;
    (void)res;
    (void)logits;
    snprintf(err, GPTOSS_ERR_LEN, "this is a CPU-only build");
    return -1;
}
int gptoss_gpu_wait(gptoss_gpu *g, gptoss_gpu_result *res, char *err) {
    return gptoss_gpu_step(g, NULL, NULL, res, NULL, err);
}
void gptoss_gpu_forget(gptoss_gpu *g, gptoss_gpu_result *res) {
    (void)g;
    (void)res;
}
int gptoss_gpu_logits(gptoss_gpu *g, const gptoss_gpu_result *res, float *out, char *err) {
    (void)res;
    return gptoss_gpu_step(g, NULL, NULL, NULL, out, err);
}
int gptoss_gpu_trace(gptoss_gpu *g, int slot, int token, int pos, gptoss_trace *trace,
                     float *logits, char *err) {
    (void)slot;
    (void)token;
    (void)pos;
    (void)trace;
    return gptoss_gpu_step(g, NULL, NULL, NULL, logits, err);
}
int gptoss_gpu_profile(gptoss_gpu *g, int on, char *err) {
    (void)on;
    return gptoss_gpu_step(g, NULL, NULL, NULL, NULL, err);
}
void gptoss_gpu_profile_read(const gptoss_gpu *g,
                             void (*each)(void *ctx, const char *label, double seconds, long calls),
                             void *ctx) {
    (void)g;
    (void)each;
    (void)ctx;
}
int gptoss_gpu_copy_bandwidth(int device, size_t bytes, double *out, char *err) {
    (void)bytes;
    (void)out;
    snprintf(err, GPTOSS_ERR_LEN, "device %d: this is a CPU-only build", device + 1);
    return -1;
}
