// Encodes texts the way OpenAI's stack does, for comparing gptoss's o200k
// mode with an independent encoder (tests/tokenizer_spec.lua):
//
//   node encode.mjs < texts.json > ids.json
//
// Input: a JSON array of strings; output: a JSON array of their id arrays,
// encoded by gpt-tokenizer with o200k_harmony (special-token names are plain
// text here, as in gptoss's encode without special = true).

import { readFileSync } from 'node:fs';
import { encode } from 'gpt-tokenizer/encoding/o200k_harmony';

const texts = JSON.parse(readFileSync(0, 'utf8'));
const ids = texts.map((text) => encode(text, { disallowedSpecial: new Set() }));
process.stdout.write(JSON.stringify(ids));
