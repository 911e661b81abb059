/* Checkpoint directories' tensors: which checkpoint tensors make up each
 * course tensor in either layout, reading them into a model's sources, and
 * writing any model as a checkpoint (docs/checkpoints.md). */
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

#include "mxfp4.h"

/* ---- the tensors of each layout ------------------------------------------------ */

/* Each course tensor's checkpoint tensors, its "parts" (%d: the layer of a
 * per-layer tensor): q, k and v one after another make w_qkv and b_qkv, and
 * every other course tensor is one part. An expert weight is MXFP4: its
 * name takes the layout's suffixes for the codes (blocks) and the scales. */
typedef struct {
    const char *blocks, *scales;
    const char *parts[GPTOSS_N_TENSORS][3];
} layout_names;

static const layout_names hf_names = {"_blocks", "_scales", {
    [GPTOSS_T_EMBEDDING] = {"model.embed_tokens.weight"},
    [GPTOSS_T_OUT] = {"lm_head.weight"},
    [GPTOSS_T_RMS_ATTN] = {"model.layers.%d.input_layernorm.weight"},
    [GPTOSS_T_RMS_FFN] = {"model.layers.%d.post_attention_layernorm.weight"},
    [GPTOSS_T_RMS_OUT] = {"model.norm.weight"},
    [GPTOSS_T_W_QKV] = {"model.layers.%d.self_attn.q_proj.weight",
                        "model.layers.%d.self_attn.k_proj.weight",
                        "model.layers.%d.self_attn.v_proj.weight"},
    [GPTOSS_T_B_QKV] = {"model.layers.%d.self_attn.q_proj.bias",
                        "model.layers.%d.self_attn.k_proj.bias",
                        "model.layers.%d.self_attn.v_proj.bias"},
    [GPTOSS_T_W_O] = {"model.layers.%d.self_attn.o_proj.weight"},
    [GPTOSS_T_B_O] = {"model.layers.%d.self_attn.o_proj.bias"},
    [GPTOSS_T_SINKS] = {"model.layers.%d.self_attn.sinks"},
    [GPTOSS_T_W_ROUTER] = {"model.layers.%d.mlp.router.weight"},
    [GPTOSS_T_B_ROUTER] = {"model.layers.%d.mlp.router.bias"},
    [GPTOSS_T_W_MLP1] = {"model.layers.%d.mlp.experts.gate_up_proj"},
    [GPTOSS_T_B_MLP1] = {"model.layers.%d.mlp.experts.gate_up_proj_bias"},
    [GPTOSS_T_W_MLP2] = {"model.layers.%d.mlp.experts.down_proj"},
    [GPTOSS_T_B_MLP2] = {"model.layers.%d.mlp.experts.down_proj_bias"},
}};

static const layout_names original_names = {".blocks", ".scales", {
    [GPTOSS_T_EMBEDDING] = {"embedding.weight"},
    [GPTOSS_T_OUT] = {"unembedding.weight"},
    [GPTOSS_T_RMS_ATTN] = {"block.%d.attn.norm.scale"},
    [GPTOSS_T_RMS_FFN] = {"block.%d.mlp.norm.scale"},
    [GPTOSS_T_RMS_OUT] = {"norm.scale"},
    [GPTOSS_T_W_QKV] = {"block.%d.attn.qkv.weight"},
    [GPTOSS_T_B_QKV] = {"block.%d.attn.qkv.bias"},
    [GPTOSS_T_W_O] = {"block.%d.attn.out.weight"},
    [GPTOSS_T_B_O] = {"block.%d.attn.out.bias"},
    [GPTOSS_T_SINKS] = {"block.%d.attn.sinks"},
    [GPTOSS_T_W_ROUTER] = {"block.%d.mlp.gate.weight"},
    [GPTOSS_T_B_ROUTER] = {"block.%d.mlp.gate.bias"},
    [GPTOSS_T_W_MLP1] = {"block.%d.mlp.mlp1_weight"},
    [GPTOSS_T_B_MLP1] = {"block.%d.mlp.mlp1_bias"},
    [GPTOSS_T_W_MLP2] = {"block.%d.mlp.mlp2_weight"},
    [GPTOSS_T_B_MLP2] = {"block.%d.mlp.mlp2_bias"},
}};

static int is_mxfp4(int t) { return t == GPTOSS_T_W_MLP1 || t == GPTOSS_T_W_MLP2; }

enum { MAX_DIMS = 4, NAME_LEN = 160 };

typedef struct {
    int ndim;
    int64_t dims[MAX_DIMS];
} shape;

