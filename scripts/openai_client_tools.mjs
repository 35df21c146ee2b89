// Tool calling in `tessera serve-llm` through npm's `openai` client
// (scripts/openai_client.sh serves the model with scripts/chat_tools.jinja):
//   node scripts/openai_client_tools.mjs BASE_URL API_KEY   (OPENAI_CLIENT_DIR: where openai and ajv are)
// Forced calls (tool_choice "required" and a named function), stream and
// not: every call's arguments validate (ajv) against the function's
// parameters; the client's own stream accumulator and its runTools loop read
// the streamed deltas and run the function.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(process.env.OPENAI_CLIENT_DIR + '/package.json');
const { OpenAI, BadRequestError } = require('openai');
const Ajv = require('ajv');

const [base, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + '/v1', apiKey: key, maxRetries: 0 });
const ajv = new Ajv({ strict: false });
let checks = 0;
const ok = (what) => { checks++; console.log('ok  ' + what); };

const tools = [
  { type: 'function', function: { name: 'get_fortune', description: 'A fortune for a topic.',
    parameters: { type: 'object', properties: { topic: { type: 'string', maxLength: 20 },
      lucky_numbers: { type: 'array', items: { type: 'integer' }, maxItems: 3 } },
    required: ['topic'], additionalProperties: false } } },
  { type: 'function', function: { name: 'roll_dice', parameters: { type: 'object',
    properties: { sides: { type: 'integer', enum: [6, 20] } }, required: ['sides'], additionalProperties: false } } },
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const messages = [{ role: 'user', content: 'Tell me my fortune about cats.' }];

function checkCalls(calls, only, where) {
  assert.ok(calls.length >= 1, `${where}: a call`);
  for (const c of calls) {
    assert.equal(c.type, 'function');
    assert.ok(c.id.startsWith('call_'), `${where}: id ${c.id}`);
    if (only) assert.equal(c.function.name, only);
    const validate = validators[c.function.name];
    assert.ok(validate, `${where}: a function that exists (${c.function.name})`);
    const args = JSON.parse(c.function.arguments);
    assert.ok(validate(args), `${where}: ${c.function.arguments}: ${ajv.errorsText(validate.errors)}`);
  }
}

for (const [choice, only] of [['required', null], [{ type: 'function', function: { name: 'roll_dice' } }, 'roll_dice']]) {
  const req = { model: 'fortunes', messages, tools, tool_choice: choice, parallel_tool_calls: false, max_tokens: 200,
    temperature: 0.8, seed: 5 };
  const name = typeof choice === 'string' ? choice : 'named';
  const whole = await client.chat.completions.create({ ...req, n: 3 });
  for (const c of whole.choices) {
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    checkCalls(c.message.tool_calls, only, name);
  }
  // The client's own accumulator over the streamed deltas: the same call.
  const one = (await client.chat.completions.create(req)).choices[0];
  const final = await client.chat.completions.stream(req).finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(final.choices[0].message.tool_calls.map((c) => c.function), one.message.tool_calls.map((c) => c.function));
  ok(`tool_choice ${name}: 3 choices and a stream, each one call that validates (${one.message.tool_calls[0].function.name}` +
     ` ${one.message.tool_calls[0].function.arguments})`);
}

// runTools: the client calls the function with the parsed arguments and sends its result back.
let ran = null;
const runner = client.chat.completions.runTools({ model: 'fortunes', messages, max_tokens: 160, temperature: 0, stream: true, parallel_tool_calls: false,
  tool_choice: { type: 'function', function: { name: 'get_fortune' } },
  tools: [{ type: 'function', function: { name: 'get_fortune', parameters: tools[0].function.parameters,
    function: (args) => { ran = args; return { fortune: 'A cat will find you.' }; }, parse: JSON.parse } }] });
await runner.done();
assert.ok(ran && typeof ran.topic === 'string', `runTools ran the function with ${JSON.stringify(ran)}`);
const roles = runner.messages.map((m) => m.role);
assert.ok(roles.includes('tool'), `the tool's result went back: ${roles}`);
ok(`runTools: get_fortune(${JSON.stringify(ran)}) ran and its result went back`);

// A conversation with a call and its result continues (the template renders both).
const history = [...messages, { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
  function: { name: 'get_fortune', arguments: '{"topic": "cats"}' } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '{"fortune": "A cat will find you."}' }];
const after = await client.chat.completions.create({ model: 'fortunes', messages: history, tools, max_tokens: 30 });
assert.ok(['stop', 'length', 'tool_calls'].includes(after.choices[0].finish_reason));
ok(`a conversation with a tool result continues (${after.usage.prompt_tokens} prompt tokens)`);

const expectError = async (p, param) => {
  try { await p; assert.fail('no error'); } catch (e) {
    assert.ok(e instanceof BadRequestError, `${e.constructor.name}: ${e.message}`);
    assert.equal(e.param, param);
  }
};
await expectError(client.chat.completions.create({ model: 'fortunes', messages, tools,
  tool_choice: { type: 'function', function: { name: 'nope' } } }), 'tool_choice');
await expectError(client.chat.completions.create({ model: 'fortunes', messages, tool_choice: 'required',
  tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object',
    properties: { d: { type: 'string', format: 'date' } } } } }] }), 'tools');
ok('errors: an unknown function in tool_choice, an unsupported schema keyword in tools');
console.log(`openai_client_tools: ${checks} checks passed`);
