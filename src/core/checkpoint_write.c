/* Writing any model as a checkpoint directory (docs/checkpoints.md):
 * config.json, the tensors planned into shards, an index when there are
 * several, all in a temporary directory renamed at the end. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_tensors.h"
#include "mxfp4.h"
#include "regular_file.h"
#include "tokenizer_json.h"

/* One tensor of the files written: a dense part, or an MXFP4 part's codes
 * or scales (rows counted over (layer, expert, row)). */
typedef enum { ROLE_DENSE, ROLE_BLOCKS, ROLE_SCALES } role;

typedef struct {
    gptoss_st_entry entry; /* name, dtype and shape as the header states them */
    char name[GPTOSS_CHECKPOINT_NAME_LEN + 16];
    gptoss_checkpoint_shape shape;
    role role;
    int tensor;
    uint64_t first, count; /* dense: elements; blocks and scales: rows */
    uint64_t bytes;
    int shard;
    uint64_t offset; /* in the shard file */
} written;

enum { CHUNK = 1 << 20 }; /* floats read at a time */

static int by_order(const void *a, const void *b) {
    const gptoss_checkpoint_part *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Whether every value of a course tensor's range is exactly a bf16. */
static int exactly_bf16(const gptoss_model *m, int t, uint64_t first, uint64_t count, float *buf) {
    for (uint64_t at = 0; at < count; at += CHUNK) {
        uint64_t n = count - at < CHUNK ? count - at : CHUNK;
        gptoss_model_read(m, t, first + at, n, buf);
        for (uint64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &buf[i], 4);
            if (u & 0xffffu)
                return 0;
        }
    }
    return 1;
}

/* The tensors to write, layer by layer, each assigned a shard and an offset
 * in it after that shard's header; *headers receives each shard's header. */
static gptoss_status plan(const gptoss_model *m, const gptoss_checkpoint_names *ln, uint64_t shard_bytes,
                          written **out, int *n_out, unsigned char ***headers, uint64_t **header_bytes,
                          int *n_shards, char *err) {
    int n_parts = 0;
    gptoss_checkpoint_part *parts = gptoss_checkpoint_parts(m, ln, &n_parts);
    written *w = parts ? calloc((size_t)n_parts * 2, sizeof *w) : NULL;
    float *buf = malloc(CHUNK * sizeof *buf);
    if (!parts || !w || !buf) {
        free(parts);
        free(w);
        free(buf);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    }
    qsort(parts, (size_t)n_parts, sizeof *parts, by_order);
    int n = 0;
    for (int i = 0; i < n_parts; i++) {
        const gptoss_checkpoint_part *q = &parts[i];
        if (gptoss_checkpoint_is_mxfp4(q->tensor)) {
            uint64_t in = (uint64_t)q->dense.dims[2];
            for (int r = 0; r < 2; r++, n++) {
                written *x = &w[n];
                x->role = r ? ROLE_SCALES : ROLE_BLOCKS;
                snprintf(x->name, sizeof x->name, "%s%s", q->name, r ? ln->scales : ln->blocks);
                x->shape = r ? q->scales : q->blocks;
                x->entry.dtype = GPTOSS_ST_U8;
                x->first = q->first / in;
                x->count = q->count / in;
                x->tensor = q->tensor;
            }
        } else {
            written *x = &w[n++];
            x->role = ROLE_DENSE;
            snprintf(x->name, sizeof x->name, "%s", q->name);
            x->shape = q->dense;
            x->entry.dtype = exactly_bf16(m, q->tensor, q->first, q->count, buf) ? GPTOSS_ST_BF16
                                                                                   : GPTOSS_ST_F32;
            x->first = q->first;
            x->count = q->count;
            x->tensor = q->tensor;
        }
    }
    free(parts);
    free(buf);
    int shards = 0;
    uint64_t filled = 0;
    for (int i = 0; i < n; i++) {
        written *x = &w[i];
        x->entry.name = x->name;
        x->entry.ndim = x->shape.ndim;
        x->entry.shape = x->shape.dims;
        x->bytes = gptoss_st_entry_bytes(&x->entry);
        if (!shards || (filled && filled + x->bytes > shard_bytes))
            shards++, filled = 0;
        x->shard = shards - 1;
        filled += x->bytes;
    }
    *headers = calloc((size_t)shards, sizeof **headers);
    *header_bytes = calloc((size_t)shards, sizeof **header_bytes);
    gptoss_st_entry *entries = calloc((size_t)n, sizeof *entries);
    gptoss_status s = GPTOSS_OK;
    if (!*headers || !*header_bytes || !entries)
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    for (int k = 0, i = 0; k < shards && !s; k++) {
        int first = i;
        for (; i < n && w[i].shard == k; i++)
            entries[i - first] = w[i].entry;
        s = gptoss_st_header(entries, i - first, &(*headers)[k], &(*header_bytes)[k], err);
        for (uint64_t at = s ? 0 : (*header_bytes)[k]; first < i; first++) {
            w[first].offset = at;
            at += w[first].bytes;
        }
    }
    free(entries);
    *out = w;
    *n_out = n;
    *n_shards = shards;
    return s;
}

