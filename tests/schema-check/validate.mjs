// The independent check of tests/grammar_spec.lua: each output parsed by JSON.parse and
// validated by ajv (JSON Schema 2020-12, with ajv-formats' formats) against its schema.
// Reads a JSON file [{schema, outputs: [text, ...]}, ...] (the path in argv[2]) and prints one
// line: for each case, for each output, true when it is valid, else why not.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const results = cases.map(({ schema, outputs }) => {
  const ajv = new Ajv2020({ strict: true, allErrors: false });
  addFormats(ajv);
  let validate;
  try {
    validate = ajv.compile(schema);
  } catch (e) {
    return outputs.map(() => `ajv refused the schema: ${e.message}`);
  }
  return outputs.map((text) => {
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      return `not JSON: ${e.message}`;
    }
    return validate(value) ? true : ajv.errorsText(validate.errors);
  });
});
process.stdout.write(JSON.stringify(results) + "\n");
