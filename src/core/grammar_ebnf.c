/* The EBNF grammar language (docs/structured.md#ebnf-grammars), GBNF-like:
 *
 *   # a comment
 *   root   ::= "{" pair ("," pair)* "}"
 *   pair   ::= key ":" value
 *   key    ::= /"[a-z]+"/                  # a regex, matched whole
 *   value  ::= [0-9]+ | "true" | %json {"type": "string", "maxLength": 8}
 *
 * A rule is `name ::= alternatives`, running until the next `name ::=`;
 * items are rule names, "strings" or 'strings' (escapes \n \t \r \\ \" \'
 * \xHH \uHHHH \u{H..}), [classes] as in regexes, . (any character),
 * /regexes/, groups, %json followed by a JSON schema, and the postfixes
 * ? * + {m} {m,} {m,n}. The start rule is root. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

typedef struct {
    gm_builder *b;
    const char *s;
    size_t n, pos;
    int line, depth;
    int first; /* rules before this one are not the EBNF's (none: EBNF is read first) */
} ebnf;

static void *fail_at(ebnf *p, const char *what) { return gm_fail(p->b, "line %d: %s", p->line, what); }

/* skips spaces, newlines and comments */
static void skip(ebnf *p) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c == '#')
            while (p->pos < p->n && p->s[p->pos] != '\n')
                p->pos++;
        else if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            p->line += c == '\n', p->pos++;
        else
            return;
    }
}

static int name_char(char c, int first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && ((c >= '0' && c <= '9') || c == '-'));
}

/* the length of a name at pos (0: none) */
static size_t name_at(const ebnf *p, size_t pos) {
    size_t k = 0;
    while (pos + k < p->n && name_char(p->s[pos + k], k == 0))
        k++;
    return k;
}

/* whether a rule definition (`name ::=`) starts at pos */
static int definition_at(ebnf *p, size_t pos) {
    size_t k = name_at(p, pos);
    if (!k)
        return 0;
    ebnf look = *p;
    look.pos = pos + k;
    skip(&look);
    return look.pos + 3 <= p->n && !memcmp(p->s + look.pos, "::=", 3);
}

/* the rule of a name, added (not yet defined: line -first use) when new */
static int rule_named(ebnf *p, const char *name, size_t len) {
    for (int r = p->first; r < p->b->nrules; r++)
        if (p->b->rules[r].name[0] != '%' && strlen(p->b->rules[r].name) == len && !memcmp(p->b->rules[r].name, name, len))
            return r;
    char copy[256];
    if (len >= sizeof copy)
        return fail_at(p, "a rule name is too long"), -1;
    memcpy(copy, name, len);
    copy[len] = 0;
    return gm_rule_add(p->b, copy, -p->line);
}

