// `tessera serve-llm` through npm's `openai` client (scripts/openai_client.sh):
//   node scripts/openai_client.mjs BASE_URL API_KEY   (OPENAI_CLIENT_DIR: where openai is installed)
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(process.env.OPENAI_CLIENT_DIR + '/package.json');
const { OpenAI, BadRequestError, NotFoundError, AuthenticationError } = require('openai');

const [base, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + '/v1', apiKey: key, maxRetries: 0 });
let checks = 0;
const ok = (what) => { checks++; console.log('ok  ' + what); };

// Usage without prompt_tokens_details: a repeated prompt is served from the prefix cache.
const counts = (u) => ({ prompt: u.prompt_tokens, completion: u.completion_tokens, total: u.total_tokens });

async function collect(stream, chat) {
  const texts = {}, finish = {};
  let usage = null, id = null, first = true;
  for await (const chunk of stream) {
    id ??= chunk.id;
    assert.equal(chunk.id, id, 'one id for every chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (chat && first) assert.equal(c.delta.role, 'assistant', 'the role chunk first');
      const t = chat ? (c.delta.content ?? '') : c.text;
      texts[c.index] = (texts[c.index] ?? '') + t;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
    first = false;
  }
  return { texts, finish, usage };
}

// Models.
const models = await client.models.list();
assert.equal(models.data[0].id, 'fortunes');
ok('models.list: ' + models.data.map((m) => m.id).join(', '));

// Completions: stream and not, the same seeded text.
const creq = { model: 'fortunes', prompt: 'The best thing about', max_tokens: 40, seed: 42, temperature: 0.9 };
const whole = await client.completions.create(creq);
const streamed = await collect(await client.completions.create({ ...creq, stream: true,
  stream_options: { include_usage: true } }), false);
assert.equal(streamed.texts[0], whole.choices[0].text);
assert.equal(streamed.finish[0], whole.choices[0].finish_reason);
assert.deepEqual(counts(streamed.usage), counts(whole.usage));
assert.ok(streamed.usage.prompt_tokens_details.cached_tokens >= 0);
ok(`completions: stream = not (${whole.usage.completion_tokens} tokens, ${whole.choices[0].finish_reason})`);

// Chat: stream and not, stop strings, n and logprobs.
const messages = [{ role: 'system', content: 'You tell fortunes.' }, { role: 'user', content: 'Tell me one.' }];
const chatReq = { model: 'fortunes', messages, max_tokens: 48, seed: 7, n: 3, logprobs: true, top_logprobs: 2,
  stop: ['\n\n'] };
const chat = await client.chat.completions.create(chatReq);
assert.equal(chat.choices.length, 3);
const cs = await collect(await client.chat.completions.create({ ...chatReq, stream: true,
  stream_options: { include_usage: true } }), true);
for (const c of chat.choices) {
  assert.equal(cs.texts[c.index], c.message.content, `choice ${c.index}: stream = not`);
  assert.equal(cs.finish[c.index], c.finish_reason);
  assert.ok(!c.message.content.includes('\n\n'), 'the stop string never shows');
  for (const t of c.logprobs.content) {
    assert.ok(t.logprob <= 0 && t.top_logprobs.length === 2);
    assert.ok(t.top_logprobs[0].logprob >= t.logprob - 1e-6);
  }
}
assert.notEqual(chat.choices[0].message.content, chat.choices[1].message.content, 'choices differ');
assert.deepEqual(counts(cs.usage), counts(chat.usage));
ok(`chat: 3 choices, stream = not, logprobs (${chat.usage.prompt_tokens} prompt tokens)`);

// Greedy is the same text alone and among others.
const greedy = { model: 'fortunes', messages, max_tokens: 32, temperature: 0 };
const alone = (await client.chat.completions.create(greedy)).choices[0].message.content;
const crowd = await Promise.all([...Array(8)].map((_, i) => client.chat.completions.create(i % 2 ? greedy
  : { ...greedy, messages: [{ role: 'user', content: 'Another ' + i }], max_tokens: 64 + i })));
for (let i = 1; i < 8; i += 2) assert.equal(crowd[i].choices[0].message.content, alone);
ok('greedy: the same text alone and among 8 concurrent requests');

// Errors, as the client raises them.
const expectError = async (p, type, param) => {
  try { await p; assert.fail('no error'); } catch (e) {
    assert.ok(e instanceof type, `${e.constructor.name}: ${e.message}`);
    if (param !== undefined) assert.equal(e.param, param);
    return e;
  }
};
await expectError(client.chat.completions.create({ model: 'fortunes', messages, temperature: 5 }), BadRequestError,
  'temperature');
await expectError(client.chat.completions.create({ model: 'gpt-4o', messages }), NotFoundError, 'model');
const long = await expectError(client.completions.create({ model: 'fortunes', prompt: 'word '.repeat(2000) }),
  BadRequestError, 'prompt');
assert.equal(long.code, 'context_length_exceeded');
await expectError(client.chat.completions.create({ model: 'fortunes', messages,
  response_format: { type: 'json_schema' } }), BadRequestError, 'response_format');
await expectError(new OpenAI({ baseURL: base + '/v1', apiKey: 'wrong-key-0123456789', maxRetries: 0 })
  .models.list(), AuthenticationError);
await expectError(client.chat.completions.create({ model: 'fortunes', messages,
  tools: [{ type: 'function', function: { name: 'f' } }] }), BadRequestError, 'tools');  // the plain template shows no tools
ok('errors: 400 with the parameter, 404 model, context_length_exceeded, tools the template cannot show, 401');

// Embeddings: the client asks for base64 unless told; both give the same unit vectors.
const texts = ['A fortune cookie.', 'You will meet a tall stranger.'];
const eb = await client.embeddings.create({ model: 'fortunes', input: texts });
const ef = await client.embeddings.create({ model: 'fortunes', input: texts, encoding_format: 'float' });
assert.equal(eb.data.length, 2);
for (let i = 0; i < 2; i++) {
  const a = eb.data[i].embedding, b = ef.data[i].embedding;
  assert.equal(a.length, b.length);
  assert.ok(a.every((x, k) => Math.abs(x - b[k]) < 1e-6), 'base64 = float');
  assert.ok(Math.abs(Math.hypot(...b) - 1) < 1e-4, 'unit length');
}
ok(`embeddings: ${eb.data.length} of ${eb.data[0].embedding.length} dimensions, base64 = float, unit length`);

// Tokenize, detokenize, health and metrics (plain HTTP).
const auth = { Authorization: 'Bearer ' + key, 'Content-Type': 'application/json' };
const tok = await (await fetch(base + '/tokenize', { method: 'POST', headers: auth,
  body: JSON.stringify({ prompt: 'Hello there' }) })).json();
const detok = await (await fetch(base + '/detokenize', { method: 'POST', headers: auth,
  body: JSON.stringify({ tokens: tok.tokens }) })).json();
assert.equal(detok.prompt.trim(), 'Hello there');
assert.equal((await fetch(base + '/health')).status, 200);
ok(`tokenize/detokenize (${tok.count} tokens), health`);

// A stream the client aborts: its request ends on the server.
const controller = new AbortController();
const s = await client.completions.create({ model: 'fortunes', prompt: 'Once', max_tokens: 200, ignore_eos: true,
  stream: true }, { signal: controller.signal });
let pieces = 0;
try {
  for await (const _ of s) if (++pieces === 3) controller.abort();
} catch (e) { /* the client's abort */ }
const metric = async (name) => {
  const text = await (await fetch(base + '/metrics', { headers: auth })).text();
  const line = text.split('\n').find((l) => l.startsWith(name));
  return line ? Number(line.split(' ').pop()) : NaN;
};
let running = NaN;
for (let i = 0; i < 50 && running !== 0; i++) {
  await new Promise((r) => setTimeout(r, 20));
  running = await metric('tessera:num_requests_running{');
}
assert.equal(running, 0);
assert.ok(await metric('tessera:request_success_total{model_name="fortunes",finished_reason="abort"}') >= 1);
assert.equal(await metric('tessera:kv_cache_usage_perc{'), 0);
ok('an aborted stream: its request ends and its cache blocks return');
// Structured output: every schema of scripts/json_schemas.json (OpenAI's
// strict subset) as response_format, greedy and sampled, stream and not:
// each choice that stops parses and validates by ajv.
const Ajv = require('ajv');
const ajv = new Ajv({ strict: false });
const schemas = JSON.parse((await import('node:fs')).readFileSync(new URL('./json_schemas.json', import.meta.url)));
let stopped = 0, total = 0;
for (const [i, schema] of schemas.entries()) {
  const validate = ajv.compile(schema);
  const req = { model: 'fortunes', messages: [{ role: 'user', content: 'Answer in JSON.' }], max_tokens: 200,
    response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema, strict: true } },
    ...(i % 2 ? { temperature: 0 } : { temperature: 0.8, seed: i }) };
  let text, reason;
  if (i % 3 === 0) {
    const c = await collect(await client.chat.completions.create({ ...req, stream: true }), true);
    [text, reason] = [c.texts[0], c.finish[0]];
  } else {
    const c = (await client.chat.completions.create(req)).choices[0];
    [text, reason] = [c.message.content, c.finish_reason];
  }
  total++;
  if (reason !== 'stop') continue;
  stopped++;
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(text); }, `schema ${i}: ${text}`);
  assert.ok(validate(value), `schema ${i}: ${text}: ${ajv.errorsText(validate.errors)}`);
}
assert.ok(stopped >= 0.8 * total, `${stopped} of ${total} stopped`);
ok(`structured output: ${stopped} of ${total} schemas stopped, each parses and validates (ajv)`);
await expectError(client.chat.completions.create({ model: 'fortunes', messages: [{ role: 'user', content: 'x' }],
  response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'string', pattern: '^a+$' } } } }),
  BadRequestError, 'response_format');
ok('an unsupported schema keyword is a 400 naming response_format');
console.log(`openai_client: ${checks} checks passed`);
