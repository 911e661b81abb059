/* JSON schema strings and numbers (docs/structured.md#json-schemas).
 *
 * A string's characters are written as JSON writes them (", \ and controls
 * escaped); its pattern, format and lengths each become an expression over
 * those characters, intersected. A number's bounds become comparisons of
 * its decimal digits (a regex that says "at least 12.5", one that says "at
 * most 300"), intersected with the number's syntax. Numbers stay bounded in
 * length so that no model can write one forever: at most 20 digits before
 * the point (more where a bound needs them), 20 after, a 2-digit exponent,
 * and no exponent at all once bounded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_schema.h"

#define DIGITS_CAP 20

static gm_ast *json_char(gm_schema *s) {
    gm_ast *c = gm_char_range(s->b, 0, GM_MAX_CODE_POINT);
    if (c)
        c->json = 1;
    return c;
}

static gm_ast *quoted(gm_schema *s, gm_ast *body) {
    gm_builder *b = s->b;
    return gm_add(b, gm_add(b, gm_add(b, gm_node(b, GM_SEQ), gm_literal(b, "\"")), body), gm_literal(b, "\""));
}

gm_ast *gm_schema_any_string(gm_schema *s) { return quoted(s, gm_repeat(s->b, json_char(s), 0, GM_UNBOUNDED)); }

/* a regex of a whole text, read as characters inside a JSON string */
static gm_ast *json_regex(gm_schema *s, const char *text, gm_regex_mode mode, const char *where) {
    gm_ast *x = gm_regex(s->b, text, strlen(text), mode, where);
    if (x)
        gm_mark_json(x);
    return x;
}

/* The formats, each as a regex of valid values (a subset where the full rule
 * needs arithmetic: February stops at the 28th, no leap seconds). */
#define DATE "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define EMAIL_ATOM "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
#define EMAIL_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
static const struct {
    const char *name, *regex;
} FORMATS[] = {
    {"date", DATE},
    {"time", TIME},
    {"date-time", DATE "T" TIME},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"email", EMAIL_ATOM "(?:\\." EMAIL_ATOM ")*@(?:" EMAIL_LABEL "\\.)+" EMAIL_LABEL},
};

int gm_schema_count(gm_schema *s, json_t *node, const char *key, const char *path) {
    json_t *v = json_object_get(node, key);
    if (!v)
        return -1;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > GM_MAX_REPEAT) {
        gm_fail(s->b, "%s.%s: must be an integer within 0..%d", path, key, GM_MAX_REPEAT);
        return -2;
    }
    return (int)json_integer_value(v);
}

/* the format's expression, or NULL with the error set */
static gm_ast *format(gm_schema *s, json_t *v, const char *path) {
    const char *name = json_string_value(v);
    if (!name)
        return gm_fail(s->b, "%s.format: must be a string", path);
    for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS; i++)
        if (!strcmp(name, FORMATS[i].name))
            return json_regex(s, FORMATS[i].regex, GM_REGEX_FULL, name);
    return gm_fail(s->b, "%s.format: '%s' is not supported (supported: date, time, date-time, uuid, email)", path,
                   name);
}

/* x, or x and y together when both are there */
static gm_ast *both(gm_schema *s, gm_ast *x, gm_ast *y, const char *what) {
    return x && y ? gm_and(s->b, x, y, what) : x ? x : y;
}

