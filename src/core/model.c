#define _GNU_SOURCE
#include "model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "synth_params.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the course .bin format is little-endian; big-endian hosts are not supported"
#endif

/* A model of config c with its layout, no tensors yet: GPTOSS_E_INVALID
 * when c fails validation, GPTOSS_E_HOST_MEMORY. */
static gptoss_status model_new(const gptoss_config *c, gptoss_model **out, char *err) {
    gptoss_model *m = calloc(1, sizeof *m);
    if (!m)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    m->config = *c;
    gptoss_status s = gptoss_config_validate(c, err);
    if (!s)
        s = gptoss_layout_compute(c, &m->layout, err);
    if (s) {
        free(m);
        return s;
    }
    *out = m;
    return GPTOSS_OK;
}

gptoss_status gptoss_model_open(const char *path, gptoss_model **out, char *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gptoss_fail(err, GPTOSS_E_IO, "cannot open model file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return gptoss_fail(err, GPTOSS_E_IO, "cannot read model file '%s': not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < GPTOSS_HEADER_BYTES) {
        close(fd);
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "model file '%s' truncated: expected at least %d bytes (the header), "
                           "file has %llu",
                           path, GPTOSS_HEADER_BYTES, (unsigned long long)size);
    }
    gptoss_config c;
    if (pread(fd, &c, sizeof c, 0) != (ssize_t)sizeof c) {
        gptoss_status s = gptoss_fail(err, GPTOSS_E_IO, "cannot read the header of '%s': %s", path,
                                      strerror(errno));
        close(fd);
        return s;
    }
    char why[GPTOSS_ERR_LEN];
    gptoss_model *m;
    gptoss_status s = model_new(&c, &m, why);
    if (s) {
        close(fd);
        return gptoss_fail(err, s, "model file '%.180s': %.300s", path, why);
    }
    if (size < m->layout.total_bytes) {
        s = gptoss_fail(err, GPTOSS_E_INVALID,
                        "model file '%s' truncated: expected %llu bytes, file has %llu", path,
                        (unsigned long long)m->layout.total_bytes, (unsigned long long)size);
        free(m);
        close(fd);
        return s;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        s = gptoss_fail(err, GPTOSS_E_IO, "cannot map model file '%s': %s", path, strerror(errno));
        free(m);
        return s;
    }
    m->map = map;
    m->map_bytes = (size_t)size;
    m->trailing_bytes = size - m->layout.total_bytes;
    m->path = strdup(path);
    for (int t = 0; t < GPTOSS_N_TENSORS; t++)
        m->tensor[t] = (const float *)(m->map + m->layout.t[t].offset);
    *out = m;
    return GPTOSS_OK;
}

gptoss_status gptoss_model_synthetic(const gptoss_config *c, uint64_t seed, gptoss_model **out,
                                     char *err) {
    gptoss_model *m;
    gptoss_status s = model_new(c, &m, err);
    if (s)
        return s;
    m->synthetic = 1;
    m->seed = seed;
    *out = m;
    return GPTOSS_OK;
}

uint64_t gptoss_host_memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
                break;
        fclose(f);
    }
    if (kb)
        return (uint64_t)kb * 1024;
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
}

gptoss_status gptoss_model_weights(gptoss_model *m, char *err) {
    if (!m->synthetic || m->owned)
        return GPTOSS_OK;
    uint64_t bytes = m->layout.total_bytes - GPTOSS_HEADER_BYTES;
    uint64_t avail = gptoss_host_memory_available();
    if (bytes > avail || bytes > SIZE_MAX)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY,
                           "synthetic weights need %.2f GiB of host memory, %.2f GiB available",
                           bytes / 1073741824.0, avail / 1073741824.0);
    float *data = malloc((size_t)bytes);
    if (!data)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY,
                           "cannot allocate %.2f GiB of host memory for synthetic weights",
                           bytes / 1073741824.0);
    for (int t = 0; t < GPTOSS_N_TENSORS; t++) {
        float *dst = data + (m->layout.t[t].offset - GPTOSS_HEADER_BYTES) / 4;
        gptoss_model_read(m, t, 0, m->layout.t[t].count, dst);
        m->tensor[t] = dst;
    }
    m->owned = data;
    return GPTOSS_OK;
}

void gptoss_model_read(const gptoss_model *m, int tensor, uint64_t first, uint64_t count, float *out) {
    if (m->synthetic && !m->owned) {
        gptoss_synth_param p = gptoss_synth_params(&m->config, m->seed, tensor);
        gptoss_synth_fill(&p, first, count, out);
    } else {
        memcpy(out, m->tensor[tensor] + first, (size_t)count * sizeof(float));
    }
}

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

gptoss_status gptoss_model_save(const gptoss_model *m, const char *path, char *err) {
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        gptoss_status s = gptoss_fail(err, GPTOSS_E_IO, "cannot write '%s': %s", tmp, strerror(errno));
        free(tmp);
        return s;
    }
    enum { CHUNK = 1 << 20 };
    float *buf = malloc(CHUNK * sizeof(float));
    int bad = !buf || write_all(f, &m->config, sizeof m->config);
    for (int t = 0; t < GPTOSS_N_TENSORS && !bad; t++) {
        uint64_t n = m->layout.t[t].count;
        for (uint64_t first = 0; first < n && !bad; first += CHUNK) {
            uint64_t k = n - first < CHUNK ? n - first : CHUNK;
            gptoss_model_read(m, t, first, k, buf);
            bad = write_all(f, buf, (size_t)k * sizeof(float));
        }
    }
    if (!bad && m->trailing_bytes)
        bad = write_all(f, m->map + m->layout.total_bytes, (size_t)m->trailing_bytes);
    int saved_errno = errno;
    gptoss_status s = !buf ? GPTOSS_E_HOST_MEMORY : bad ? GPTOSS_E_IO : GPTOSS_OK;
    free(buf);
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        s = GPTOSS_E_IO;
        saved_errno = errno;
    }
    if (!bad && rename(tmp, path) != 0) {
        bad = 1;
        s = GPTOSS_E_IO;
        saved_errno = errno;
    }
    if (bad) {
        gptoss_fail(err, s, "cannot write model file '%s': %s", path,
                    saved_errno ? strerror(saved_errno) : "out of host memory");
        unlink(tmp);
    }
    free(tmp);
    return s;
}

void gptoss_model_free(gptoss_model *m) {
    if (!m)
        return;
    if (m->map)
        munmap((void *)m->map, m->map_bytes);
    free(m->owned);
    free(m->path);
    free(m);
}
