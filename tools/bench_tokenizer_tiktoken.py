#!/usr/bin/env python3
"""tiktoken's o200k encode on one core, the anchor bench_tokenizer.lua --mode o200k is
compared with: the same text (a file repeated to --mb megabytes), one call and one call per
line. tiktoken's Encoding is built from tokenizer.bin's ranks (ids below 199998, as the
exporter wrote them from o200k_base), so nothing is downloaded. With --ids FILE it also checks
that tiktoken's ids of the one-call encode equal those in FILE (one id per line). Prints a
table and one JSON line.

  python3 tools/bench_tokenizer_tiktoken.py [--text README.md] [--mb 8]
      [--tokenizer build/tokenizer.bin] [--ids ids.txt]
"""
import argparse
import json
import struct
import time

import tiktoken

NUM_RANKS = 199998
# tiktoken's o200k pattern (the one src/core/o200k.c runs)
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])


def ranks_from(path):
    with open(path, "rb") as f:
        data = f.read()
    pos, ranks = 4, {}
    for rank in range(NUM_RANKS):
        _, length = struct.unpack_from("<fi", data, pos)
        pos += 8
        ranks[data[pos:pos + length]] = rank
        pos += length
    return ranks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", default="README.md")
    parser.add_argument("--mb", type=float, default=8)
    parser.add_argument("--tokenizer", default="build/tokenizer.bin")
    parser.add_argument("--ids", help="ids to compare with, one a line")
    a = parser.parse_args()

    enc = tiktoken.Encoding("o200k_from_tokenizer_bin", pat_str=O200K_PATTERN,
                            mergeable_ranks=ranks_from(a.tokenizer), special_tokens={})
    with open(a.text, "rb") as f:
        sample = f.read().decode("utf-8")
    text = sample * -(-int(a.mb * 1e6) // len(sample.encode("utf-8")))
    nbytes = len(text.encode("utf-8"))

    t0 = time.perf_counter()
    ids = enc.encode_ordinary(text)
    encode_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    line_tokens = sum(len(enc.encode_ordinary(line)) for line in text.split("\n") if line)
    lines_s = time.perf_counter() - t0

    same = None
    if a.ids:
        with open(a.ids) as f:
            same = [int(x) for x in f.read().split()] == ids

    mb = nbytes / 1e6
    result = {"bench": "tokenizer_tiktoken", "tiktoken": tiktoken.__version__, "text": a.text,
              "bytes": nbytes, "tokens": len(ids), "line_tokens": line_tokens,
              "encode_mb_per_s": mb / encode_s, "encode_lines_mb_per_s": mb / lines_s,
              "same_ids": same}
    print("%-24s %10s %10s %10s" % ("operation", "MB", "seconds", "MB/s"))
    print("%-24s %10.2f %10.3f %10.2f" % ("encode (one call)", mb, encode_s, result["encode_mb_per_s"]))
    print("%-24s %10.2f %10.3f %10.2f" % ("encode (one per line)", mb, lines_s, result["encode_lines_mb_per_s"]))
    print("%d tokens; ids equal to --ids: %s" % (len(ids), same))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
