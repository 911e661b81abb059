#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "checked.h"
#include "json_kind.h"
#include "regular_file.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors files are little-endian; big-endian hosts are not supported"
#endif

/* Every dtype safetensors defines, with its size in bits (the float4 and
 * float6 ones pack several values a byte). */
static const struct {
    const char *name;
    int bits;
    gptoss_st_dtype dtype;
} dtypes[] = {
    {"BF16", 16, GPTOSS_ST_BF16},       {"F32", 32, GPTOSS_ST_F32},
    {"U8", 8, GPTOSS_ST_U8},            {"BOOL", 8, GPTOSS_ST_OTHER},
    {"I8", 8, GPTOSS_ST_OTHER},         {"F8_E5M2", 8, GPTOSS_ST_OTHER},
    {"F8_E4M3", 8, GPTOSS_ST_OTHER},    {"F8_E8M0", 8, GPTOSS_ST_OTHER},
    {"I16", 16, GPTOSS_ST_OTHER},       {"U16", 16, GPTOSS_ST_OTHER},
    {"F16", 16, GPTOSS_ST_OTHER},       {"I32", 32, GPTOSS_ST_OTHER},
    {"U32", 32, GPTOSS_ST_OTHER},       {"F64", 64, GPTOSS_ST_OTHER},
    {"I64", 64, GPTOSS_ST_OTHER},       {"U64", 64, GPTOSS_ST_OTHER},
    {"C64", 64, GPTOSS_ST_OTHER},       {"F4", 4, GPTOSS_ST_OTHER},
    {"F6_E2M3", 6, GPTOSS_ST_OTHER},    {"F6_E3M2", 6, GPTOSS_ST_OTHER},
};
enum { N_DTYPES = sizeof dtypes / sizeof dtypes[0] };

const char *gptoss_st_dtype_name(gptoss_st_dtype d) {
    for (int i = 0; i < N_DTYPES; i++)
        if (dtypes[i].dtype == d)
            return dtypes[i].name;
    return "?";
}

static int dtype_bits(gptoss_st_dtype d) {
    for (int i = 0; i < N_DTYPES; i++)
        if (dtypes[i].dtype == d)
            return dtypes[i].bits;
    return 0;
}

/* A tensor while the header is checked: its byte range in the data. */
typedef struct {
    uint64_t begin, end;
    const char *name;
} byte_range;

static int by_begin(const void *a, const void *b) {
    const byte_range *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const gptoss_st_tensor *)a)->name, ((const gptoss_st_tensor *)b)->name);
}

/* a JSON integer >= 0, or -1 */
static int64_t json_count(const json_t *v) {
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int64_t)json_integer_value(v) : -1;
}

/* Fills t (name aside) from one tensor's entry {dtype, shape, data_offsets}
 * and its range; the data pointer is set once the ranges are known good. */
static gptoss_status read_entry(const char *path, const char *name, const json_t *v,
                                gptoss_st_tensor *t, byte_range *r, char *err) {
    if (!json_is_object(v))
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': tensor '%s' is %s, not an object {dtype, shape, "
                           "data_offsets}",
                           path, name, gptoss_json_kind(v));
    const json_t *dtype = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
    const json_t *offsets = json_object_get(v, "data_offsets");
    if (!json_is_string(dtype))
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': tensor '%s': dtype must be a string (got %s)", path,
                           name, gptoss_json_kind(dtype));
    int d = 0;
    while (d < N_DTYPES && strcmp(dtypes[d].name, json_string_value(dtype)) != 0)
        d++;
    if (d == N_DTYPES)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': tensor '%s': unknown dtype '%.40s'", path, name,
                           json_string_value(dtype));
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", dtypes[d].name);
    t->dtype = dtypes[d].dtype;
    if (!json_is_array(shape) || json_array_size(shape) > GPTOSS_ST_MAX_DIMS)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': tensor '%s': shape must be an array of at most %d "
                           "sizes",
                           path, name, GPTOSS_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    int overflow = 0;
    uint64_t bits = (uint64_t)dtypes[d].bits;
    for (int i = 0; i < t->ndim; i++) {
        t->shape[i] = json_count(json_array_get(shape, (size_t)i));
        if (t->shape[i] < 0)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "safetensors file '%s': tensor '%s': shape[%d] is not a size (an "
                               "integer >= 0)",
                               path, name, i);
        bits = gptoss_checked_mul(bits, (uint64_t)t->shape[i], &overflow);
    }
    if (overflow || bits % 8)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': tensor '%s': its shape is not a whole number of "
                           "bytes of %s below 2^64",
                           path, name, dtypes[d].name);
    t->bytes = bits / 8;
    int64_t begin = json_array_size(offsets) == 2 ? json_count(json_array_get(offsets, 0)) : -1;
    int64_t end = json_array_size(offsets) == 2 ? json_count(json_array_get(offsets, 1)) : -1;
    if (!json_is_array(offsets) || begin < 0 || end < begin)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': tensor '%s': data_offsets must be [begin, end] "
                           "with 0 <= begin <= end",
                           path, name);
    if ((uint64_t)(end - begin) != t->bytes)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': tensor '%s' has %lld bytes (data_offsets "
                           "[%lld, %lld]); dtype %s and its shape need %llu",
                           path, name, (long long)(end - begin), (long long)begin, (long long)end,
                           dtypes[d].name, (unsigned long long)t->bytes);
    r->begin = (uint64_t)begin;
    r->end = (uint64_t)end;
    return GPTOSS_OK;
}

