// Chat templates rendered by @huggingface/jinja (the renderer node-llama-cpp
// ships) on a suite of conversations, for Tessera to render byte for byte.
// Used by scripts/llm_compat.sh; Tessera compares in
// ChatTemplate.MatchesHuggingFaceJinja.
//   node llm_compat_chat.mjs OUT.json NAME=TEMPLATE.jinja...
//   -> {"cases": [{"template": NAME, "source": "...", "context": {...}, "output": "..." | null, "error": "..."}]}
import {Template} from "@huggingface/jinja";
import {readFileSync, writeFileSync} from "node:fs";

const [, , outPath, ...templates] = process.argv;

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather now, for a city.",
    parameters: {
      type: "object",
      properties: {location: {type: "string", description: "A city"}, unit: {type: "string", enum: ["celsius", "fahrenheit"]}},
      required: ["location"],
    },
  },
};
const call = {id: "call12345", type: "function", function: {name: "get_weather", arguments: {location: "Paris", unit: "celsius"}}};

const conversations = {
  "one user turn": [{role: "user", content: "Hello!"}],
  "system and user": [{role: "system", content: "You are terse."}, {role: "user", content: "Name a colour."}],
  "multi-turn": [
    {role: "system", content: "You answer in French."},
    {role: "user", content: "Hi"},
    {role: "assistant", content: "Bonjour !"},
    {role: "user", content: "How are you?"},
  ],
  "alternating, no system": [
    {role: "user", content: "1+1?"},
    {role: "assistant", content: "2"},
    {role: "user", content: "2+2?"},
    {role: "assistant", content: "4"},
  ],
  "unicode and spaces": [{role: "user", content: "  h\u00e9llo \u4e16\u754c \ud83d\ude00 \"quoted\" \\ back\n\n"}],
  "tool call": [
    {role: "user", content: "Weather in Paris?"},
    {role: "assistant", content: "", tool_calls: [call]},
    {role: "tool", tool_call_id: "call12345", name: "get_weather", content: "{\"temperature\": 22}"},
  ],
  "empty": [],
};

const cases = [];
for (const spec of templates) {
  const [name, path] = spec.split("=");
  const source = readFileSync(path, "utf8");
  const template = new Template(source);
  for (const [title, messages] of Object.entries(conversations)) {
    for (const add_generation_prompt of [true, false]) {
      for (const withTools of [false, true]) {
        if (withTools && title !== "tool call" && title !== "one user turn") continue;
        const context = {messages, add_generation_prompt, bos_token: "<s>", eos_token: "</s>"};
        if (withTools) context.tools = [weatherTool];
        let output = null, error = null;
        try {
          output = template.render(context);
        } catch (e) {
          error = String(e.message ?? e);
        }
        cases.push({template: name, title: `${title}${withTools ? ", tools" : ""}${add_generation_prompt ? ", prompt" : ""}`,
                    source, context, output, error});
      }
    }
  }
}
writeFileSync(outPath, JSON.stringify({cases}));
console.log(`${cases.length} renders, ${cases.filter(c => c.error).length} raised`);
process.exit(0);
