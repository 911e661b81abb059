// Writes the gpt-oss course's tokenizer.bin from gpt-tokenizer's o200k
// tables, so building it needs Node and npm but no Python or tiktoken.
//
//   node export.mjs -o build/tokenizer.bin [--json build/tokenizer.json]
//
// Layout, little-endian, as the course's Python exporter writes it:
//   int32 max_token_length               longest entry below, in bytes
//   per id 0 .. 201087: float32 score, int32 len, uint8 bytes[len]
// Ids below 199998 are o200k_base ranks (score = rank); the rest are the
// o200k_harmony special tokens, stored as their name text with score -1e30.
//
// --json also writes the same vocabulary as a Hugging Face tokenizer.json
// (byte-level BPE) the way gpt-oss checkpoints ship it: model.vocab holds the
// ranks spelled in the byte-level alphabet, added_tokens the specials up to
// 200018, and the rest of the id range is left to the reader's reserved names.

import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { isDeepStrictEqual, parseArgs } from 'node:util';
import ranks from 'gpt-tokenizer/bpeRanks/o200k_base';
import { O200KHarmony } from 'gpt-tokenizer/encodingParams/o200k_harmony';
import { encode } from 'gpt-tokenizer/encoding/o200k_harmony';

const NUM_RANKS = 199998;
const VOCAB_SIZE = 201088;
const SPECIAL_SCORE = -1e30; // rounded to float32 by writeFloatLE, as struct.pack('f') does

const USAGE = 'usage: node export.mjs -o|--output <path> [--json <path>]';
const LAST_ADDED_TOKEN = 200018;

function fail(message) {
  process.stderr.write(`export.mjs: ${message}\n`);
  process.exit(1);
}

function parseCommandLine() {
  let parsed;
  try {
    parsed = parseArgs({
      options: { output: { type: 'string', short: 'o' }, json: { type: 'string' } },
      allowPositionals: false,
    });
  } catch (err) {
    fail(`${err.message}\n${USAGE}`);
  }
  const { output, json } = parsed.values;
  if (!output) fail(USAGE);
  return { output, json };
}

// The ranks module holds each token as a string when its bytes are valid
// UTF-8 and as a byte array otherwise; holes would mean a missing rank.
function rankBytes() {
  if (ranks.length !== NUM_RANKS) {
    fail(`o200k_base has ${ranks.length} ranks, expected ${NUM_RANKS}`);
  }
  const out = new Array(NUM_RANKS);
  for (let id = 0; id < NUM_RANKS; id += 1) {
    const value = ranks[id];
    if (typeof value === 'string') {
      out[id] = Buffer.from(value, 'utf8');
    } else if (Array.isArray(value)) {
      out[id] = Buffer.from(value);
    } else {
      fail(`o200k_base rank ${id} is missing`);
    }
  }
  return out;
}

// As the course's exporter does, the lone 0x00 byte token (rank 188) is
// written as the text "<0x00>"; the 00 00 token (rank 156344) stays raw.
function replaceNulToken(entries) {
  const nul = entries.findIndex((b) => b.length === 1 && b[0] === 0);
  if (nul < 0) fail('o200k_base has no single 0x00 byte token');
  entries[nul] = Buffer.from('<0x00>', 'ascii');
}

// Names come from gpt-tokenizer's own o200k_harmony map. It gives 200018
// two names, <|reserved_200018|> and <|endofprompt|>; we write the reserved
// one, the name o200k_harmony's reserved range gives it. tiktoken's decoder
// picks between the two in hash order, so the course file does not settle it.
function specialNames() {
  const { specialTokensEncoder } = O200KHarmony(ranks);
  const byId = new Map();
  for (const [name, id] of specialTokensEncoder) {
    if (!Number.isInteger(id) || id < NUM_RANKS || id >= VOCAB_SIZE) {
      fail(`special token ${name} has id ${id}, outside ${NUM_RANKS}..${VOCAB_SIZE - 1}`);
    }
    if (!byId.has(id)) byId.set(id, []);
    byId.get(id).push(name);
  }
  const names = new Map();
  for (let id = NUM_RANKS; id < VOCAB_SIZE; id += 1) {
    const candidates = byId.get(id);
    if (!candidates) fail(`special token id ${id} has no name`);
    if (candidates.length === 1) {
      names.set(id, candidates[0]);
    } else if (id === 200018 && candidates.length === 2 &&
               candidates.includes('<|reserved_200018|>') && candidates.includes('<|endofprompt|>')) {
      names.set(id, '<|reserved_200018|>');
    } else {
      fail(`special token id ${id} has names ${candidates.join(', ')}`);
    }
  }
  return { names, encoder: specialTokensEncoder };
}