gm_ast *gm_schema_string(gm_schema *s, json_t *node, const char *path) {
    json_t *pattern = json_object_get(node, "pattern"), *form = json_object_get(node, "format");
    int min = gm_schema_count(s, node, "minLength", path), max = gm_schema_count(s, node, "maxLength", path);
    if (min == -2 || max == -2)
        return NULL;
    if (!pattern && !form && min < 0 && max < 0)
        return gm_schema_shared(s, &s->string_rule, "a JSON string", gm_schema_any_string);
    if (min >= 0 && max >= 0 && min > max)
        return gm_fail(s->b, "%s.minLength: %d is above maxLength %d", path, min, max);
    if (pattern && !json_is_string(pattern))
        return gm_fail(s->b, "%s.pattern: must be a string", path);
    /* one rule for each kind of constrained string, which every schema of that kind shares (and so its cache) */
    const char *key = gm_printf(s->b, "string:%d:%d:%s:%s", min, max, json_string_value(form) ? json_string_value(form) : "",
                                pattern ? json_string_value(pattern) : "");
    int rule = key ? gm_schema_recall(s, key) : -1;
    if (rule >= 0 || !key)
        return gm_ref(s->b, rule);
    if ((rule = gm_schema_remember(s, key, path)) < 0)
        return NULL;
    const char *what = gm_printf(s->b, "%s: no string meets its pattern, format and lengths together", path);
    gm_ast *body = NULL;
    if (pattern)
        body = json_regex(s, json_string_value(pattern), GM_REGEX_SEARCH, gm_printf(s->b, "%s.pattern", path));
    if (form)
        body = both(s, body, format(s, form, path), what);
    if (min >= 0 || max >= 0)
        body = both(s, body, gm_repeat(s->b, json_char(s), min < 0 ? 0 : min, max < 0 ? GM_UNBOUNDED : max), what);
    if (!(s->b->rules[rule].body = s->b->failed ? NULL : quoted(s, body)))
        return NULL;
    return gm_ref(s->b, rule);
}

/* ---- numbers ---- */

typedef struct {
    char *text;
    size_t n, cap;
    int failed;
} text_buf;

static __attribute__((format(printf, 2, 3))) void put(text_buf *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = t->failed ? 0 : vsnprintf(t->text ? t->text + t->n : NULL, t->text ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (t->failed || (t->text && (size_t)k < t->cap - t->n)) {
            t->n += t->failed ? 0 : (size_t)k;
            return;
        }
        size_t cap = 2 * (t->cap + (size_t)k + 64);
        char *p = realloc(t->text, cap);
        if (!p) {
            t->failed = 1;
            return;
        }
        t->text = p;
        t->cap = cap;
    }
}

/* a bound's magnitude as decimal digits: whole (no leading zeros, "0" for
 * none), frac (no trailing zeros) */
typedef struct {
    char whole[400], frac[400];
    double value;
    int inclusive, set;
} bound;

static void magnitude(json_t *v, bound *out) {
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        snprintf(out->whole, sizeof out->whole, "%llu", i < 0 ? 0ull - (unsigned long long)i : (unsigned long long)i);
        out->frac[0] = 0;
        return;
    }
    double x = fabs(json_real_value(v));
    char e[40];
    for (int p = 1; p <= 17; p++) { /* the shortest digits that read back as x */
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    char digits[24];
    int n = 0, exp = atoi(strchr(e, 'e') + 1);
    for (const char *c = e; *c != 'e'; c++)
        if (*c != '.')
            digits[n++] = *c;
    int point = exp + 1; /* digits before the point */
    int w = 0, f = 0;
    for (int i = 0; i < point; i++)
        out->whole[w++] = i < n ? digits[i] : '0';
    for (int i = point; i < 0; i++)
        out->frac[f++] = '0';
    for (int i = point < 0 ? 0 : point; i < n; i++)
        out->frac[f++] = digits[i];
    while (f && out->frac[f - 1] == '0')
        f--;
    out->frac[f] = 0;
    int lead = 0;
    while (lead < w - 1 && out->whole[lead] == '0')
        lead++;
    memmove(out->whole, out->whole + lead, (size_t)(w - lead));
    w -= lead;
    if (!w)
        out->whole[w++] = '0';
    out->whole[w] = 0;
}

#define FRAC_ANY "(?:\\.[0-9]+)?"

/* magnitudes at least (or above) a.f: more whole digits, a greater digit
 * at the first place they differ, or equal wholes and a fraction that is */