/* a quoted string's code points, written as UTF-8 */
static gm_ast *string(ebnf *p) {
    char quote = p->s[p->pos++];
    uint8_t *out = gm_alloc(p->b, 4 * (p->n - p->pos) + 1);
    size_t k = 0;
    while (out && p->pos < p->n && p->s[p->pos] != quote) {
        char c = p->s[p->pos++];
        if (c == '\n')
            return fail_at(p, "a string is not closed before the line ends");
        if (c != '\\') {
            out[k++] = (uint8_t)c;
            continue;
        }
        if (p->pos >= p->n)
            break;
        char e = p->s[p->pos++];
        char simple = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == '\\' || e == '"' || e == '\'' ? e : 0;
        if (simple) {
            out[k++] = (uint8_t)simple;
            continue;
        }
        if (e != 'x' && e != 'u')
            return fail_at(p, "unknown escape in a string (known: \\n \\t \\r \\\\ \\\" \\' \\xHH \\uHHHH \\u{H...})");
        int braces = p->pos < p->n && p->s[p->pos] == '{';
        size_t digits = 0, max = braces ? 6 : e == 'x' ? 2 : 4;
        uint32_t cp = 0;
        p->pos += (size_t)braces;
        for (; digits < max && p->pos < p->n && strchr("0123456789abcdefABCDEF", p->s[p->pos]) && p->s[p->pos]; digits++) {
            char h = p->s[p->pos++];
            cp = cp * 16 + (uint32_t)(h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
        }
        if (!digits || (braces && (p->pos >= p->n || p->s[p->pos++] != '}')) || cp > GM_MAX_CODE_POINT ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return fail_at(p, "a \\x or \\u escape needs the hex digits of a code point (no surrogates)");
        k += (size_t)gm_utf8_encode(cp, out + k);
    }
    if (!out)
        return NULL;
    if (p->pos >= p->n)
        return fail_at(p, "a string is not closed");
    p->pos++;
    return gm_bytes(p->b, out, k);
}

/* /regex/: the text up to the next unescaped slash, as a regex of the whole lexeme */
static gm_ast *regex(ebnf *p) {
    size_t start = ++p->pos;
    while (p->pos < p->n && p->s[p->pos] != '/' && p->s[p->pos] != '\n')
        p->pos += p->s[p->pos] == '\\' && p->pos + 1 < p->n ? 2 : 1;
    if (p->pos >= p->n || p->s[p->pos] != '/')
        return fail_at(p, "a /regex/ is not closed with '/' on its line");
    p->pos++;
    return gm_regex(p->b, p->s + start, p->pos - 1 - start, GM_REGEX_FULL, gm_printf(p->b, "line %d: regex", p->line));
}

/* %json {...}: the schema's rule */
static gm_ast *json_schema(ebnf *p) {
    p->pos += 5;
    skip(p);
    json_error_t error;
    json_t *v = json_loadb(p->s + p->pos, p->n - p->pos, JSON_DISABLE_EOF_CHECK, &error);
    if (!v)
        return gm_fail(p->b, "line %d: %%json: the schema is not valid JSON: %s", p->line + error.line - 1, error.text);
    json_decref(v);
    size_t len = error.position;
    const char *name = gm_printf(p->b, "%%json at line %d: $", p->line);
    int rule = name ? gm_schema_rule(p->b, p->s + p->pos, len, 0, name) : -1;
    for (size_t i = 0; i < len; i++)
        p->line += p->s[p->pos + i] == '\n';
    p->pos += len;
    return gm_ref(p->b, rule);
}

static gm_ast *alternatives(ebnf *p);

static gm_ast *primary(ebnf *p) {
    char c = p->s[p->pos];
    if (c == '"' || c == '\'')
        return string(p);
    if (c == '/')
        return regex(p);
    if (c == '.') {
        p->pos++;
        return gm_char_range(p->b, 0, GM_MAX_CODE_POINT);
    }
    if (c == '[') {
        p->pos++;
        return gm_regex_class(p->b, p->s, p->n, &p->pos, gm_printf(p->b, "line %d: class", p->line));
    }
    if (c == '(') {
        p->pos++;
        if (++p->depth > GM_MAX_NESTING)
            return fail_at(p, "groups nest too deeply");
        gm_ast *x = alternatives(p);
        p->depth--;
        skip(p);
        if (x && (p->pos >= p->n || p->s[p->pos] != ')'))
            return fail_at(p, "a group is not closed with ')'");
        p->pos++;
        return x;
    }
    if (p->n - p->pos >= 5 && !memcmp(p->s + p->pos, "%json", 5))
        return json_schema(p);
    size_t k = name_at(p, p->pos);
    if (!k)
        return fail_at(p, "expected a rule name, a \"string\", a [class], a /regex/, '.', '(' or %json");
    int rule = rule_named(p, p->s + p->pos, k);
    p->pos += k;
    return gm_ref(p->b, rule);
}

/* a number of a {m,n} postfix; -1 when none (one past the limit stays
 * there, for gm_repeat to refuse) */
static long count(ebnf *p) {
    long v = -1;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (p->s[p->pos++] - '0');
        if (v > GM_MAX_REPEAT)
            v = GM_MAX_REPEAT + 1;
    }
    return v;
}

static gm_ast *postfixed(ebnf *p, gm_ast *x) {
    for (;;) {
        skip(p);
        if (!x || p->pos >= p->n)
            return x;
        char c = p->s[p->pos];
        if (c == '?' || c == '*' || c == '+') {
            p->pos++;
            x = gm_repeat(p->b, x, c == '+', c == '?' ? 1 : GM_UNBOUNDED);
            continue;
        }
        if (c != '{')
            return x;
        p->pos++;
        long min = count(p), max = min;
        if (p->pos < p->n && p->s[p->pos] == ',')
            p->pos++, max = count(p);
        if (min < 0 || p->pos >= p->n || p->s[p->pos++] != '}')
            return fail_at(p, "a repetition is {m}, {m,} or {m,n}");
        if (max >= 0 && max < min)
            return fail_at(p, "a repetition's maximum is below its minimum");
        x = gm_repeat(p->b, x, (int)min, max < 0 ? GM_UNBOUNDED : (int)max);
    }
}

static gm_ast *alternatives(ebnf *p) {
    gm_ast *alt = gm_node(p->b, GM_ALT);
    for (;;) {
        gm_ast *seq = gm_node(p->b, GM_SEQ);
        for (skip(p); seq && p->pos < p->n && !strchr("|)", p->s[p->pos]) && !definition_at(p, p->pos); skip(p))
            seq = gm_add(p->b, seq, postfixed(p, primary(p)));
        alt = gm_add(p->b, alt, seq);
        if (!alt || p->pos >= p->n || p->s[p->pos] != '|')
            return alt;
        p->pos++;
    }
}

int gm_ebnf_root(gm_builder *b, const char *text, size_t len) {
    ebnf p = {b, text, len, 0, 1, 0, b->nrules};
    for (skip(&p); !b->failed && p.pos < p.n; skip(&p)) {
        if (!definition_at(&p, p.pos))
            return fail_at(&p, "expected a rule: name ::= ..."), -1;
        size_t k = name_at(&p, p.pos);
        int rule = rule_named(&p, p.s + p.pos, k), line = p.line;
        if (rule < 0)
            return -1;
        if (b->rules[rule].body) {
            gm_fail(b, "line %d: rule '%s' is defined twice (first at line %d)", line, b->rules[rule].name, b->rules[rule].line);
            return -1;
        }
        p.pos += k;
        skip(&p);
        p.pos += 3;
        gm_ast *body = alternatives(&p);
        b->rules[rule].body = body;
        b->rules[rule].line = line;
        if (body && p.pos < p.n && p.s[p.pos] == ')')
            return fail_at(&p, "unmatched ')'"), -1;
    }
    int root = -1;
    for (int r = p.first; !b->failed && r < b->nrules; r++) {
        if (b->rules[r].name[0] != '%' && !b->rules[r].body)
            return gm_fail(b, "line %d: rule '%s' is not defined", -b->rules[r].line, b->rules[r].name), -1;
        if (!strcmp(b->rules[r].name, "root"))
            root = r;
    }
    if (root < 0 && !b->failed)
        gm_fail(b, "no rule named root (the start rule)");
    return b->failed ? -1 : root;
}
