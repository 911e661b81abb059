/* The compiler's arena, errors, rules, expressions and character sets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

/* Blocks are freed together with the builder: the readers allocate freely
 * and never free one piece alone. */
struct gm_block {
    gm_block *next;
    size_t used, cap;
    max_align_t data[];
};

#define GM_BLOCK_BYTES (64u << 10)

void gm_builder_init(gm_builder *b, char *err) {
    memset(b, 0, sizeof *b);
    b->budget = GM_WORK_BUDGET;
    b->err = err;
    err[0] = 0;
}

void gm_builder_free(gm_builder *b) {
    for (gm_block *k = b->blocks, *next; k; k = next) {
        next = k->next;
        free(k);
    }
    free(b->rules);
    b->blocks = NULL;
    b->rules = NULL;
}

void *gm_fail(gm_builder *b, const char *fmt, ...) {
    if (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, GPTOSS_ERR_LEN, fmt, ap);
        va_end(ap);
        b->failed = 1;
        b->status = GPTOSS_E_INVALID;
    }
    return NULL;
}

void *gm_fail_memory(gm_builder *b) {
    if (!b->failed) {
        snprintf(b->err, GPTOSS_ERR_LEN, "out of host memory compiling the grammar");
        b->failed = 1;
        b->status = GPTOSS_E_HOST_MEMORY;
    }
    return NULL;
}

