// llama.cpp's side of bench/llm_compare.py, through npm's node-llama-cpp: the
// same measurements as `tessera_llm_bench run` on the same GGUF file.
//   node llm_llamacpp.mjs MODEL.gguf prefill|decode|batch THREADS TOKENS SEQS CTX
//   node llm_llamacpp.mjs MODEL.gguf trace THREADS 0 SEQS CTX TRACE.json [DRAFT.gguf]
// prints one JSON line: tokens/s, the RSS growth past the loaded model, and
// the CPU variant of ggml that was loaded. `trace` runs bench/llm_serve_load's
// requests ({"requests": [{"prompt": ids, "max_tokens": n}]}) in a closed loop
// of SEQS sequences of one context: each takes the next request, evaluates its
// prompt and generates its tokens greedily; tokens/s counts generated tokens.
// With DRAFT.gguf, each sequence drafts with that model
// (DraftSequenceTokenPredictor, its defaults: up to 16 tokens, confidence 0.6).
import {DraftSequenceTokenPredictor, getLlama} from "node-llama-cpp";

const [, , modelPath, measure, threadsArg, tokensArg, seqsArg, ctxArg, spreadArg, draftPath] = process.argv;
const threads = Number(threadsArg), n = Number(tokensArg), ctx = Number(ctxArg);
const seqs = measure === "batch" || measure === "trace" ? Number(seqsArg) : 1;
const llama = await getLlama({gpu: false, build: "never", logLevel: "error", maxThreads: threads});
const model = await llama.loadModel({modelPath});
// Prompt ids 100 + (i * 7919) mod spread (default 20,000), as tessera_llm_bench's --spread.
const spread = measure === "trace" ? 20000 : Number(spreadArg ?? 20000);
const prompt = Array.from({length: n + seqs + 8}, (_, i) => 100 + (i * 7919) % spread);

// The weights' pages read once (a one-token evaluation in a throwaway context).
{
  const warm = await model.createContext({contextSize: 256, threads});
  await warm.getSequence().evaluateWithoutGeneratingNewTokens([1]);
  await warm.dispose();
}
const rss0 = process.memoryUsage().rss;
const context = await model.createContext({contextSize: ctx, sequences: seqs, threads, batchSize: 512,
                                           flashAttention: false});
const now = () => performance.now() / 1000;
let t0 = 0, t1 = 0, tokens = 0;
const greedy = {temperature: 0};
// n tokens generated one at a time from a sequence holding `start`.
async function decode(seq, start, count) {
  await seq.evaluateWithoutGeneratingNewTokens(start.slice(0, -1));
  return async () => {
    let k = 0;
    for await (const _ of seq.evaluate(start.slice(-1), greedy)) if (++k >= count) break;
  };
}
if (measure === "prefill") {
  const seq = context.getSequence();
  t0 = now();
  await seq.evaluateWithoutGeneratingNewTokens(prompt.slice(0, n));
  t1 = now();
  tokens = n;
} else if (measure === "decode") {
  const run = await decode(context.getSequence(), prompt.slice(0, 8), n);
  t0 = now();
  await run();
  t1 = now();
  tokens = n;
} else if (measure === "trace") {
  const requests = JSON.parse((await import("node:fs")).readFileSync(spreadArg, "utf8")).requests;
  let next = 0;
  const worker = async (seq) => {
    for (let i; (i = next++) < requests.length;) {
      await seq.eraseContextTokenRanges([{start: 0, end: seq.nextTokenIndex}]);
      let k = 0;
      for await (const _ of seq.evaluate(requests[i].prompt, greedy)) if (++k >= requests[i].max_tokens) break;
      tokens += k;
    }
  };
  let predictor = () => undefined;
  if (draftPath) {
    const draftModel = await llama.loadModel({modelPath: draftPath});
    const draftContext = await draftModel.createContext({contextSize: ctx, sequences: seqs, threads, batchSize: 512,
                                                         flashAttention: false});
    predictor = () => new DraftSequenceTokenPredictor(draftContext.getSequence());
  }
  const sequences = Array.from({length: seqs}, () => context.getSequence({tokenPredictor: predictor()}));
  t0 = now();
  await Promise.all(sequences.map(worker));
  t1 = now();
} else {
  const runs = [];
  for (let i = 0; i < seqs; ++i) runs.push(decode(context.getSequence(), prompt.slice(i, i + 8), n));
  const ready = await Promise.all(runs);
  t0 = now();
  await Promise.all(ready.map(r => r()));
  t1 = now();
  tokens = n * seqs;
}
const info = llama.systemInfo;
console.log(JSON.stringify({measure, tokens, seconds: t1 - t0, tokens_per_s: tokens / (t1 - t0),
                            rss_growth: process.memoryUsage().rss - rss0, context: context.contextSize,
                            draft: draftPath ? true : false,
                            system_info: info}));
process.exit(0);
