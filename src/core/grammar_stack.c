/* Parse stacks of the pushdown automaton. A frame is a rule's state over
 * the stack below it, and frames are interned (one id for each distinct
 * frame-over-stack), so that a whole stack is one integer: sets of stacks
 * are integer sets, two configurations compare by their ids, and stacks
 * that share their bottoms share their frames. */
#include <stdlib.h>
#include <string.h>

#include "grammar_match.h"

int gm_ints_reserve(gm_ints *a, int32_t n) {
    if (n <= a->cap)
        return 0;
    int32_t cap = a->cap ? a->cap : 16;
    while (cap < n)
        cap *= 2;
    int32_t *v = realloc(a->v, (size_t)cap * sizeof *v);
    if (!v)
        return GM_NOMEM;
    a->v = v;
    a->cap = cap;
    return 0;
}

int gm_ints_push(gm_ints *a, int32_t x) {
    if (a->n == a->cap && gm_ints_reserve(a, a->n + 1))
        return GM_NOMEM;
    a->v[a->n++] = x;
    return 0;
}

int gm_stacks_init(gm_stacks *st, const gptoss_grammar *g) {
    memset(st, 0, sizeof *st);
    st->g = g;
    st->cap = 256;
    st->nslots = 512;
    st->frames = malloc((size_t)st->cap * sizeof *st->frames);
    st->mark = calloc((size_t)st->cap, sizeof *st->mark);
    st->slots = calloc(st->nslots, sizeof *st->slots);
    if (!st->frames || !st->mark || !st->slots) {
        gm_stacks_free(st);
        return GM_NOMEM;
    }
    st->frames[0] = (gm_frame){-1, -1, -1}; /* the empty stack */
    st->n = 1;
    return 0;
}

void gm_stacks_free(gm_stacks *st) {
    free(st->frames), free(st->mark), free(st->slots), free(st->work.v);
    memset(st, 0, sizeof *st);
}

int gm_stacks_copy(gm_stacks *to, const gm_stacks *from) {
    *to = (gm_stacks){.g = from->g, .n = from->n, .cap = from->cap, .nslots = from->nslots, .stamp = from->stamp};
    to->frames = malloc((size_t)from->cap * sizeof *to->frames);
    to->mark = malloc((size_t)from->cap * sizeof *to->mark);
    to->slots = malloc(from->nslots * sizeof *to->slots);
    if (!to->frames || !to->mark || !to->slots) {
        gm_stacks_free(to);
        return GM_NOMEM;
    }
    memcpy(to->frames, from->frames, (size_t)from->n * sizeof *to->frames);
    memcpy(to->mark, from->mark, (size_t)from->cap * sizeof *to->mark);
    memcpy(to->slots, from->slots, from->nslots * sizeof *to->slots);
    return 0;
}

static uint32_t frame_hash(int32_t rule, int32_t state, int32_t parent) {
    uint64_t h = ((uint64_t)(uint32_t)rule * 0x9E3779B97F4A7C15u) ^ ((uint64_t)(uint32_t)state * 0xC2B2AE3D27D4EB4Fu) ^
                 ((uint64_t)(uint32_t)parent * 0x165667B19E3779F9u);
    return (uint32_t)(h ^ (h >> 29));
}

static int rehash(gm_stacks *st) {
    uint32_t nslots = 2 * st->nslots;
    int32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots)
        return GM_NOMEM;
    for (int32_t id = 1; id < st->n; id++) {
        const gm_frame *f = &st->frames[id];
        uint32_t h = frame_hash(f->rule, f->state, f->parent) & (nslots - 1);
        while (slots[h])
            h = (h + 1) & (nslots - 1);
        slots[h] = id;
    }
    free(st->slots);
    st->slots = slots;
    st->nslots = nslots;
    return 0;
}