static void at_least(text_buf *t, const char *a, const char *f, int inclusive) {
    int k = (int)strlen(a), m = (int)strlen(f);
    put(t, "[1-9][0-9]{%d,}" FRAC_ANY, k);
    for (int i = 0; i < k; i++)
        if (a[i] < '9')
            put(t, "|%.*s[%c-9][0-9]{%d}" FRAC_ANY, i, a, a[i] + 1, k - 1 - i);
    if (m == 0) {
        put(t, inclusive ? "|%s" FRAC_ANY : "|%s\\.[0-9]*[1-9][0-9]*", a);
        return;
    }
    put(t, "|%s\\.(?:%s%s", a, f, inclusive ? "[0-9]*" : "[0-9]*[1-9][0-9]*");
    for (int j = 0; j < m; j++)
        if (f[j] < '9')
            put(t, "|%.*s[%c-9][0-9]*", j, f, f[j] + 1);
    put(t, ")");
}

/* magnitudes at most (or below) b.g: fewer whole digits, a smaller digit at
 * the first place they differ, or equal wholes and a fraction that is */
static void at_most(text_buf *t, const char *b, const char *g, int inclusive) {
    int k = (int)strlen(b), m = (int)strlen(g);
    put(t, "[^\\x{0}-\\x{10FFFF}]"); /* nothing, so that every case below can start with '|' */
    if (k >= 2)
        put(t, "|(?:0|[1-9][0-9]{0,%d})" FRAC_ANY, k - 2);
    for (int i = 0; i < k; i++) {
        char low = i == 0 && k > 1 ? '1' : '0';
        if (b[i] > low)
            put(t, "|%.*s[%c-%c][0-9]{%d}" FRAC_ANY, i, b, low, b[i] - 1, k - 1 - i);
    }
    if (m == 0) {
        if (inclusive)
            put(t, "|%s(?:\\.0+)?", b);
        return;
    }
    put(t, "|%s(?:\\.(?:%s%s", b, inclusive ? g : "[^\\x{0}-\\x{10FFFF}]", inclusive ? "0*" : "");
    for (int j = 0; j < m; j++) {
        if (g[j] > '0')
            put(t, "|%.*s[0-%c][0-9]*", j, g, g[j] - 1);
        if (j > 0)
            put(t, "|%.*s", j, g);
    }
    put(t, "))?");
}

/* the expression of a comparison's text (freed), or NULL */
static gm_ast *compiled(gm_schema *s, text_buf *t, const char *path) {
    if (t->failed) {
        free(t->text);
        return gm_fail_memory(s->b);
    }
    gm_ast *x = gm_regex(s->b, t->text, t->n, GM_REGEX_FULL, path);
    free(t->text);
    *t = (text_buf){0};
    return x;
}

/* One sign's magnitudes: the syntax (whole digits capped) within the bounds
 * lower (at least) and upper (at most), either unset. */
static gm_ast *magnitudes(gm_schema *s, const bound *lower, const bound *upper, int integer, const char *path,
                          const char *what) {
    size_t whole_cap = DIGITS_CAP, frac_cap = DIGITS_CAP;
    const bound *bounds[2] = {lower, upper};
    for (int i = 0; i < 2; i++)
        if (bounds[i]->set) {
            whole_cap = strlen(bounds[i]->whole) > whole_cap ? strlen(bounds[i]->whole) : whole_cap;
            frac_cap = strlen(bounds[i]->frac) + 1 > frac_cap ? strlen(bounds[i]->frac) + 1 : frac_cap;
        }
    text_buf t = {0};
    put(&t, "(?:0|[1-9][0-9]{0,%zu})", whole_cap - 1);
    if (!integer)
        put(&t, "(?:\\.[0-9]{1,%zu})?", frac_cap);
    gm_ast *x = compiled(s, &t, path);
    if (lower->set) {
        at_least(&t, lower->whole, lower->frac, lower->inclusive);
        x = both(s, x, compiled(s, &t, path), what);
    }
    if (upper->set) {
        at_most(&t, upper->whole, upper->frac, upper->inclusive);
        x = both(s, x, compiled(s, &t, path), what);
    }
    return x;
}

