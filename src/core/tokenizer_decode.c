/* Decode (tokenizer.h): an id's bytes, "<0xHH>" read as the byte it names,
 * and where a stream of them can be cut without splitting a UTF-8
 * sequence. */
#include "tokenizer_internal.h"

static int hex_digit(uint8_t c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

const uint8_t *gptoss_tokenizer_piece(const gptoss_tokenizer *t, int id, size_t *len) {
    const uint8_t *s = gptoss_tokenizer_entry(t, id, len, NULL);
    if (*len == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') {
        int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
        if (hi >= 0 && lo >= 0) {
            *len = 1;
            return &t->byte_value[hi * 16 + lo];
        }
    }
    return s;
}

size_t gptoss_utf8_complete_prefix(const uint8_t *s, size_t n) {
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        uint8_t c = s[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back for its lead */
        /* C0, C1 and F5..FF never start a valid sequence: nothing to wait for */
        size_t need = c < 0xC2 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 1;
        return back < need ? n - back : n;
    }
    return n;
}
