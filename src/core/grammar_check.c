/* What the matcher relies on, checked once: every rule that can be called
 * can also end (so no output can be trapped in a rule that never finishes),
 * no state is kept from which the rule cannot end (so every allowed token
 * leads somewhere that can still finish), and no rule calls itself before
 * reading a byte (left recursion would push frames forever). And how much
 * plain text each state surely takes (its room) and how many characters of
 * a string's text (grammar_content.c), for the cache's walks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

/* "rule 'value' (line 3)" for EBNF rules, the schema path or "the pattern" otherwise */
static const char *describe(const gm_dfa *r, char *buf, size_t n) {
    if (r->line > 0)
        snprintf(buf, n, "rule '%s' (line %d)", r->name, r->line);
    else
        snprintf(buf, n, "%s", r->name);
    return buf;
}

/* Whether rule r reaches an end from its start, through bytes (any = 1) or
 * not (any = 0), calling only the rules marked in through[]. */
static int reaches_end(const gm_dfa *r, const uint8_t *through, int any, int32_t *queue, uint8_t *seen) {
    memset(seen, 0, (size_t)r->states);
    int32_t n = 0;
    queue[n++] = 0;
    seen[0] = 1;
    for (int32_t i = 0; i < n; i++) {
        int32_t s = queue[i];
        if (r->flags[s] & GM_FINAL)
            return 1;
        for (int c = 0; any && c < r->classes; c++) {
            int32_t t = r->next[(size_t)s * (size_t)r->classes + (size_t)c];
            if (t >= 0 && !seen[t])
                seen[t] = 1, queue[n++] = t;
        }
        for (int32_t k = r->call_first[s]; k < r->call_first[s + 1]; k++)
            if (through[r->calls[k].rule] && !seen[r->calls[k].next])
                seen[r->calls[k].next] = 1, queue[n++] = r->calls[k].next;
    }
    return 0;
}

/* marks[r] = 1 for the rules that reach an end (through bytes or not),
 * to a fixed point */
static void fixed_point(const gm_dfa *rules, int nrules, int any, uint8_t *marks, int32_t *queue, uint8_t *seen) {
    memset(marks, 0, (size_t)nrules);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < nrules; r++)
            if (!marks[r] && reaches_end(&rules[r], marks, any, queue, seen))
                marks[r] = 1, changed = 1;
    }
}

/* Adds each edge s -> t of r to the predecessors pred[first[t] ..]: the
 * bytes of the classes marked in only[] (all, and call returns, when only
 * is NULL); counted when pred is NULL, written when not. */
static void predecessors(const gm_dfa *r, const uint8_t *only, int32_t *first, int32_t *pred) {
    for (int32_t s = 0; s < r->states; s++) {
        for (int c = 0; c < r->classes; c++) {
            int32_t t = r->next[(size_t)s * (size_t)r->classes + (size_t)c];
            if (t < 0 || (only && !only[c]))
                continue;
            if (pred)
                pred[first[t]++] = s;
            else
                first[t + 1]++;
        }
        for (int32_t k = r->call_first[s]; !only && k < r->call_first[s + 1]; k++) {
            if (pred)
                pred[first[r->calls[k].next]++] = s;
            else
                first[r->calls[k].next + 1]++;
        }
    }
}

/* The predecessor lists (predecessors'): s's are (*pred)[(*first)[s] ..
 * (*first)[s+1]). queue (states long) is scratch. */
static int predecessor_lists(gm_builder *b, const gm_dfa *r, const uint8_t *only, int32_t *queue, int32_t **first,
                             int32_t **pred) {
    size_t edges = (size_t)r->states * (size_t)r->classes + (size_t)r->call_first[r->states];
    *first = calloc((size_t)r->states + 1, sizeof **first);
    *pred = malloc((edges + 1) * sizeof **pred);
    if (!*first || !*pred) {
        free(*first), free(*pred);
        gm_fail_memory(b);
        return -1;
    }
    predecessors(r, only, *first, NULL);
    for (int32_t s = 0; s < r->states; s++)
        (*first)[s + 1] += (*first)[s];
    memcpy(queue, *first, (size_t)r->states * sizeof *queue); /* the write positions */
    predecessors(r, only, queue, *pred);
    return 0;
}