/* One part: a checkpoint tensor (an MXFP4 pair) and the course elements it holds. */
typedef struct {
    int tensor;
    int order;      /* where a writer puts it: the embedding, layer by layer, the rest */
    int index;      /* its place in course order */
    char name[NAME_LEN]; /* an MXFP4 pair's name before its suffixes */
    uint64_t first, count;
    shape dense;    /* the checkpoint tensor's shape: the course slice's with the part's rows */
    shape blocks, scales; /* MXFP4 */
} part;

/* Every part of a model in course order (each tensor's parts in its element order). */
static part *list_parts(const gptoss_model *m, const layout_names *ln, int *n_out) {
    const gptoss_config *c = &m->config;
    int64_t n = 0; /* a config may claim 2^31 layers: no int overflow before calloc refuses */
    for (int t = 0; t < GPTOSS_N_TENSORS; t++)
        for (int p = 0; p < 3 && ln->parts[t][p]; p++)
            n += m->layout.t[t].per_layer ? c->n_layers : 1;
    part *parts = n <= INT32_MAX / 2 ? calloc((size_t)n, sizeof *parts) : NULL;
    if (!parts)
        return NULL;
    part *q = parts;
    for (int t = 0; t < GPTOSS_N_TENSORS; t++) {
        const gptoss_tensor_desc *d = &m->layout.t[t];
        int n_parts = ln->parts[t][1] ? 3 : 1;
        uint64_t first = 0;
        for (int l = 0; l < (d->per_layer ? c->n_layers : 1); l++) {
            for (int p = 0; p < n_parts; p++, q++) {
                q->tensor = t;
                q->index = (int)(q - parts);
                q->order = t == GPTOSS_T_EMBEDDING ? -1 : d->per_layer ? l : c->n_layers;
                snprintf(q->name, sizeof q->name, ln->parts[t][p], l);
                q->dense.ndim = d->ndim - d->per_layer;
                memcpy(q->dense.dims, d->dims + d->per_layer, sizeof(int64_t) * (size_t)q->dense.ndim);
                if (n_parts == 3) /* the query heads, then the key heads, then the value heads */
                    q->dense.dims[0] = (int64_t)c->head_dim * (p == 0 ? c->n_attn_heads : c->n_kv_heads);
                q->count = 1;
                for (int i = 0; i < q->dense.ndim; i++)
                    q->count *= (uint64_t)q->dense.dims[i];
                q->first = first;
                first += q->count;
                if (is_mxfp4(t)) { /* [E, rows, in] -> [E, rows, blocks, 16] and [E, rows, blocks] */
                    q->scales = q->dense;
                    q->scales.dims[2] = gptoss_mxfp4_blocks(q->dense.dims[2]);
                    q->blocks = q->scales;
                    q->blocks.dims[q->blocks.ndim++] = GPTOSS_MXFP4_BLOCK_BYTES;
                }
            }
        }
    }
    *n_out = (int)n;
    return parts;
}

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p)
        snprintf(p, a + b + 2, "%s/%s", dir, name);
    return p;
}

