#define _GNU_SOURCE
#include "model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bf16.h"
#include "mxfp4.h"
#include "synth_params.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the course .bin format is little-endian; big-endian hosts are not supported"
#endif

static const char *const format_names[GPTOSS_N_FORMATS] = {
    [GPTOSS_FORMAT_COURSE] = "course", [GPTOSS_FORMAT_HF] = "hf",
    [GPTOSS_FORMAT_ORIGINAL] = "original", [GPTOSS_FORMAT_SYNTHETIC] = "synthetic",
};

const char *gptoss_format_name(gptoss_format f) { return format_names[f]; }

int gptoss_format_by_name(const char *name) {
    for (int f = 0; f < GPTOSS_N_FORMATS; f++)
        if (strcmp(format_names[f], name) == 0)
            return f;
    return -1;
}

gptoss_status gptoss_model_new(const gptoss_config *c, const char *const *names, gptoss_format f,
                               gptoss_model **out, char *err) {
    gptoss_model *m = calloc(1, sizeof *m);
    if (!m)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for a model");
    m->config = *c;
    m->format = f;
    gptoss_status s = gptoss_config_validate_named(c, names, err);
    if (!s)
        s = gptoss_layout_compute(c, &m->layout, err);
    if (s) {
        free(m);
        return s;
    }
    *out = m;
    return GPTOSS_OK;
}

gptoss_status gptoss_model_open_course(const char *path, int fd, uint64_t size, gptoss_model **out,
                                       char *err) {
    if (size < GPTOSS_HEADER_BYTES)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "model file '%s' truncated: expected at least %d bytes (the header), "
                           "file has %llu",
                           path, GPTOSS_HEADER_BYTES, (unsigned long long)size);
    gptoss_config c;
    if (pread(fd, &c, sizeof c, 0) != (ssize_t)sizeof c)
        return gptoss_fail(err, GPTOSS_E_IO, "cannot read the header of '%s': %s", path,
                           strerror(errno));
    char why[GPTOSS_ERR_LEN];
    gptoss_model *m;
    gptoss_status s = gptoss_model_new(&c, NULL, GPTOSS_FORMAT_COURSE, &m, why);
    if (s)
        return gptoss_fail(err, s, "model file '%.180s': %.300s", path, why);
    if (size < m->layout.total_bytes) { /* a header of 10^8 layers, say: what it claims shows why */
        s = gptoss_fail(err, GPTOSS_E_INVALID,
                        "model file '%s' truncated: expected %llu bytes, file has %llu (the header's "
                        "n_layers = %d, n_experts = %d, vocab_size = %d, hidden_dim = %d, "
                        "intermediate_dim = %d)",
                        path, (unsigned long long)m->layout.total_bytes, (unsigned long long)size,
                        c.n_layers, c.n_experts, c.vocab_size, c.hidden_dim, c.intermediate_dim);
        free(m);
        return s;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        s = gptoss_fail(err, GPTOSS_E_IO, "cannot map model file '%s': %s", path, strerror(errno));
        free(m);
        return s;
    }
    m->map = map;
    m->map_bytes = (size_t)size;
    m->trailing_bytes = size - m->layout.total_bytes;
    if (!(m->path = strdup(path))) {
        gptoss_model_free(m);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for the path of model file '%s'", path);
    }
    for (int t = 0; t < GPTOSS_N_TENSORS; t++)
        m->tensor[t] = (const float *)(m->map + m->layout.t[t].offset);
    *out = m;
    return GPTOSS_OK;
}