/* the bound of minimum/exclusiveMinimum (lower) or maximum/exclusiveMaximum,
 * the stricter when both are given; set = 0 without one, -1 after an error */
static int read_bound(gm_schema *s, json_t *node, const char *path, int lower, bound *out) {
    const char *keys[2] = {lower ? "minimum" : "maximum", lower ? "exclusiveMinimum" : "exclusiveMaximum"};
    out->set = 0;
    for (int exclusive = 0; exclusive < 2; exclusive++) {
        json_t *v = json_object_get(node, keys[exclusive]);
        if (!v)
            continue;
        if (!json_is_number(v)) {
            gm_fail(s->b, "%s.%s: must be a number%s", path, keys[exclusive],
                    json_is_boolean(v) ? " (draft 4's boolean form is not supported: give the bound itself)" : "");
            return -1;
        }
        double x = json_number_value(v);
        int stricter = !out->set || (lower ? x > out->value : x < out->value) || (x == out->value && exclusive);
        if (stricter) {
            out->value = x;
            out->inclusive = !exclusive;
            out->set = 1;
            magnitude(v, out);
        }
    }
    return out->set;
}

gm_ast *gm_schema_number(gm_schema *s, json_t *node, const char *path, int integer) {
    bound lo, hi, none = {.set = 0};
    if (read_bound(s, node, path, 1, &lo) < 0 || read_bound(s, node, path, 0, &hi) < 0)
        return NULL;
    if (!lo.set && !hi.set)
        return integer ? gm_schema_shared(s, &s->integer_rule, "a JSON integer", gm_schema_any_integer)
                       : gm_schema_shared(s, &s->number_rule, "a JSON number", gm_schema_any_number);
    if (lo.set && hi.set && lo.value > hi.value)
        return gm_fail(s->b, "%s.minimum: %g is above the maximum %g", path, lo.value, hi.value);
    if (lo.set && hi.set && lo.value == hi.value && !(lo.inclusive && hi.inclusive))
        return gm_fail(s->b, "%s: the bounds %g leave no %s between them (one is exclusive)", path, lo.value,
                       integer ? "integer" : "number");
    const char *what = gm_printf(s->b, "%s: no %s lies within its minimum and maximum", path, integer ? "integer" : "number");
    gm_ast *alt = gm_node(s->b, GM_ALT);
    /* x >= 0: magnitude x; x <= 0 written "-m": m = -x, so x's lower bound is m's upper bound */
    if (!hi.set || hi.value > 0 || (hi.value == 0 && hi.inclusive))
        alt = gm_add(s->b, alt, magnitudes(s, lo.set && lo.value >= 0 ? &lo : &none, &hi, integer, path, what));
    if (!lo.set || lo.value < 0) {
        gm_ast *m = magnitudes(s, hi.set && hi.value <= 0 ? &hi : &none, &lo, integer, path, what);
        alt = gm_add(s->b, alt, gm_seq2(s->b, gm_literal(s->b, "-"), m));
    }
    return alt;
}

gm_ast *gm_schema_any_integer(gm_schema *s) {
    static const char INTEGER[] = "-?(?:0|[1-9][0-9]{0,19})";
    return gm_regex(s->b, INTEGER, sizeof INTEGER - 1, GM_REGEX_FULL, "a JSON integer");
}

gm_ast *gm_schema_any_number(gm_schema *s) {
    static const char NUMBER[] = "-?(?:0|[1-9][0-9]{0,19})(?:\\.[0-9]{1,20})?(?:[eE][+-]?[0-9]{1,2})?";
    return gm_regex(s->b, NUMBER, sizeof NUMBER - 1, GM_REGEX_FULL, "a JSON number");
}