static void format_shape(char *buf, size_t len, int ndim, const int64_t *dims) {
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

/* ---- reading ------------------------------------------------------------------- */

#define INDEX_FILE "model.safetensors.index.json"
#define SINGLE_FILE "model.safetensors"

static gptoss_status out_of_memory(char *err) {
    return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
}

/* Adds the safetensors file dir/name to m->shards. */
static gptoss_status add_shard(gptoss_model *m, const char *dir, const char *name, char *err) {
    gptoss_st_file **grown = realloc(m->shards, sizeof *grown * (size_t)(m->n_shards + 1));
    char *path = join(dir, name);
    if (!grown || !path) {
        if (grown)
            m->shards = grown;
        free(path);
        return out_of_memory(err);
    }
    m->shards = grown;
    gptoss_status s = gptoss_st_open(path, &m->shards[m->n_shards], err);
    free(path);
    if (!s)
        m->n_shards++;
    return s;
}

/* The shards an index names, each checked against its weight_map. */
static gptoss_status open_indexed(gptoss_model *m, const char *dir, const char *index, char *err) {
    json_error_t jerr;
    json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return gptoss_fail(err, GPTOSS_E_INVALID, "checkpoint index '%s' is not JSON: %s (line %d)",
                           index, jerr.text, jerr.line);
    gptoss_status s = GPTOSS_OK;
    json_t *map = json_object_get(root, "weight_map");
    const char *name;
    json_t *shard;
    if (!json_is_object(map))
        s = gptoss_fail(err, GPTOSS_E_INVALID,
                        "checkpoint index '%s' has no weight_map object {tensor: shard file}", index);
    json_object_foreach(map, name, shard) {
        if (s)
            break;
        const char *file = json_string_value(shard);
        if (!file || !*file || strchr(file, '/')) {
            s = gptoss_fail(err, GPTOSS_E_INVALID,
                            "checkpoint index '%s': weight_map['%s'] must be the name of a file in "
                            "the checkpoint directory",
                            index, name);
            break;
        }
        int known = 0;
        for (int i = 0; i < m->n_shards && !known; i++)
            known = strcmp(strrchr(m->shards[i]->path, '/') + 1, file) == 0;
        char why[GPTOSS_ERR_LEN];
        if (!known && (s = add_shard(m, dir, file, why)))
            gptoss_fail(err, s, "checkpoint index '%.150s' names shard '%.60s': %.280s", index, file,
                        why);
    }
    for (int i = 0; i < m->n_shards && !s; i++) { /* every shard's tensors, and only they */
        const gptoss_st_file *f = m->shards[i];
        const char *file = strrchr(f->path, '/') + 1;
        for (int k = 0; k < f->n_tensors && !s; k++) {
            const char *listed = json_string_value(json_object_get(map, f->tensors[k].name));
            if (!listed || strcmp(listed, file) != 0)
                s = gptoss_fail(err, GPTOSS_E_INVALID,
                                "checkpoint shard '%s' holds tensor '%s', which the index '%s' %s%s%s",
                                f->path, f->tensors[k].name, index,
                                listed ? "puts in '" : "does not list", listed ? listed : "",
                                listed ? "'" : "");
        }
    }
    json_object_foreach(map, name, shard) {
        if (s)
            break;
        int held = 0;
        for (int i = 0; i < m->n_shards && !held; i++)
            held = strcmp(strrchr(m->shards[i]->path, '/') + 1, json_string_value(shard)) == 0 &&
                   gptoss_st_find(m->shards[i], name);
        if (!held)
            s = gptoss_fail(err, GPTOSS_E_INVALID,
                            "checkpoint index '%s' puts tensor '%s' in '%s', which does not hold it",
                            index, name, json_string_value(shard));
    }
    json_decref(root);
    return s;
}

/* Opens the shards: the index's, or model.safetensors. *where (malloc'd)
 * is the file that lists the tensors, for messages. */
static gptoss_status open_shards(gptoss_model *m, const char *dir, char **where, char *err) {
    char *index = join(dir, INDEX_FILE), *single = join(dir, SINGLE_FILE);
    struct stat st;
    gptoss_status s;
    *where = NULL;
    if (!index || !single) {
        s = out_of_memory(err);
    } else if (stat(index, &st) == 0) {
        s = open_indexed(m, dir, index, err);
        *where = index, index = NULL;
    } else if (stat(single, &st) == 0) {
        s = add_shard(m, dir, SINGLE_FILE, err);
        *where = single, single = NULL;
    } else {
        s = gptoss_fail(err, GPTOSS_E_IO, "checkpoint '%s' has neither %s nor %s", dir, SINGLE_FILE,
                        INDEX_FILE);
    }
    free(index);
    free(single);
    return s;
}

static gptoss_st_tensor *find(const gptoss_model *m, const char *name, const char **file) {
    for (int i = 0; i < m->n_shards; i++) {
        gptoss_st_tensor *t = gptoss_st_find(m->shards[i], name);
        if (t) {
            *file = m->shards[i]->path;
            return t;
        }
    }
    return NULL;
}

/* The tensor of that name, of one of the dtypes (up to 2) and this shape. */
static gptoss_status take(const gptoss_model *m, const char *where, const char *name,
                          const gptoss_st_dtype *dtypes, const shape *want, gptoss_st_tensor **out,
                          char *err) {
    const char *file;
    gptoss_st_tensor *t = find(m, name, &file);
    if (!t)
        return gptoss_fail(err, GPTOSS_E_INVALID, "checkpoint '%s': tensor '%s' is missing from '%s'",
                           m->path, name, where);
    if (t->dtype != dtypes[0] && t->dtype != dtypes[1])
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint file '%s': tensor '%s' has dtype %s; gpt-oss needs %s%s%s", file,
                           name, t->dtype_name, gptoss_st_dtype_name(dtypes[0]),
                           dtypes[1] != dtypes[0] ? " or " : "",
                           dtypes[1] != dtypes[0] ? gptoss_st_dtype_name(dtypes[1]) : "");
    int same = t->ndim == want->ndim;
    for (int i = 0; i < want->ndim && same; i++)
        same = t->shape[i] == want->dims[i];
    if (!same) {
        char got[128], need[128];
        format_shape(got, sizeof got, t->ndim, t->shape);
        format_shape(need, sizeof need, want->ndim, want->dims);
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "checkpoint file '%s': tensor '%s' has shape %s; the config makes it %s",
                           file, name, got, need);
    }
    t->used = 1;
    *out = t;
    return GPTOSS_OK;
}