/* Keeps only the states of r from which an end is reachable (calls being
 * to rules that can end). */
static int trim(gm_builder *b, gm_dfa *r, int32_t *queue, uint8_t *live) {
    int32_t *first, *pred;
    if (predecessor_lists(b, r, NULL, queue, &first, &pred))
        return -1;
    int32_t n = 0;
    memset(live, 0, (unsigned)r->states);
    for (int32_t s = 0; s < r->states; s++)
        if (r->flags[s] & GM_FINAL)
            live[s] = 1, queue[n++] = s;
    for (int32_t i = 0; i < n; i++)
        for (int32_t k = first[queue[i]]; k < first[queue[i] + 1]; k++)
            if (!live[pred[k]])
                live[pred[k]] = 1, queue[n++] = pred[k];
    free(first), free(pred);
    int32_t kept = 0;
    for (int32_t s = 0; s < r->states; s++) {
        for (int c = 0; c < r->classes; c++) {
            int32_t *t = &r->next[(size_t)s * (size_t)r->classes + (size_t)c];
            if (*t >= 0 && !live[*t])
                *t = -1;
        }
        int32_t from = r->call_first[s];
        r->call_first[s] = kept;
        for (int32_t k = from; k < r->call_first[s + 1]; k++)
            if (live[r->calls[k].next])
                r->calls[kept++] = r->calls[k];
    }
    r->call_first[r->states] = kept;
    gm_dfa_flag(r);
    return 0;
}

/* The error for a cycle of left calls: path[from..depth] then back to its first. */
static __attribute__((noinline)) void refuse_cycle(gm_builder *b, const gm_dfa *rules, const int *path, int from,
                                                   int depth) {
    char cycle[GPTOSS_ERR_LEN] = "", one[160];
    for (int k = from; k <= depth; k++)
        snprintf(cycle + strlen(cycle), sizeof cycle - strlen(cycle), "%s -> ", rules[path[k]].name);
    snprintf(cycle + strlen(cycle), sizeof cycle - strlen(cycle), "%s", rules[path[from]].name);
    gm_fail(b, "%s calls itself before reading anything (%s): write the repetition with * instead",
            describe(&rules[path[from]], one, sizeof one), cycle);
}

/* Refuses a cycle of calls made before any byte: colour 1 while a rule's
 * left calls are being followed, 2 once done. */
static int left_cycle(gm_builder *b, const gm_dfa *rules, int r, const uint8_t *nullable, uint8_t *colour,
                      int *path, int depth, int32_t *queue, uint8_t *seen) {
    colour[r] = 1;
    path[depth] = r;
    const gm_dfa *d = &rules[r];
    /* the states reached from the start without a byte: through calls of rules that can end at once */
    memset(seen, 0, (size_t)d->states);
    int32_t n = 0;
    queue[n++] = 0, seen[0] = 1;
    for (int32_t i = 0; i < n; i++)
        for (int32_t k = d->call_first[queue[i]]; k < d->call_first[queue[i] + 1]; k++)
            if (nullable[d->calls[k].rule] && !seen[d->calls[k].next])
                seen[d->calls[k].next] = 1, queue[n++] = d->calls[k].next;
    /* their calls, copied out: the recursion reuses queue and seen */
    int32_t ncalls = 0;
    for (int32_t i = 0; i < n; i++)
        ncalls += d->call_first[queue[i] + 1] - d->call_first[queue[i]];
    int *callee = malloc(((size_t)ncalls + 1) * sizeof *callee);
    if (!callee) {
        gm_fail_memory(b);
        return -1;
    }
    for (int32_t i = 0, j = 0; i < n; i++)
        for (int32_t k = d->call_first[queue[i]]; k < d->call_first[queue[i] + 1]; k++)
            callee[j++] = d->calls[k].rule;
    int rc = 0;
    for (int32_t i = 0; !rc && i < ncalls; i++) {
        int c = callee[i];
        if (colour[c] == 1) {
            int from = depth;
            while (path[from] != c)
                from--;
            refuse_cycle(b, rules, path, from, depth);
            rc = -1;
        } else if (colour[c] == 0) {
            rc = left_cycle(b, rules, c, nullable, colour, path, depth + 1, queue, seen);
        }
    }
    free(callee);
    colour[r] = 2;
    return rc;
}

