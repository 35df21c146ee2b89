// llama.cpp's side of scripts/llm_compat.sh's embedding check: node-llama-cpp's
// embedding context (the last token's final hidden state for a llama model,
// whose GGUF names no pooling) for each list of token ids.
//   node llm_compat_embed.mjs MODEL.gguf IDS.json     (IDS.json: [[ids], ...], BOS first)
// prints one JSON line: the vectors.
import fs from "node:fs";
import {getLlama} from "node-llama-cpp";

const [, , modelPath, idsPath] = process.argv;
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createEmbeddingContext({contextSize: 256, threads: 2});
const out = [];
for (const ids of JSON.parse(fs.readFileSync(idsPath, "utf8"))) out.push((await context.getEmbeddingFor(ids)).vector);
console.log(JSON.stringify(out));