/* Fills m->source from the shards: every part present with its dtype and
 * shape, and no tensor left over. */
static gptoss_status take_tensors(gptoss_model *m, const layout_names *ln, const char *where,
                                  char *err) {
    static const gptoss_st_dtype dense[2] = {GPTOSS_ST_BF16, GPTOSS_ST_F32};
    static const gptoss_st_dtype u8[2] = {GPTOSS_ST_U8, GPTOSS_ST_U8};
    int n = 0;
    part *parts = list_parts(m, ln, &n);
    gptoss_piece *pieces = parts ? calloc((size_t)n, sizeof *pieces) : NULL;
    if (!parts || !pieces) {
        free(parts);
        free(pieces);
        return out_of_memory(err);
    }
    m->source[0].piece = pieces; /* freed with the model */
    gptoss_status s = GPTOSS_OK;
    for (int i = 0; i < n && !s; i++) {
        const part *q = &parts[i];
        gptoss_source *src = &m->source[q->tensor];
        if (!src->n)
            src->piece = &pieces[i];
        gptoss_piece *p = &src->piece[src->n++];
        p->first = q->first;
        p->count = q->count;
        gptoss_st_tensor *t, *scales;
        if (is_mxfp4(q->tensor)) {
            char name[NAME_LEN + 16];
            snprintf(name, sizeof name, "%s%s", q->name, ln->blocks);
            if (!(s = take(m, where, name, u8, &q->blocks, &t, err))) {
                snprintf(name, sizeof name, "%s%s", q->name, ln->scales);
                s = take(m, where, name, u8, &q->scales, &scales, err);
            }
            if (!s) {
                p->kind = GPTOSS_PIECE_MXFP4;
                p->data = t->data;
                p->scales = scales->data;
                p->row = q->dense.dims[2];
            }
        } else if (!(s = take(m, where, q->name, dense, &q->dense, &t, err))) {
            p->kind = t->dtype == GPTOSS_ST_BF16 ? GPTOSS_PIECE_BF16 : GPTOSS_PIECE_F32;
            p->data = t->data;
        }
    }
    for (int i = 0; i < m->n_shards && !s; i++)
        for (int k = 0; k < m->shards[i]->n_tensors && !s; k++)
            if (!m->shards[i]->tensors[k].used)
                s = gptoss_fail(err, GPTOSS_E_INVALID,
                                "checkpoint file '%s': unexpected tensor '%s' (not one of a %d-layer "
                                "gpt-oss's)",
                                m->shards[i]->path, m->shards[i]->tensors[k].name,
                                m->config.n_layers);
    free(parts);
    return s;
}

gptoss_status gptoss_checkpoint_open(const char *dir, gptoss_model **out, char *err) {
    char *config_path = join(dir, "config.json");
    if (!config_path)
        return out_of_memory(err);
    gptoss_format f;
    gptoss_config c;
    const char *names[GPTOSS_N_FIELDS];
    gptoss_status s = gptoss_checkpoint_config_read(config_path, &f, &c, names, err);
    gptoss_model *m = NULL;
    char why[GPTOSS_ERR_LEN];
    if (!s && (s = gptoss_model_new(&c, names, f, &m, why)))
        gptoss_fail(err, s, "checkpoint config '%.200s': %.300s", config_path, why);
    free(config_path);
    if (s)
        return s;
    char *where = NULL;
    if (!(m->path = strdup(dir)))
        s = out_of_memory(err);
    if (!s)
        s = open_shards(m, dir, &where, err);
    if (!s)
        s = take_tensors(m, f == GPTOSS_FORMAT_HF ? &hf_names : &original_names, where, err);
    free(where);
    if (s) {
        gptoss_model_free(m);
        return s;
    }
    *out = m;
    return GPTOSS_OK;
}

/* ---- writing ------------------------------------------------------------------- */

/* One tensor of the files written: a dense part, or an MXFP4 part's codes
 * or scales (rows counted over (layer, expert, row)). */
typedef enum { ROLE_DENSE, ROLE_BLOCKS, ROLE_SCALES } role;

