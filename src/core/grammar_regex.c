/* Regular expressions: the part of PCRE2's syntax that a DFA can express,
 * read into expressions over code points (docs/structured.md#regular-expressions).
 * What a DFA cannot do (backreferences, lookaround, atomic groups,
 * possessive quantifiers, recursion, word boundaries) is refused by name.
 * Classes mean what both PCRE2 and JavaScript (JSON Schema's pattern
 * dialect) agree on: \s is ASCII whitespace, \S the characters neither
 * calls whitespace, '.' leaves out both's line ends. */
#include <stdio.h>
#include <string.h>

#include "grammar_internal.h"

typedef struct {
    gm_builder *b;
    const char *s;
    size_t n, pos;
    const char *where;
    int depth;
    gm_regex_mode mode;
    size_t at; /* where the construct being read starts: errors name it */
} rx;

typedef struct {
    gm_range *r;
    int n, cap;
} range_list;

static void *rx_fail(rx *p, const char *what) {
    return gm_fail(p->b, "%s%soffset %zu: %s", p->where, *p->where ? ": " : "", p->at, what);
}

static int add_range(rx *p, range_list *l, uint32_t lo, uint32_t hi) {
    if (gm_grow(p->b, &l->r, l->n, &l->cap, sizeof *l->r))
        return -1;
    l->r[l->n++] = (gm_range){lo, hi};
    return 0;
}