/* pwrite of all n bytes; -1 with errno set on failure */
static int write_at(int fd, const void *p, size_t n, uint64_t offset) {
    const char *c = p;
    while (n) {
        ssize_t k = pwrite(fd, c, n, (off_t)offset);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k, n -= (size_t)k, offset += (uint64_t)k;
    }
    return 0;
}

/* A dense tensor's values, as bf16 (the high halves: exact, by the plan) or f32. */
static int write_dense(const gptoss_model *m, const written *x, int fd, float *buf) {
    int bf16 = x->entry.dtype == GPTOSS_ST_BF16;
    unsigned char *bytes = (unsigned char *)buf; /* converted in place, front to back */
    for (uint64_t at = 0; at < x->count; at += CHUNK) {
        uint64_t n = x->count - at < CHUNK ? x->count - at : CHUNK;
        gptoss_model_read(m, x->tensor, x->first + at, n, buf);
        for (uint64_t i = 0; bf16 && i < n; i++) {
            uint32_t u;
            memcpy(&u, &buf[i], 4);
            bytes[2 * i] = (unsigned char)(u >> 16);
            bytes[2 * i + 1] = (unsigned char)(u >> 24);
        }
        if (write_at(fd, buf, (size_t)n * (bf16 ? 2 : 4), x->offset + at * (bf16 ? 2 : 4)))
            return -1;
    }
    return 0;
}

/* An MXFP4 pair's codes and scales together (each row's are read at once). */
static int write_mxfp4(const gptoss_model *m, const written *blocks, const written *scales,
                       const int *fds) {
    int64_t per_row = blocks->shape.dims[2];
    size_t row_codes = (size_t)per_row * GPTOSS_MXFP4_BLOCK_BYTES;
    uint64_t chunk = CHUNK / row_codes ? CHUNK / row_codes : 1;
    uint8_t *codes = malloc(chunk * row_codes), *sc = malloc(chunk * (size_t)per_row);
    int bad = !codes || !sc;
    if (bad)
        errno = ENOMEM;
    for (uint64_t at = 0; at < blocks->count && !bad; at += chunk) {
        uint64_t n = blocks->count - at < chunk ? blocks->count - at : chunk;
        gptoss_model_read_blocks(m, GPTOSS_WEIGHTS_MXFP4, blocks->tensor, blocks->first + at, n, codes, sc);
        bad = write_at(fds[blocks->shard], codes, n * row_codes, blocks->offset + at * row_codes) ||
              write_at(fds[scales->shard], sc, n * (size_t)per_row,
                       scales->offset + at * (uint64_t)per_row);
    }
    free(codes);
    free(sc);
    return bad ? -1 : 0;
}