typedef struct {
    gptoss_st_entry entry; /* name, dtype and shape as the header states them */
    char name[NAME_LEN + 16];
    shape shape;
    role role;
    int tensor;
    uint64_t first, count; /* dense: elements; blocks and scales: rows */
    uint64_t bytes;
    int shard;
    uint64_t offset; /* in the shard file */
} written;

enum { CHUNK = 1 << 20 }; /* floats read at a time */

static int by_order(const void *a, const void *b) {
    const part *x = a, *y = b;
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
static gptoss_status plan(const gptoss_model *m, const layout_names *ln, uint64_t shard_bytes,
                          written **out, int *n_out, unsigned char ***headers, uint64_t **header_bytes,
                          int *n_shards, char *err) {
    int n_parts = 0;
    part *parts = list_parts(m, ln, &n_parts);
    written *w = parts ? calloc((size_t)n_parts * 2, sizeof *w) : NULL;
    float *buf = malloc(CHUNK * sizeof *buf);
    if (!parts || !w || !buf) {
        free(parts);
        free(w);
        free(buf);
        return out_of_memory(err);
    }
    qsort(parts, (size_t)n_parts, sizeof *parts, by_order);
    int n = 0;
    for (int i = 0; i < n_parts; i++) {
        const part *q = &parts[i];
        if (is_mxfp4(q->tensor)) {
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
    gptoss_status s = !*headers || !*header_bytes || !entries ? out_of_memory(err) : GPTOSS_OK;
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
        gptoss_model_read_mxfp4(m, blocks->tensor, blocks->first + at, n, codes, sc);
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
    char *path = join(dir, name);
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
        snprintf(name, 48, SINGLE_FILE);
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
static int write_files(const gptoss_model *m, const char *tmp, const char *config,
                       const written *w, int n, unsigned char *const *headers,
                       const uint64_t *header_bytes, int shards, char **names) {
    int *fds = malloc(sizeof *fds * (size_t)shards);
    float *buf = malloc(CHUNK * sizeof *buf);
    int bad = !fds || !buf || write_text(tmp, "config.json", config);
    if (!bad && shards > 1) {
        char *index = index_text(w, n, names);
        bad = !index || write_text(tmp, INDEX_FILE, index);
        free(index);
    }
    int opened = 0;
    for (; opened < shards && !bad; opened++) {
        char *path = join(tmp, names[opened]);
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
    static const char *const text_files[] = {"config.json", INDEX_FILE};
    for (int k = 0; k < shards + 2; k++) {
        char *path = join(tmp, k < 2 ? text_files[k] : names[k - 2]);
        if (path)
            unlink(path);
        free(path);
    }
    rmdir(tmp);
}

gptoss_status gptoss_checkpoint_save(gptoss_model *m, const char *dir, gptoss_format f,
                                     uint64_t shard_bytes, char *err) {
    const char *format = gptoss_format_name(f);
    char why[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_model_experts_mxfp4(m, why);
    if (s)
        return gptoss_fail(err, s, "cannot write '%.150s' as %s: the experts must be MXFP4: %.300s",
                           dir, format, why);
    char *config = NULL;
    if ((s = gptoss_checkpoint_config_text(&m->config, f, &config, why)))
        return gptoss_fail(err, s, "cannot write '%.150s' as %s: %.300s", dir, format, why);
    if ((s = check_target(dir, err))) {
        free(config);
        return s;
    }
    written *w = NULL;
    unsigned char **headers = NULL;
    uint64_t *header_bytes = NULL;
    int n = 0, shards = 0;
    char **names = NULL, *tmp = NULL;
    s = plan(m, f == GPTOSS_FORMAT_HF ? &hf_names : &original_names, shard_bytes, &w, &n, &headers,
             &header_bytes, &shards, err);
    if (!s) {
        names = calloc((size_t)shards, sizeof *names);
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/') /* the sibling of "out/" is "out.tmp-..." */
            len--;
        tmp = malloc(len + 12);
        int bad = !names || !tmp;
        for (int k = 0; k < shards && !bad; k++)
            bad = !(names[k] = shard_name(k, shards));
        if (bad)
            s = out_of_memory(err);
        else
            snprintf(tmp, len + 12, "%.*s.tmp-XXXXXX", (int)len, dir);
    }
    if (!s && !mkdtemp(tmp))
        s = gptoss_fail(err, GPTOSS_E_IO, "cannot write checkpoint '%s': cannot make '%s': %s", dir,
                        tmp, strerror(errno));
    if (!s)
        chmod(tmp, 0777 & ~current_umask()); /* mkdtemp's 0700 would hide it from other users */
    if (!s && (write_files(m, tmp, config, w, n, headers, header_bytes, shards, names) ||
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
    return s;
}