function serialize(entries) {
  let maxLen = 0;
  let size = 4;
  for (const b of entries) {
    if (b.length > maxLen) maxLen = b.length;
    size += 8 + b.length;
  }
  const buf = Buffer.alloc(size);
  let off = buf.writeInt32LE(maxLen, 0);
  entries.forEach((b, id) => {
    off = buf.writeFloatLE(id < NUM_RANKS ? id : SPECIAL_SCORE, off);
    off = buf.writeInt32LE(b.length, off);
    off += b.copy(buf, off);
  });
  if (off !== size) fail(`internal: wrote ${off} bytes, sized ${size}`);
  return { buf, maxLen };
}

// GPT-2's byte-level alphabet: printable bytes other than space stand for
// themselves, the others for code points 256, 257, .. in byte order.
function byteLevelAlphabet() {
  const printable = (b) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  const letters = new Array(256);
  let next = 256;
  for (let b = 0; b < 256; b += 1) letters[b] = String.fromCodePoint(printable(b) ? b : next++);
  return letters;
}

function tokenizerJson(names) {
  const letters = byteLevelAlphabet();
  const vocab = {};
  rankBytes().forEach((bytes, rank) => {
    vocab[Array.from(bytes, (b) => letters[b]).join('')] = rank;
  });
  const added = [];
  for (let id = NUM_RANKS; id <= LAST_ADDED_TOKEN; id += 1) {
    added.push({ id, content: names.get(id), single_word: false, lstrip: false, rstrip: false,
                 normalized: false, special: true });
  }
  return JSON.stringify({ version: '1.0', added_tokens: added, model: { type: 'BPE', vocab, merges: [] } });
}

function writeAtomically(path, data) {
  const tmp = `${path}.tmp`;
  try {
    writeFileSync(tmp, data);
    renameSync(tmp, path);
  } catch (err) {
    rmSync(tmp, { force: true });
    fail(`cannot write ${path}: ${err.message}`);
  }
}

function sanityCheck(entries) {
  const got = encode('Hello world');
  if (!isDeepStrictEqual(got, [13225, 2375])) {
    fail(`o200k_harmony encode("Hello world") = [${got}], expected [13225,2375]`);
  }
  for (const [id, text] of [[13225, 'Hello'], [2375, ' world']]) {
    if (!entries[id].equals(Buffer.from(text, 'utf8'))) {
      fail(`id ${id} is ${JSON.stringify(entries[id].toString('latin1'))}, expected ${JSON.stringify(text)}`);
    }
  }
}

const { output, json } = parseCommandLine();
const entries = rankBytes();
replaceNulToken(entries);
const { names, encoder } = specialNames();
for (let id = NUM_RANKS; id < VOCAB_SIZE; id += 1) entries.push(Buffer.from(names.get(id), 'utf8'));
if (entries.length !== VOCAB_SIZE) fail(`internal: ${entries.length} entries, expected ${VOCAB_SIZE}`);
sanityCheck(entries);

const { buf, maxLen } = serialize(entries);
writeAtomically(output, buf);
if (json) writeAtomically(json, tokenizerJson(names));

const ids = ['start', 'end', 'return', 'message', 'channel', 'constrain', 'endoftext']
  .map((n) => `${n}=${encoder.get(`<|${n}|>`)}`).join(' ');
process.stdout.write(`wrote ${output}: vocab_size=${VOCAB_SIZE} max_token_length=${maxLen} bytes=${buf.length} ${ids}\n`);