/* A text file in dir. */
static int write_text(const char *dir, const char *name, const char *text) {
    char *path = gptoss_path_join(dir, name);
    FILE *f = path ? fopen(path, "w") : NULL;
    free(path);
    if (!f)
        return -1;
    int bad = fputs(text, f) < 0 || fputc('\n', f) < 0;
    return fclose(f) != 0 || bad ? -1 : 0;
}

static char *shard_name(int k, int shards) {
    char *name = malloc(48);
    if (name && shards == 1)
        snprintf(name, 48, GPTOSS_CHECKPOINT_SINGLE_FILE);
    else if (name)
        snprintf(name, 48, "model-%05d-of-%05d.safetensors", k + 1, shards);
    return name;
}

/* The index: {"metadata": {"total_size": data bytes}, "weight_map": {tensor: shard}}. */
static char *index_text(const written *w, int n, char *const *names) {
    json_t *map = json_object();
    json_int_t total = 0;
    int bad = !map;
    for (int i = 0; i < n && !bad; i++) {
        bad = json_object_set_new(map, w[i].name, json_string(names[w[i].shard]));
        total += (json_int_t)w[i].bytes;
    }
    json_t *root = bad ? NULL
                       : json_pack("{s:{s:I}, s:O}", "metadata", "total_size", total, "weight_map", map);
    char *text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
    json_decref(root);
    json_decref(map);
    return text;
}

/* Whether dir is absent or an empty directory (which the rename replaces). */
static gptoss_status check_target(const char *dir, char *err) {
    struct stat st;
    if (stat(dir, &st) != 0)
        return GPTOSS_OK;
    DIR *d = S_ISDIR(st.st_mode) ? opendir(dir) : NULL;
    int empty = d != NULL;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            empty = 0;
    if (d)
        closedir(d);
    return empty ? GPTOSS_OK
                 : gptoss_fail(err, GPTOSS_E_INVALID,
                               "cannot write checkpoint '%s': it exists (save makes a new directory, "
                               "or fills an empty one)",
                               dir);
}

static mode_t current_umask(void) {
    mode_t mask = umask(0);
    umask(mask);
    return mask;
}

/* Writes everything into tmp; -1 with errno set on failure. */
static int write_files(const gptoss_model *m, const char *tmp, const char *config, const char *tokenizer,
                       const written *w, int n, unsigned char *const *headers,
                       const uint64_t *header_bytes, int shards, char **names) {
    int *fds = malloc(sizeof *fds * (size_t)shards);
    float *buf = malloc(CHUNK * sizeof *buf);
    int bad = !fds || !buf || write_text(tmp, "config.json", config) ||
              (tokenizer && write_text(tmp, "tokenizer.json", tokenizer));
    if (!bad && shards > 1) {
        char *index = index_text(w, n, names);
        bad = !index || write_text(tmp, GPTOSS_CHECKPOINT_INDEX_FILE, index);
        free(index);
    }
    int opened = 0;
    for (; opened < shards && !bad; opened++) {
        char *path = gptoss_path_join(tmp, names[opened]);
        fds[opened] = path ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
        free(path);
        bad = fds[opened] < 0 || write_at(fds[opened], headers[opened], header_bytes[opened], 0);
        if (fds[opened] < 0)
            break;
    }
    for (int i = 0; i < n && !bad; i++) {
        if (w[i].role == ROLE_DENSE)
            bad = write_dense(m, &w[i], fds[w[i].shard], buf);
        else if (w[i].role == ROLE_BLOCKS) /* the scales follow their blocks */
            bad = write_mxfp4(m, &w[i], &w[i + 1], fds);
    }
    int saved = errno;
    for (int k = 0; k < opened; k++)
        if (close(fds[k]) != 0 && !bad)
            bad = 1, saved = errno;
    free(fds);
    free(buf);
    errno = saved;
    return bad ? -1 : 0;
}

static void remove_files(const char *tmp, char *const *names, int shards) {
    static const char *const text_files[] = {"config.json", "tokenizer.json", GPTOSS_CHECKPOINT_INDEX_FILE};
    for (int k = 0; k < shards + 3; k++) {
        char *path = gptoss_path_join(tmp, k < 3 ? text_files[k] : names[k - 3]);
        if (path)
            unlink(path);
        free(path);
    }
    rmdir(tmp);
}