static gptoss_status check_metadata(const char *path, const json_t *v, char *err) {
    const char *key;
    json_t *value;
    if (!json_is_object(v))
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': __metadata__ must be an object of strings (got %s)",
                           path, gptoss_json_kind(v));
    json_object_foreach((json_t *)v, key, value) {
        if (!json_is_string(value))
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "safetensors file '%s': __metadata__ '%s' must be a string (got %s)",
                               path, key, gptoss_json_kind(value));
    }
    return GPTOSS_OK;
}

/* The ranges sorted by begin must tile [0, data_bytes) exactly. */
static gptoss_status check_ranges(const char *path, byte_range *r, int n, uint64_t data_bytes,
                                  char *err) {
    qsort(r, (size_t)n, sizeof *r, by_begin);
    uint64_t at = 0;
    const char *prev = NULL;
    for (int i = 0; i < n; i++) {
        if (r[i].begin > at)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "safetensors file '%s': no tensor holds data bytes %llu..%llu (a hole "
                               "%s%s%s before tensor '%s')",
                               path, (unsigned long long)at, (unsigned long long)r[i].begin - 1,
                               prev ? "after tensor '" : "", prev ? prev : "at the start",
                               prev ? "'" : "", r[i].name);
        if (r[i].begin < at)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "safetensors file '%s': tensor '%s' (data bytes %llu..%llu) overlaps "
                               "tensor '%s', which ends at %llu",
                               path, r[i].name, (unsigned long long)r[i].begin,
                               (unsigned long long)r[i].end, prev, (unsigned long long)at);
        at = r[i].end;
        prev = r[i].name;
    }
    if (at > data_bytes)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': tensor '%s' ends at data byte %llu, beyond the "
                           "file's %llu data bytes (truncated?)",
                           path, prev, (unsigned long long)at, (unsigned long long)data_bytes);
    if (at < data_bytes)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': %llu data bytes follow the last tensor%s%s%s, "
                           "which no tensor holds",
                           path, (unsigned long long)(data_bytes - at), prev ? " '" : "",
                           prev ? prev : "", prev ? "'" : "");
    return GPTOSS_OK;
}