int32_t gm_intern(gm_stacks *st, int32_t rule, int32_t state, int32_t parent) {
    uint32_t h = frame_hash(rule, state, parent) & (st->nslots - 1);
    for (int32_t id; (id = st->slots[h]); h = (h + 1) & (st->nslots - 1)) {
        const gm_frame *f = &st->frames[id];
        if (f->rule == rule && f->state == state && f->parent == parent)
            return id;
    }
    if (st->n == st->cap) {
        int32_t cap = 2 * st->cap;
        gm_frame *frames = realloc(st->frames, (size_t)cap * sizeof *frames);
        if (frames)
            st->frames = frames;
        uint32_t *mark = realloc(st->mark, (size_t)cap * sizeof *mark);
        if (mark)
            st->mark = mark;
        if (!frames || !mark)
            return GM_NOMEM;
        memset(st->mark + st->cap, 0, (size_t)(cap - st->cap) * sizeof *mark);
        st->cap = cap;
    }
    int32_t id = st->n++;
    st->frames[id] = (gm_frame){rule, state, parent};
    st->slots[h] = id;
    if ((uint32_t)st->n * 2 > st->nslots && rehash(st))
        return GM_NOMEM;
    return id;
}

/* a fresh mark, every frame's cleared when the counter wraps */
static uint32_t next_stamp(gm_stacks *st) {
    if (++st->stamp == 0) {
        memset(st->mark, 0, (size_t)st->cap * sizeof *st->mark);
        st->stamp = 1;
    }
    return st->stamp;
}

/* queues id unless marked already */
static int visit(gm_stacks *st, int32_t id, uint32_t stamp) {
    if (id < 0)
        return GM_NOMEM;
    if (st->mark[id] == stamp)
        return 0;
    st->mark[id] = stamp;
    return gm_ints_push(&st->work, id);
}

int gm_closure(gm_stacks *st, const int32_t *in, int32_t n, gm_ints *out) {
    uint32_t stamp = next_stamp(st);
    int ends = 0, rc = 0;
    st->work.n = 0;
    for (int32_t i = 0; i < n && !rc; i++)
        rc = visit(st, in[i], stamp);
    while (!rc && st->work.n) {
        int32_t id = st->work.v[--st->work.n];
        if ((rc = gm_ints_push(out, id)))
            break;
        if (id == 0) {
            ends = 1;
            continue;
        }
        gm_frame f = st->frames[id]; /* a copy: interning may move the frames */
        const gm_dfa *d = &st->g->rules[f.rule];
        for (int32_t k = d->call_first[f.state]; k < d->call_first[f.state + 1] && !rc; k++) {
            int32_t back = gm_intern(st, f.rule, d->calls[k].next, f.parent);
            rc = back < 0 ? GM_NOMEM : visit(st, gm_intern(st, d->calls[k].rule, 0, back), stamp);
        }
        if (!rc && (d->flags[f.state] & GM_FINAL))
            rc = visit(st, f.parent, stamp);
        if (!rc && st->work.n + out->n > GM_MAX_STACKS)
            rc = GM_AMBIGUOUS;
    }
    return rc ? rc : ends;
}

int gm_step(gm_stacks *st, const int32_t *in, int32_t n, uint8_t byte, gm_ints *out) {
    uint32_t stamp = next_stamp(st);
    for (int32_t i = 0; i < n; i++) {
        if (in[i] == 0)
            continue;
        gm_frame f = st->frames[in[i]];
        int32_t t = gm_next(&st->g->rules[f.rule], f.state, byte);
        if (t < 0)
            continue;
        int32_t id = gm_intern(st, f.rule, t, f.parent);
        if (id < 0)
            return GM_NOMEM;
        if (st->mark[id] != stamp) {
            st->mark[id] = stamp;
            if (gm_ints_push(out, id))
                return GM_NOMEM;
        }
    }
    return 0;
}

gptoss_status gm_stack_failure(int code, char *err) {
    if (code == GM_AMBIGUOUS)
        return gptoss_fail(err, GPTOSS_E_STATE,
                           "the grammar is too ambiguous here: more than %d ways to read the output so far",
                           GM_MAX_STACKS);
    return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for the matcher's parse stacks");
}