/* Each state's room: the fewest plain bytes after which some plain byte is
 * refused (a breadth-first search back from the states that refuse one),
 * 255 where none ever is. */
static int room(gm_builder *b, gm_dfa *r, int32_t *queue) {
    uint8_t plain[256] = {0}; /* the classes holding a plain byte (a class's bytes all act alike) */
    for (int byte = 0; byte < 256; byte++)
        plain[r->cls[byte]] |= (uint8_t)gm_plain((uint8_t)byte);
    int32_t *first, *pred;
    if (!(r->room = malloc((size_t)r->states + 1)))
        return gm_fail_memory(b), -1;
    if (predecessor_lists(b, r, plain, queue, &first, &pred))
        return -1;
    int32_t n = 0;
    memset(r->room, 255, (size_t)r->states);
    for (int32_t s = 0; s < r->states; s++)
        for (int c = 0; c < r->classes && r->room[s]; c++)
            if (plain[c] && r->next[(size_t)s * (size_t)r->classes + (size_t)c] < 0)
                r->room[s] = 0, queue[n++] = s;
    for (int32_t i = 0; i < n; i++)
        for (int32_t k = first[queue[i]]; k < first[queue[i] + 1] && r->room[queue[i]] < 254; k++)
            if (r->room[pred[k]] == 255)
                r->room[pred[k]] = (uint8_t)(r->room[queue[i]] + 1), queue[n++] = pred[k];
    free(first), free(pred);
    return 0;
}

int gm_check_rules(gm_builder *b, gm_dfa *rules, int nrules, int root) {
    int32_t most = 1;
    for (int r = 0; r < nrules; r++)
        most = rules[r].states > most ? rules[r].states : most;
    int32_t *queue = malloc((size_t)most * sizeof *queue);
    uint8_t *seen = malloc((size_t)most), *ends = malloc((size_t)nrules), *nullable = malloc((size_t)nrules);
    uint8_t *colour = calloc((size_t)nrules, 1);
    int *path = malloc((size_t)nrules * sizeof *path);
    int rc = !queue || !seen || !ends || !nullable || !colour || !path ? (gm_fail_memory(b), -1) : 0;
    if (!rc)
        fixed_point(rules, nrules, 1, ends, queue, seen);
    uint8_t *called = colour; /* borrowed until the cycle search */
    if (!rc)
        called[root] = 1;
    for (int q = 0; !rc && q < nrules; q++)
        for (int32_t k = 0; k < rules[q].call_first[rules[q].states]; k++)
            called[rules[q].calls[k].rule] = 1;
    for (int r = nrules - 1; !rc && r >= 0; r--) { /* the last made first: callees come after their callers */
        char name[160];
        if (called[r] && !ends[r])
            rc = -1, gm_fail(b, "%s can never end: every way through it leads into itself again",
                             describe(&rules[r], name, sizeof name));
    }
    if (!rc)
        memset(colour, 0, (unsigned)nrules);
    for (int r = 0; !rc && r < nrules; r++)
        rc = trim(b, &rules[r], queue, seen);
    if (!rc)
        fixed_point(rules, nrules, 0, nullable, queue, seen);
    for (int r = 0; !rc && r < nrules; r++)
        if (!colour[r])
            rc = left_cycle(b, rules, r, nullable, colour, path, 0, queue, seen);
    for (int r = 0; !rc && r < nrules; r++)
        rc = room(b, &rules[r], queue) || gm_content_left(b, &rules[r]);
    free(queue), free(seen), free(ends), free(nullable), free(colour), free(path);
    return rc;
}
