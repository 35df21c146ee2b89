// llama.cpp's side of the fortunes models' comparison (scripts/llm_compat.sh,
// bench/llm_compare.py): on the windows Tessera evaluated (its eval JSON from
// `tessera_llm_bench eval`), the negative log-likelihood of each next token,
// and the greedy continuation of the same prompt with each step's top-two
// margin; and along Tessera's greedy path (teacher-forced), llama.cpp's top
// token and top-two margin at each step, so every position is compared even
// after the two free-running paths part. Same file, same token ids.
//   node llm_compat_fortunes.mjs MODEL.gguf TESSERA_EVAL.json OUT.json
import {getLlama} from "node-llama-cpp";
import {readFileSync, writeFileSync} from "node:fs";

const [, , modelPath, tesseraPath, outPath] = process.argv;
const mine = JSON.parse(readFileSync(tesseraPath, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const n = mine.windows[0].length;
const context = await model.createContext({contextSize: Math.max(256, n + 16), threads: 1, batchSize: n});
const sequence = context.getSequence();
const options = {temperature: 1, topK: 1 << 20, topP: 1, minP: 0};
const logp = (probs, token) => Math.log(probs.get(token) ?? 0);

const windowNll = [];
let nll = 0, count = 0;
const t0 = performance.now();
for (const w of mine.windows) {
  await sequence.clearHistory();
  const inputs = w.slice(0, -1).map(t => [t, {generateNext: {probabilities: true, options}}]);
  const out = await sequence.controlledEvaluate(inputs);
  let s = 0;
  for (let i = 0; i < out.length; ++i) s -= logp(out[i].next.probabilities, w[i + 1]);
  windowNll.push(s);
  nll += s;
  count += out.length;
}
const evalSeconds = (performance.now() - t0) / 1000;

const top2 = probs => {
  let best = -1, bestP = -1, secondP = -1;
  for (const [token, p] of probs) {
    if (p > bestP) { secondP = bestP; bestP = p; best = token; }
    else if (p > secondP) secondP = p;
  }
  return [best, Math.log(bestP) - Math.log(Math.max(secondP, 1e-300))];
};
await sequence.clearHistory();
const prompt = mine.greedy_prompt;
let last = await sequence.controlledEvaluate(prompt.map((t, i) => i === prompt.length - 1
  ? [t, {generateNext: {probabilities: true, options}}] : t));
const greedy = [], margins = [];
for (let i = 0; i < mine.greedy.length; ++i) {
  const [best, margin] = top2(last[last.length - 1].next.probabilities);
  greedy.push(best);
  margins.push(margin);
  last = await sequence.controlledEvaluate([[best, {generateNext: {probabilities: true, options}}]]);
}
await sequence.clearHistory();
const path = [...prompt, ...mine.greedy.slice(0, -1)];
const forcedOut = await sequence.controlledEvaluate(path.map((t, i) => i >= prompt.length - 1
  ? [t, {generateNext: {probabilities: true, options}}] : t));
const forced = forcedOut.slice(prompt.length - 1).map(o => top2(o.next.probabilities));
writeFileSync(outPath, JSON.stringify({window_nll: windowNll, nll, count, perplexity: Math.exp(nll / count),
                                       eval_seconds: evalSeconds, greedy, margins, forced}));
process.exit(0);