/* Reads the header of a mapped file into f->tensors. */
static gptoss_status parse_header(gptoss_st_file *f, char *err) {
    const char *path = f->path;
    if (f->map_bytes < 8)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s' has %zu bytes, fewer than the 8 of the header "
                           "length",
                           path, f->map_bytes);
    uint64_t n;
    memcpy(&n, f->map, 8);
    if (n > f->map_bytes - 8 || n > GPTOSS_ST_MAX_HEADER)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': header length %llu exceeds %s (%llu)", path,
                           (unsigned long long)n,
                           n > f->map_bytes - 8 ? "the bytes after it" : "the limit of safetensors",
                           n > f->map_bytes - 8 ? (unsigned long long)(f->map_bytes - 8)
                                                : GPTOSS_ST_MAX_HEADER);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)f->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "safetensors file '%s': the header is not JSON: %s (line %d, column %d)",
                           path, jerr.text, jerr.line, jerr.column);
    gptoss_status s = GPTOSS_OK;
    byte_range *ranges = NULL;
    if (!json_is_object(root)) {
        s = gptoss_fail(err, GPTOSS_E_INVALID,
                        "safetensors file '%s': the header is %s, not an object", path,
                        gptoss_json_kind(root));
        goto done;
    }
    size_t count = json_object_size(root) - (json_object_get(root, "__metadata__") != NULL);
    f->tensors = calloc(count ? count : 1, sizeof *f->tensors);
    ranges = calloc(count ? count : 1, sizeof *ranges);
    if (!f->tensors || !ranges) {
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY,
                        "safetensors file '%s': out of host memory for the table of its %zu tensors", path,
                        count);
        goto done;
    }
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        if (strcmp(key, "__metadata__") == 0) {
            if ((s = check_metadata(path, value, err)))
                goto done;
            continue;
        }
        gptoss_st_tensor *t = &f->tensors[f->n_tensors];
        if (!(t->name = strdup(key))) {
            s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY,
                            "safetensors file '%s': out of host memory for the names of its tensors", path);
            goto done;
        }
        f->n_tensors++;
        ranges[f->n_tensors - 1].name = t->name;
        if ((s = read_entry(path, key, value, t, &ranges[f->n_tensors - 1], err)))
            goto done;
        t->data = f->map + 8 + n + ranges[f->n_tensors - 1].begin;
    }
    if ((s = check_ranges(path, ranges, f->n_tensors, f->map_bytes - 8 - n, err)))
        goto done;
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, by_name);
done:
    free(ranges);
    json_decref(root);
    return s;
}

gptoss_status gptoss_st_open(const char *path, gptoss_st_file **out, char *err) {
    gptoss_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for opening safetensors file '%s'",
                           path);
    }
    int fd = -1;
    uint64_t size = 0;
    gptoss_status s = gptoss_open_regular(path, "safetensors file", &fd, &size, err);
    if (!s && size > 0) { /* mmap refuses an empty file; parse_header names it */
        void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED)
            s = gptoss_fail(err, GPTOSS_E_IO, "cannot map safetensors file '%s': %s", path,
                            strerror(errno));
        else {
            f->map = map;
            f->map_bytes = (size_t)size;
        }
    }
    if (fd >= 0)
        close(fd);
    if (!s)
        s = parse_header(f, err);
    if (s) {
        gptoss_st_close(f);
        return s;
    }
    *out = f;
    return GPTOSS_OK;
}

gptoss_st_tensor *gptoss_st_find(const gptoss_st_file *f, const char *name) {
    gptoss_st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof key, by_name);
}

void gptoss_st_close(gptoss_st_file *f) {
    if (!f)
        return;
    for (int i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    if (f->map)
        munmap((void *)f->map, f->map_bytes);
    free(f->path);
    free(f);
}

uint64_t gptoss_st_entry_bytes(const gptoss_st_entry *e) {
    uint64_t n = (uint64_t)dtype_bits(e->dtype) / 8;
    for (int i = 0; i < e->ndim; i++)
        n *= (uint64_t)e->shape[i];
    return n;
}

gptoss_status gptoss_st_header(const gptoss_st_entry *entries, int n, unsigned char **header,
                               uint64_t *header_bytes, char *err) {
    json_t *root = json_object();
    int bad = !root;
    uint64_t at = 0;
    for (int i = 0; i < n && !bad; i++) {
        const gptoss_st_entry *e = &entries[i];
        json_t *shape = json_array();
        for (int d = 0; d < e->ndim && shape; d++)
            bad |= json_array_append_new(shape, json_integer(e->shape[d]));
        uint64_t end = at + gptoss_st_entry_bytes(e);
        json_t *entry = json_pack("{s:s, s:o, s:[I, I]}", "dtype", gptoss_st_dtype_name(e->dtype),
                                  "shape", shape, "data_offsets", (json_int_t)at, (json_int_t)end);
        bad |= !entry || json_object_set_new(root, e->name, entry);
        at = end;
    }
    if (!bad)
        bad = json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *text = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    *header = malloc(8 + padded);
    if (!*header) {
        free(text);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    }
    uint64_t n_le = padded;
    memcpy(*header, &n_le, 8);
    memcpy(*header + 8, text, len);
    memset(*header + 8 + len, ' ', padded - len);
    free(text);
    *header_bytes = 8 + padded;
    return GPTOSS_OK;
}