/* The text of the tokenizer.json written beside the weights (NULL: none), or a failure naming dir. */
static gptoss_status tokenizer_text(const gptoss_model *m, const gptoss_tokenizer *tok, const char *dir,
                                    char **text, char *err) {
    char why[GPTOSS_ERR_LEN];
    *text = NULL;
    if (!tok)
        return GPTOSS_OK;
    if (gptoss_tokenizer_vocab_size(tok) != m->config.vocab_size)
        return gptoss_fail(err, GPTOSS_E_INVALID, "cannot write '%.150s': the tokenizer has %d entries, the model's "
                           "vocab_size is %d", dir, gptoss_tokenizer_vocab_size(tok), m->config.vocab_size);
    gptoss_status s = gptoss_tokenizer_json_text(tok, text, why);
    return s ? gptoss_fail(err, s, "cannot write '%.150s': %.300s", dir, why) : GPTOSS_OK;
}

gptoss_status gptoss_checkpoint_save(gptoss_model *m, const char *dir, gptoss_format f,
                                     const gptoss_tokenizer *tok, uint64_t shard_bytes, char *err) {
    const char *format = gptoss_format_name(f);
    char why[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_model_experts_in(m, GPTOSS_WEIGHTS_MXFP4, why); /* the checkpoints' expert format */
    if (s)
        return gptoss_fail(err, s, "cannot write '%.150s' as %s: the experts must be MXFP4: %.300s",
                           dir, format, why);
    char *config = NULL;
    if ((s = gptoss_checkpoint_config_text(&m->config, f, &config, why)))
        return gptoss_fail(err, s, "cannot write '%.150s' as %s: %.300s", dir, format, why);
    char *tokenizer = NULL;
    if ((s = check_target(dir, err)) || (s = tokenizer_text(m, tok, dir, &tokenizer, err))) {
        free(config);
        return s;
    }
    written *w = NULL;
    unsigned char **headers = NULL;
    uint64_t *header_bytes = NULL;
    int n = 0, shards = 0;
    char **names = NULL, *tmp = NULL;
    s = plan(m, gptoss_checkpoint_names_of(f), shard_bytes, &w, &n, &headers,
             &header_bytes, &shards, err);
    if (!s) {
        names = calloc((size_t)shards, sizeof *names);
        size_t len = gptoss_path_length(dir); /* the sibling of "out/" is "out.tmp-..." */
        tmp = malloc(len + 12);
        int bad = !names || !tmp;
        for (int k = 0; k < shards && !bad; k++)
            bad = !(names[k] = shard_name(k, shards));
        if (bad)
            s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
        else
            snprintf(tmp, len + 12, "%.*s.tmp-XXXXXX", (int)len, dir);
    }
    if (!s && !mkdtemp(tmp))
        s = gptoss_fail(err, GPTOSS_E_IO, "cannot write checkpoint '%s': cannot make '%s': %s", dir,
                        tmp, strerror(errno));
    if (!s)
        chmod(tmp, 0777 & ~current_umask()); /* mkdtemp's 0700 would hide it from other users */
    if (!s && (write_files(m, tmp, config, tokenizer, w, n, headers, header_bytes, shards, names) ||
               rename(tmp, dir) != 0)) {
        s = gptoss_fail(err, errno == ENOMEM ? GPTOSS_E_HOST_MEMORY : GPTOSS_E_IO,
                        "cannot write checkpoint '%s': %s", dir, strerror(errno));
        remove_files(tmp, names, shards);
    }
    for (int k = 0; k < shards; k++) {
        free(headers ? headers[k] : NULL);
        free(names ? names[k] : NULL);
    }
    free(headers);
    free(header_bytes);
    free(names);
    free(tmp);
    free(w);
    free(config);
    free(tokenizer);
    return s;
}
