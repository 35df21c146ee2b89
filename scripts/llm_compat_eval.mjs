// llama.cpp's log-probs (through node-llama-cpp) for each position of a
// token sequence: every vocabulary entry, at temperature 1 with no top-k,
// top-p or min-p cut. Used by scripts/llm_compat.sh.
//   node llm_compat_eval.mjs MODEL.gguf '[1, 2, 3]' VOCAB_SIZE  ->  [[logp of each token] per position]
import {getLlama} from "node-llama-cpp";

const [, , modelPath, idsJson, vocab] = process.argv;
const ids = JSON.parse(idsJson);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: Math.max(64, ids.length), threads: 1});
const sequence = context.getSequence();
const n = Number(vocab);
const options = {temperature: 1, topK: n, topP: 1, minP: 0};
const out = await sequence.controlledEvaluate(ids.map(t => [t, {generateNext: {probabilities: true, options}}]));
const logprobs = out.map(o => {
  const row = new Array(n).fill(null);
  for (const [token, p] of o.next.probabilities) row[token] = Math.log(p);
  return row;
});
console.log(JSON.stringify(logprobs));
process.exit(0);