gptoss_status gptoss_model_synthetic(const gptoss_config *c, uint64_t seed, gptoss_model **out,
                                     char *err) {
    gptoss_model *m;
    gptoss_status s = gptoss_model_new(c, NULL, GPTOSS_FORMAT_SYNTHETIC, &m, err);
    if (s)
        return s;
    if (c->n_layers > GPTOSS_SYNTHETIC_MAX_LAYERS) { /* a file's layers are bounded by its size, these by this */
        gptoss_model_free(m);
        return gptoss_fail(err, GPTOSS_E_INVALID, "n_layers = %d is more than a synthetic model's %d",
                           c->n_layers, GPTOSS_SYNTHETIC_MAX_LAYERS);
    }
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

const gptoss_piece *gptoss_model_piece_at(const gptoss_source *src, uint64_t i) {
    int lo = 0, hi = src->n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (src->piece[mid].first <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &src->piece[lo];
}

/* Values [at, at + n) of piece p as fp32, rounded to bf16 when bf16 is set:
 * a bf16 value rounds to itself but for a NaN's quiet bit, and an MXFP4 one
 * (at most two significant bits times a power of two) to itself. */
static void read_piece(const gptoss_piece *p, uint64_t at, uint64_t n, int bf16, float *out) {
    switch (p->kind) {
    case GPTOSS_PIECE_BF16:
        for (uint64_t i = 0; i < n; i++) { /* little-endian, as this host (checked above) */
            uint16_t bits;
            memcpy(&bits, p->data + 2 * (at + i), 2);
            out[i] = bf16 ? gptoss_bf16_round(gptoss_bf16_float(bits)) : gptoss_bf16_float(bits);
        }
        break;
    case GPTOSS_PIECE_F32:
        memcpy(out, p->data + 4 * at, (size_t)n * 4);
        for (uint64_t i = 0; bf16 && i < n; i++)
            out[i] = gptoss_bf16_round(out[i]);
        break;
    case GPTOSS_PIECE_MXFP4: {
        int64_t blocks = gptoss_mxfp4_blocks(p->row);
        while (n) { /* row by row */
            uint64_t row = at / (uint64_t)p->row, k = at % (uint64_t)p->row;
            uint64_t take = n < (uint64_t)p->row - k ? n : (uint64_t)p->row - k;
            gptoss_mxfp4_decode(p->data + row * blocks * GPTOSS_MXFP4_BLOCK_BYTES,
                                p->scales + row * blocks, (int64_t)k, (int64_t)take, out);
            at += take, n -= take, out += take;
        }
        break;
    }
    }
}

void gptoss_model_read(const gptoss_model *m, int tensor, uint64_t first, uint64_t count, float *out) {
    if (m->tensor[tensor]) {
        memcpy(out, m->tensor[tensor] + first, (size_t)count * sizeof(float));
    } else if (gptoss_model_is_synthetic(m)) {
        gptoss_synth_param p = gptoss_synth_params(&m->config, m->seed, tensor);
        gptoss_synth_fill(&p, first, count, out);
    } else {
        gptoss_source_read(&m->source[tensor], first, count, out);
    }
}

static void source_read(const gptoss_source *src, uint64_t first, uint64_t count, int bf16, float *out) {
    for (const gptoss_piece *p = gptoss_model_piece_at(src, first); count; p++) {
        uint64_t at = first - p->first;
        uint64_t n = count < p->count - at ? count : p->count - at;
        read_piece(p, at, n, bf16, out);
        first += n, count -= n, out += n;
    }
}

void gptoss_source_read(const gptoss_source *src, uint64_t first, uint64_t count, float *out) {
    source_read(src, first, count, 0, out);
}

void gptoss_source_read_bf16(const gptoss_source *src, uint64_t first, uint64_t count, float *out) {
    source_read(src, first, count, 1, out);
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

void gptoss_model_retain(gptoss_model *m) { m->refs++; }

void gptoss_model_free(gptoss_model *m) {
    if (!m || m->refs-- > 0)
        return;
    if (m->map)
        munmap((void *)m->map, m->map_bytes);
    for (int i = 0; i < m->n_shards; i++)
        gptoss_st_close(m->shards[i]);
    free(m->shards);
    free(m->source[0].piece); /* one allocation holds every tensor's pieces */
    gptoss_model_free_held(m);
    free(m->path);
    free(m);
}