void *gm_alloc(gm_builder *b, size_t bytes) {
    if (b->failed)
        return NULL;
    bytes = (bytes + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    gm_block *k = b->blocks;
    if (!k || k->cap - k->used < bytes) {
        size_t cap = bytes > GM_BLOCK_BYTES ? bytes : GM_BLOCK_BYTES;
        k = malloc(sizeof *k + cap);
        if (!k)
            return gm_fail_memory(b);
        k->cap = cap;
        k->used = 0;
        k->next = b->blocks;
        b->blocks = k;
    }
    void *p = (char *)k->data + k->used;
    k->used += bytes;
    memset(p, 0, bytes);
    return p;
}

char *gm_strdup(gm_builder *b, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = gm_alloc(b, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

int gm_grow(gm_builder *b, void *array, int n, int *cap, size_t size) {
    if (n < *cap)
        return 0;
    int more = *cap ? 2 * *cap : 8;
    void *grown = gm_alloc(b, (size_t)more * size), **old = array;
    if (!grown)
        return -1;
    if (n)
        memcpy(grown, *old, (size_t)n * size);
    *old = grown;
    *cap = more;
    return 0;
}

char *gm_printf(gm_builder *b, const char *fmt, ...) {
    char buf[GPTOSS_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return gm_strdup(b, buf);
}

int gm_rule_add(gm_builder *b, const char *name, int line) {
    if (b->failed)
        return -1;
    if (b->nrules == GM_MAX_RULES) {
        gm_fail(b, "too many rules (the limit is %d)", GM_MAX_RULES);
        return -1;
    }
    if (b->nrules == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        gm_rule_def *r = realloc(b->rules, (size_t)cap * sizeof *r);
        if (!r) {
            gm_fail_memory(b);
            return -1;
        }
        b->rules = r;
        b->cap = cap;
    }
    char *copy = gm_strdup(b, name);
    if (!copy)
        return -1;
    b->rules[b->nrules] = (gm_rule_def){copy, line, NULL};
    return b->nrules++;
}

gm_ast *gm_node(gm_builder *b, gm_kind kind) {
    gm_ast *x = gm_alloc(b, sizeof *x);
    if (x)
        x->kind = kind;
    return x;
}

gm_ast *gm_bytes(gm_builder *b, const void *s, size_t n) {
    if (n > INT32_MAX)
        return gm_fail(b, "a literal of %zu bytes is too long", n);
    gm_ast *x = gm_node(b, GM_BYTES);
    uint8_t *copy = gm_alloc(b, n ? n : 1);
    if (!x || !copy)
        return NULL;
    memcpy(copy, s, n);
    x->bytes = copy;
    x->n = (int)n;
    return x;
}

gm_ast *gm_literal(gm_builder *b, const char *s) { return gm_bytes(b, s, strlen(s)); }

static int range_order(const void *a, const void *b) {
    const gm_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int gm_ranges_normalize(gm_range *r, int n) {
    if (n > 1)
        qsort(r, (size_t)n, sizeof *r, range_order);
    int out = 0;
    for (int i = 0; i < n; i++) {
        if (out && r[i].lo <= r[out - 1].hi + 1) {
            if (r[i].hi > r[out - 1].hi)
                r[out - 1].hi = r[i].hi;
        } else {
            r[out++] = r[i];
        }
    }
    return out;
}

/* The ranges less the surrogates (no UTF-8 spells them): at most one more range. */
static int cut_surrogates(const gm_range *in, int n, gm_range *out) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        gm_range r = in[i];
        if (r.hi < 0xD800 || r.lo > 0xDFFF) {
            out[k++] = r;
            continue;
        }
        if (r.lo < 0xD800)
            out[k++] = (gm_range){r.lo, 0xD7FF};
        if (r.hi > 0xDFFF)
            out[k++] = (gm_range){0xE000, r.hi};
    }
    return k;
}

gm_ast *gm_chars(gm_builder *b, const gm_range *ranges, int n) {
    gm_ast *x = gm_node(b, GM_CHARS);
    gm_range *copy = gm_alloc(b, (size_t)(n + 1) * sizeof *copy);
    if (!x || !copy)
        return NULL;
    if (n)
        memcpy(copy, ranges, (size_t)n * sizeof *copy);
    n = gm_ranges_normalize(copy, n);
    gm_range *cut = gm_alloc(b, (size_t)(n + 1) * sizeof *cut);
    if (!cut)
        return NULL;
    x->n = cut_surrogates(copy, n, cut);
    x->ranges = cut;
    return x;
}

gm_ast *gm_char_range(gm_builder *b, uint32_t lo, uint32_t hi) {
    gm_range r = {lo, hi};
    return gm_chars(b, &r, 1);
}

int gm_ranges_negate(gm_builder *b, const gm_range *in, int n, gm_range **out) {
    gm_range *r = gm_alloc(b, (size_t)(n + 1) * sizeof *r);
    if (!r)
        return -1;
    int k = 0;
    uint32_t next = 0;
    for (int i = 0; i < n; i++) {
        if (in[i].lo > next)
            r[k++] = (gm_range){next, in[i].lo - 1};
        next = in[i].hi + 1;
    }
    if (next <= GM_MAX_CODE_POINT)
        r[k++] = (gm_range){next, GM_MAX_CODE_POINT};
    *out = r;
    return k;
}

gm_ast *gm_add(gm_builder *b, gm_ast *node, gm_ast *kid) {
    if (!node || !kid)
        return NULL;
    int cap = node->cap; /* kids and (for an object) required grow together */
    if (gm_grow(b, &node->kids, node->n, &node->cap, sizeof *node->kids) ||
        (node->kind == GM_OBJECT && gm_grow(b, &node->required, node->n, &cap, 1)))
        return NULL;
    node->kids[node->n++] = kid;
    return node;
}

gm_ast *gm_seq2(gm_builder *b, gm_ast *x, gm_ast *y) {
    return gm_add(b, gm_add(b, gm_node(b, GM_SEQ), x), y);
}

gm_ast *gm_repeat(gm_builder *b, gm_ast *x, int min, int max) {
    if (min > GM_MAX_REPEAT || max > GM_MAX_REPEAT)
        return gm_fail(b, "a repetition count above %d", GM_MAX_REPEAT);
    gm_ast *r = gm_add(b, gm_node(b, GM_REPEAT), x);
    if (r) {
        r->min = min;
        r->max = max;
    }
    return r;
}

gm_ast *gm_ref(gm_builder *b, int rule) {
    gm_ast *x = rule < 0 ? NULL : gm_node(b, GM_REF);
    if (x)
        x->rule = rule;
    return x;
}

gm_ast *gm_and(gm_builder *b, gm_ast *x, gm_ast *y, const char *what) {
    gm_ast *a = gm_add(b, gm_add(b, gm_node(b, GM_AND), x), y);
    if (a)
        a->what = what;
    return a;
}

int gm_utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

int32_t gm_utf8_decode(const uint8_t *s, size_t n, int *len) {
    *len = 1;
    if (n == 0)
        return -1;
    uint8_t c = s[0];
    if (c < 0x80)
        return c;
    int k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (k == 0 || c > 0xF4 || (size_t)k > n)
        return -1;
    uint32_t cp = c & (0x3F >> (k - 1));
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < least[k] || cp > GM_MAX_CODE_POINT || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *len = k;
    return (int32_t)cp;
}
