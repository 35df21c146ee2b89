// llama.cpp's token ids (through node-llama-cpp) for random strings, from a
// seeded generator, on each vocabulary file given. Used by scripts/llm_compat.sh;
// Tessera compares in Tokenizer.MatchesLlamaCppOnRandomStrings.
//   node llm_compat_tokenize.mjs COUNT SEED OUT.json VOCAB.gguf...
//   -> {"texts": [...], "vocabs": [{"path", "ids": [[...]...], "special": [ids with special tokens parsed],
//                                    "text": [ids detokenized]}]}
import {getLlama} from "node-llama-cpp";
import {writeFileSync} from "node:fs";

const [, , count, seed, outPath, ...vocabs] = process.argv;

// Mulberry32: a small seeded generator, so the strings are the same each run.
let state = Number(seed) >>> 0;
function rand() {
  state = (state + 0x6D2B79F5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = a => a[Math.floor(rand() * a.length)];
const range = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

// Characters from the classes the pre-tokenizers tell apart, ASCII most often.
const pieces = [
  () => String.fromCodePoint(range(0x20, 0x7E)),
  () => String.fromCodePoint(range(0x20, 0x7E)),
  () => String.fromCodePoint(range(0x61, 0x7A)).repeat(range(1, 6)),
  () => pick([" ", " ", "  ", "\n", "\n\n", "\t", "\r\n", "\u00A0", "\u3000", "\u2009", "\u0085"]),
  () => pick(["'s", "'t", "'re", "'VE", "'M", "'ll", "'D", "'x"]),
  () => String(range(0, 99999)),
  () => String.fromCodePoint(range(0xC0, 0x24F)),                     // Latin
  () => String.fromCodePoint(range(0x391, 0x3C9), range(0x410, 0x44F)),  // Greek, Cyrillic
  () => String.fromCodePoint(range(0x4E00, 0x9FFF)),                  // CJK
  () => String.fromCodePoint(range(0x3040, 0x30FF)),                  // kana
  () => String.fromCodePoint(range(0x0660, 0x0669), range(0x0966, 0x096F)),  // Arabic-Indic, Devanagari digits
  () => String.fromCodePoint(range(0x0300, 0x036F)),                  // combining marks
  () => String.fromCodePoint(range(0x1F300, 0x1F64F)),                // emoji
  () => String.fromCodePoint(range(0x2000, 0x2BFF)),                  // punctuation, symbols
  () => { let c; do c = range(0xA0, 0xFFFD); while (c >= 0xD800 && c <= 0xDFFF); return String.fromCodePoint(c); },
  () => String.fromCodePoint(range(0x10000, 0x2FFFF)),
  () => pick(["<s>", "</s>", "<|endoftext|>", "<unk>", "<|im_start|>"]),
];
const texts = [];
for (let i = 0; i < Number(count); ++i) {
  let s = "";
  for (let n = range(1, 24); n > 0; --n) s += pick(pieces)();
  texts.push(s);
}

const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const out = {texts, vocabs: []};
for (const path of vocabs) {
  const model = await llama.loadModel({modelPath: path, vocabOnly: true});
  const ids = texts.map(t => Array.from(model.tokenize(t, false)));
  // With special tokens parsed, as in a chat template's own text.
  const special = texts.map(t => Array.from(model.tokenize(t, true)));
  out.vocabs.push({path, ids, special, text: ids.map(x => model.detokenize(x, false))});
  await model.dispose();
}
writeFileSync(outPath, JSON.stringify(out));
process.exit(0);
