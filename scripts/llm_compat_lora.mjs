// llama.cpp's side of the LoRA comparison (scripts/llm_compat.sh): the base
// GGUF with Tessera's GGUF adapter loaded by llama.cpp; the greedy
// continuation of a prompt, with each step's top-two log-probability margin
// (a near tie may part two correct implementations).
//   node llm_compat_lora.mjs MODEL.gguf ADAPTER.gguf PROMPT N OUT.json
import {getLlama} from "node-llama-cpp";
import {writeFileSync} from "node:fs";

const [, , modelPath, adapterPath, prompt, n, outPath] = process.argv;
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: 256, threads: 1, lora: {adapters: [{filePath: adapterPath}]}});
const sequence = context.getSequence();
const options = {temperature: 1, topK: 1 << 20, topP: 1, minP: 0};
const tokens = model.tokenize(prompt, true);
const withBos = model.tokens.bos != null && tokens[0] !== model.tokens.bos ? [model.tokens.bos, ...tokens] : tokens;
let last = await sequence.controlledEvaluate(withBos.map((t, i) => i === withBos.length - 1
  ? [t, {generateNext: {probabilities: true, options}}] : t));
const greedy = [], margins = [];
for (let i = 0; i < Number(n); ++i) {
  let best = -1, bestP = -1, secondP = -1;
  for (const [token, p] of last[last.length - 1].next.probabilities) {
    if (p > bestP) { secondP = bestP; bestP = p; best = token; }
    else if (p > secondP) secondP = p;
  }
  greedy.push(best);
  margins.push(Math.log(bestP) - Math.log(Math.max(secondP, 1e-300)));
  last = await sequence.controlledEvaluate([[best, {generateNext: {probabilities: true, options}}]]);
}
writeFileSync(outPath, JSON.stringify({prompt_tokens: withBos, greedy, margins, text: model.detokenize(greedy)}));
console.log(`llama.cpp with the adapter: ${JSON.stringify(model.detokenize(greedy))}`);
process.exit(0);