static const gm_range DIGITS[] = {{'0', '9'}};
static const gm_range WORD[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
static const gm_range SPACE[] = {{'\t', '\r'}, {' ', ' '}};
/* what JavaScript's \s adds: \S leaves these out too */
static const gm_range SPACE_ANY[] = {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                                     {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                     {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

/* Adds the class escape's ranges (\d \w \s and their negations); 0 when c is none. */
static int add_class_escape(rx *p, range_list *l, char c) {
    const gm_range *set;
    int n;
    switch (c) {
    case 'd': case 'D': set = DIGITS, n = 1; break;
    case 'w': case 'W': set = WORD, n = 4; break;
    case 's': set = SPACE, n = 2; break;
    case 'S': set = SPACE_ANY, n = (int)(sizeof SPACE_ANY / sizeof *SPACE_ANY); break;
    default: return 0;
    }
    if (c >= 'a') {
        for (int i = 0; i < n; i++)
            if (add_range(p, l, set[i].lo, set[i].hi))
                return -1;
        return 1;
    }
    gm_range *neg;
    int k = gm_ranges_negate(p->b, set, n, &neg);
    for (int i = 0; i < k; i++)
        if (add_range(p, l, neg[i].lo, neg[i].hi))
            return -1;
    return k < 0 ? -1 : 1;
}

/* hex digits at pos: up to max of them (at least one); -1 when none */
static int64_t read_hex(rx *p, int max) {
    int64_t v = 0;
    int k = 0;
    while (k < max && p->pos < p->n) {
        char c = p->s[p->pos];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            break;
        v = v * 16 + d;
        if (v > GM_MAX_CODE_POINT)
            return -1;
        p->pos++;
        k++;
    }
    return k ? v : -1;
}

/* \x{..} or \u{..} (braces) or \xhh / \uhhhh: the code point, or -1 with the error set */
static int64_t hex_escape(rx *p, int fixed) {
    if (p->pos < p->n && p->s[p->pos] == '{') {
        p->pos++;
        int64_t v = read_hex(p, 8);
        if (v < 0 || p->pos >= p->n || p->s[p->pos] != '}')
            return rx_fail(p, "a \\x{...} escape needs hex digits of a code point up to 10FFFF"), -1;
        p->pos++;
        return v;
    }
    int64_t v = read_hex(p, fixed);
    if (v < 0)
        rx_fail(p, "an escape needs hex digits");
    return v;
}

/* What a refused escape letter means, or NULL for one that is not refused. */
static const char *refused_escape(char c) {
    switch (c) {
    case 'b': case 'B': return "word boundaries (\\b, \\B) are not supported: a DFA over the text has no lookaround";
    case 'k': case 'g': return "backreferences are not supported: a DFA cannot remember what a group matched";
    case 'p': case 'P': case 'X': return "Unicode properties (\\p, \\P, \\X) are not supported: write the ranges";
    case 'G': case 'K': return "\\G and \\K are not supported: they depend on how a match is searched";
    case 'v': case 'V': case 'h': case 'H': case 'R': case 'N':
        return "\\v, \\h, \\R and \\N are not supported: PCRE2 and JavaScript read them differently; write the characters";
    case 'Q': case 'E': return "\\Q...\\E quoting is not supported: escape each character";
    case 'C': case 'c': case 'o': return "\\C, \\c and \\o are not supported";
    default: return NULL;
    }
}

/* one literal character of the pattern at pos */
static int64_t literal(rx *p) {
    p->at = p->pos;
    int len;
    int32_t cp = gm_utf8_decode((const uint8_t *)p->s + p->pos, p->n - p->pos, &len);
    if (cp < 0)
        return rx_fail(p, "the pattern is not valid UTF-8"), -1;
    p->pos += (size_t)len;
    return cp;
}

/* The escape after a backslash (pos at the letter): a code point, or class
 * ranges added to l (returns -2), or -1 on error. Word boundaries and the
 * like are refused here; anchors are the caller's. */
static int64_t escape(rx *p, range_list *l) {
    p->at = p->pos - 1;
    if (p->pos >= p->n)
        return rx_fail(p, "a pattern cannot end with a backslash"), -1;
    char c = p->s[p->pos++];
    int cls = add_class_escape(p, l, c);
    if (cls)
        return cls < 0 ? -1 : -2;
    switch (c) {
    case 't': return '\t';
    case 'n': return '\n';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'a': return 7;
    case 'e': return 27;
    case 'x': return hex_escape(p, 2);
    case 'u': return hex_escape(p, 4);
    case '0':
        if (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '7')
            return rx_fail(p, "octal escapes are not supported: write \\x{...}"), -1;
        return 0;
    default: break;
    }
    const char *why = refused_escape(c);
    if (why)
        return rx_fail(p, why), -1;
    if (c >= '1' && c <= '9')
        return rx_fail(p, "backreferences (\\1) are not supported: a DFA cannot remember what a group matched"), -1;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return rx_fail(p, "unknown escape"), -1;
    p->pos--;
    return literal(p); /* an escaped punctuation or non-ASCII character: itself */
}

/* a class member: a code point, or -2 when it added class ranges */
static int64_t class_member(rx *p, range_list *l) {
    if (p->s[p->pos] == '\\') {
        p->pos++;
        if (p->pos < p->n && p->s[p->pos] == 'b') { /* backspace inside a class, in both dialects */
            p->pos++;
            return 8;
        }
        return escape(p, l);
    }
    if (p->s[p->pos] == '[' && p->pos + 1 < p->n && (p->s[p->pos + 1] == ':' || p->s[p->pos + 1] == '=' ||
                                                    p->s[p->pos + 1] == '.'))
        return rx_fail(p, "POSIX classes such as [:alpha:] are not supported: write the ranges"), -1;
    return literal(p);
}

gm_ast *gm_regex_class(gm_builder *b, const char *text, size_t len, size_t *pos, const char *where) {
    rx p = {b, text, len, *pos, where, 0, GM_REGEX_FULL, *pos - 1};
    size_t open = p.at;
    range_list l = {0};
    int negate = p.pos < p.n && p.s[p.pos] == '^';
    p.pos += (size_t)negate;
    if (p.pos < p.n && p.s[p.pos] == ']')
        return rx_fail(&p, "']' first in a class means different things to PCRE2 and JavaScript: write \\]");
    for (;;) {
        if (p.pos >= p.n) {
            p.at = open;
            return rx_fail(&p, "a class is not closed with ']'");
        }
        size_t member = p.pos;
        if (p.s[p.pos] == ']')
            break;
        int64_t lo = class_member(&p, &l);
        if (lo == -1)
            return NULL;
        int range = lo >= 0 && p.pos + 1 < p.n && p.s[p.pos] == '-' && p.s[p.pos + 1] != ']';
        if (!range) {
            if (lo >= 0 && add_range(&p, &l, (uint32_t)lo, (uint32_t)lo))
                return NULL;
            continue;
        }
        p.pos++;
        int64_t hi = class_member(&p, &l);
        if (hi == -1)
            return NULL;
        if (hi == -2)
            return rx_fail(&p, "a range cannot end with a class such as \\d");
        p.at = member;
        if (hi < lo)
            return rx_fail(&p, "a range's end is below its start");
        if (add_range(&p, &l, (uint32_t)lo, (uint32_t)hi))
            return NULL;
    }
    *pos = p.pos + 1;
    int n = gm_ranges_normalize(l.r, l.n);
    if (!negate)
        return gm_chars(b, l.r, n);
    gm_range *neg;
    n = gm_ranges_negate(b, l.r, n, &neg);
    return n < 0 ? NULL : gm_chars(b, neg, n);
}

static gm_ast *alternation(rx *p, int top);

/* What follows "(?": a group's kind; NULL for a plain group (pos after its
 * opening), an error for everything a DFA cannot do. */
static const char *group_kind(rx *p) {
    const char *s = p->s + p->pos;
    size_t left = p->n - p->pos;
    if (left >= 1 && s[0] == ':') {
        p->pos += 1;
        return NULL;
    }
    if (left >= 2 && (s[0] == '=' || s[0] == '!'))
        return "lookahead (?= (?! is not supported: a DFA over the text has no lookaround";
    if (left >= 2 && s[0] == '<' && (s[1] == '=' || s[1] == '!'))
        return "lookbehind (?<= (?<! is not supported: a DFA over the text has no lookaround";
    /* a named group, (?<name>...), (?P<name>...) or (?'name'...), matches as a plain one */
    const char *name = left >= 1 && s[0] == '<' ? s + 1 : left >= 2 && s[0] == 'P' && s[1] == '<' ? s + 2
                     : left >= 1 && s[0] == '\'' ? s + 1 : NULL;
    if (name) {
        const char *end = memchr(name, s[0] == '\'' ? '\'' : '>', (size_t)(s + left - name));
        if (!end)
            return "a group name is not closed";
        p->pos += (size_t)(end - s) + 1;
        return NULL;
    }
    if (left >= 1 && s[0] == '>')
        return "atomic groups (?> are not supported: they change what a DFA would match";
    if (left >= 1 && (s[0] == 'R' || s[0] == '&' || (s[0] >= '0' && s[0] <= '9') || s[0] == '+' || s[0] == '-' ||
                      (s[0] == 'P' && left >= 2 && s[1] == '>')))
        return "recursion and subroutine calls (?R) (?1) are not supported: use an EBNF grammar";
    if (left >= 1 && s[0] == '(')
        return "conditional groups (?( are not supported";
    if (left >= 1 && s[0] == '|')
        return "branch reset groups (?| are not supported: write a plain group";
    if (left >= 1 && s[0] == 'C')
        return "callouts (?C are not supported";
    return "inline options such as (?i) are not supported: write the characters each case allows";
}

/* {n}, {n,}, {n,m} or {,m} at pos (just after '{'): 1 with *min, *max set and
 * pos after '}', 0 (pos unchanged) when it is a literal '{' as PCRE2 reads it. */
static int counted(rx *p, int *min, int *max) {
    size_t at = p->pos;
    long lo = -1, hi = -1;
    for (long v = 0; at < p->n && p->s[at] >= '0' && p->s[at] <= '9'; at++)
        lo = v = v < 100000 ? v * 10 + (p->s[at] - '0') : v;
    int comma = at < p->n && p->s[at] == ',';
    at += (size_t)comma;
    for (long v = 0; comma && at < p->n && p->s[at] >= '0' && p->s[at] <= '9'; at++)
        hi = v = v < 100000 ? v * 10 + (p->s[at] - '0') : v;
    if (at >= p->n || p->s[at] != '}' || (lo < 0 && hi < 0))
        return 0;
    *min = lo < 0 ? 0 : (int)lo;
    *max = comma ? (hi < 0 ? GM_UNBOUNDED : (int)hi) : *min;
    p->pos = at + 1;
    return 1;
}

/* the quantifiers after an atom, applied to it */
static gm_ast *quantified(rx *p, gm_ast *atom) {
    while (atom && p->pos < p->n) {
        char c = p->s[p->pos];
        int min, max;
        p->at = p->pos;
        if (c == '?' || c == '*' || c == '+') {
            p->pos++;
            min = c == '+';
            max = c == '?' ? 1 : GM_UNBOUNDED;
        } else if (c == '{') {
            p->pos++;
            if (!counted(p, &min, &max)) {
                p->pos--;
                return atom;
            }
            if (max != GM_UNBOUNDED && max < min)
                return rx_fail(p, "a quantifier's maximum is below its minimum");
        } else {
            return atom;
        }
        if (p->pos < p->n && p->s[p->pos] == '+')
            return rx_fail(p, "possessive quantifiers (*+ ++ ?+) are not supported: they change what a DFA would match");
        p->pos += p->pos < p->n && p->s[p->pos] == '?'; /* lazy: the same strings match in full */
        atom = gm_repeat(p->b, atom, min, max);
        if (p->pos < p->n && (p->s[p->pos] == '*' || p->s[p->pos] == '+' || p->s[p->pos] == '?' ||
                              (p->s[p->pos] == '{' && p->pos + 1 < p->n && p->s[p->pos + 1] >= '0' &&
                               p->s[p->pos + 1] <= '9')))
            return rx_fail(p, "a quantifier cannot follow another: group the first");
    }
    return atom;
}

/* one atom at pos (not a quantifier, '|' or ')') */
static gm_ast *atom(rx *p) {
    char c = p->s[p->pos];
    size_t open = p->at = p->pos;
    if (c == '(') {
        p->pos++;
        if (p->pos < p->n && p->s[p->pos] == '*')
            return rx_fail(p, "verbs such as (*UTF) are not supported");
        if (p->pos < p->n && p->s[p->pos] == '?') {
            p->pos++;
            const char *why = group_kind(p);
            if (why)
                return rx_fail(p, why);
        }
        if (++p->depth > GM_MAX_NESTING)
            return rx_fail(p, "groups nest too deeply");
        gm_ast *x = alternation(p, 0);
        p->depth--;
        if (x && (p->pos >= p->n || p->s[p->pos] != ')')) {
            p->at = open;
            return rx_fail(p, "a group is not closed with ')'");
        }
        p->pos++;
        return x;
    }
    if (c == '[') {
        p->pos++;
        return gm_regex_class(p->b, p->s, p->n, &p->pos, p->where);
    }
    if (c == '.') {
        static const gm_range DOT[] = {{0, '\n' - 1}, {'\n' + 1, '\r' - 1}, {'\r' + 1, 0x2027}, {0x202A, GM_MAX_CODE_POINT}};
        p->pos++;
        return gm_chars(p->b, DOT, 4);
    }
    if (c == '*' || c == '+' || c == '?')
        return rx_fail(p, "a quantifier does not follow anything it could repeat");
    range_list l = {0};
    int64_t cp = c == '\\' ? (p->pos++, escape(p, &l)) : literal(p);
    if (cp == -1)
        return NULL;
    if (cp == -2)
        return gm_chars(p->b, l.r, l.n);
    return gm_char_range(p->b, (uint32_t)cp, (uint32_t)cp);
}

/* An anchor at pos: '^' or \A (start), '$', \z or \Z (end); 0 when none. */
static int anchor(rx *p) {
    char c = p->s[p->pos];
    if (c == '^' || c == '$')
        return c;
    if (c == '\\' && p->pos + 1 < p->n) {
        char e = p->s[p->pos + 1];
        if (e == 'A')
            return '^';
        if (e == 'z' || e == 'Z')
            return '$';
    }
    return 0;
}

/* A sequence up to '|', ')' or the end. At the top, '^' may open it and '$'
 * close it: *anchors gets 1 for the start, 2 for the end. */
static gm_ast *sequence(rx *p, int top, int *anchors) {
    gm_ast *seq = gm_node(p->b, GM_SEQ);
    while (seq && p->pos < p->n && p->s[p->pos] != '|' && p->s[p->pos] != ')') {
        int a = anchor(p);
        if (a) {
            size_t len = p->s[p->pos] == '\\' ? 2 : 1;
            int at_start = a == '^' && seq->n == 0 && !(*anchors & 1);
            int at_end = a == '$' && (p->pos + len == p->n || p->s[p->pos + len] == '|');
            p->at = p->pos;
            if (!top || (!at_start && !at_end))
                return rx_fail(p, "anchors are only supported at the start (^) and end ($) of the whole pattern");
            *anchors |= a == '^' ? 1 : 2;
            p->pos += len;
            continue;
        }
        seq = gm_add(p->b, seq, quantified(p, atom(p)));
    }
    return seq;
}

/* Characters anywhere before or after an unanchored pattern (JSON Schema's search). */
static gm_ast *anything(gm_builder *b) { return gm_repeat(b, gm_char_range(b, 0, GM_MAX_CODE_POINT), 0, GM_UNBOUNDED); }

static gm_ast *alternation(rx *p, int top) {
    gm_ast *alt = gm_node(p->b, GM_ALT);
    for (;;) {
        int anchors = 0;
        gm_ast *seq = sequence(p, top, &anchors);
        if (seq && top && p->mode == GM_REGEX_SEARCH) {
            gm_ast *padded = gm_node(p->b, GM_SEQ);
            if (!(anchors & 1))
                padded = gm_add(p->b, padded, anything(p->b));
            padded = gm_add(p->b, padded, seq);
            if (!(anchors & 2))
                padded = gm_add(p->b, padded, anything(p->b));
            seq = padded;
        }
        alt = gm_add(p->b, alt, seq);
        if (!alt || p->pos >= p->n || p->s[p->pos] != '|')
            return alt;
        p->pos++;
    }
}

gm_ast *gm_regex(gm_builder *b, const char *text, size_t len, gm_regex_mode mode, const char *where) {
    rx p = {b, text, len, 0, where, 0, mode, 0};
    gm_ast *x = alternation(&p, 1);
    p.at = p.pos;
    if (x && p.pos < p.n)
        return rx_fail(&p, "unmatched ')'");
    return x;
}

void gm_mark_json(gm_ast *x) {
    switch (x->kind) {
    case GM_CHARS: x->json = 1; break;
    case GM_SEQ: case GM_ALT: case GM_REPEAT: case GM_AND:
        for (int i = 0; i < x->n; i++)
            gm_mark_json(x->kids[i]);
        break;
    default: break; /* the regex reader writes no other kinds */
    }
}
