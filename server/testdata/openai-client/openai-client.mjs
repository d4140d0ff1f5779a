// Calls confclip serve with the official openai package: completions with
// log-probs, chat completions with log-probs, a streamed chat completion,
// and a bad request. Prints one JSON object of what it saw; exits 1 when
// something is not as the API says. Run by server_test.go
// (TestOpenAINodeClient) with OPENAI_BASE_URL and MODEL set.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: "none", maxRetries: 0 });
const model = process.env.MODEL;
const out = {};
const fail = (msg) => {
  console.log(JSON.stringify({ ...out, error: msg }));
  process.exit(1);
};

const cmpl = await client.completions.create({ model, prompt: "Say 1:", max_tokens: 8, n: 2, seed: 1, logprobs: 1 });
if (cmpl.object !== "text_completion" || cmpl.choices.length !== 2) fail(`completions: ${JSON.stringify(cmpl)}`);
for (const c of cmpl.choices) {
  const lp = c.logprobs;
  if (!lp || lp.tokens.length === 0 || lp.tokens.length !== lp.token_logprobs.length) fail(`completions logprobs: ${JSON.stringify(c)}`);
  if (lp.token_logprobs.some((x) => !(x <= 0))) fail(`completions: a log-prob above 0: ${lp.token_logprobs}`);
}
out.completions = { choices: cmpl.choices.length, tokens: cmpl.usage.completion_tokens };

const messages = [{ role: "user", content: "Say 2:" }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 8, seed: 2, logprobs: true, top_logprobs: 2 });
const choice = chat.choices[0];
if (chat.object !== "chat.completion" || choice.message.role !== "assistant") fail(`chat: ${JSON.stringify(chat)}`);
const content = choice.logprobs?.content ?? [];
if (content.length === 0 || content.length !== chat.usage.completion_tokens) fail(`chat logprobs: ${JSON.stringify(choice.logprobs)}`);
const spelled = Buffer.from(content.flatMap((t) => t.bytes)).toString("utf8");
if (spelled !== choice.message.content) fail(`chat: log-prob bytes spell ${JSON.stringify(spelled)}, content ${JSON.stringify(choice.message.content)}`);
// top_logprobs: 2 gives the two most likely tokens at each position, best first.
for (const t of content) {
  const top = t.top_logprobs ?? [];
  if (top.length !== 2 || !(top[0].logprob >= top[1].logprob) || !(t.logprob <= top[0].logprob)) fail(`chat top_logprobs: ${JSON.stringify(t)}`);
}
out.chat = { content: choice.message.content, prompt_tokens: chat.usage.prompt_tokens, logprobs: content.length, top_logprobs: content.map((t) => t.top_logprobs.length), finish: choice.finish_reason };

const stream = await client.chat.completions.create({
  model, messages, max_tokens: 8, seed: 2, stream: true, stream_options: { include_usage: true },
});
let streamed = "";
let chunks = 0;
let finish = null;
let usage = null;
for await (const chunk of stream) {
  chunks++;
  for (const c of chunk.choices) {
    streamed += c.delta?.content ?? "";
    if (c.finish_reason) finish = c.finish_reason;
  }
  if (chunk.usage) usage = chunk.usage;
}
if (streamed !== choice.message.content || finish !== choice.finish_reason || !usage) {
  fail(`stream: ${JSON.stringify(streamed)} (${finish}), whole ${JSON.stringify(choice.message.content)} (${choice.finish_reason}), usage ${JSON.stringify(usage)}`);
}
out.stream = { chunks, content: streamed };

// Completions stream too, and spell the text of the same request unstreamed.
const whole = await client.completions.create({ model, prompt: "Say 3:", max_tokens: 8, seed: 3 });
let ctext = "";
let cfinish = null;
for await (const chunk of await client.completions.create({ model, prompt: "Say 3:", max_tokens: 8, seed: 3, stream: true })) {
  for (const c of chunk.choices) {
    ctext += c.text ?? "";
    if (c.finish_reason) cfinish = c.finish_reason;
  }
}
if (ctext !== whole.choices[0].text || cfinish !== whole.choices[0].finish_reason) {
  fail(`completions stream: ${JSON.stringify(ctext)} (${cfinish}), whole ${JSON.stringify(whole.choices[0].text)} (${whole.choices[0].finish_reason})`);
}
out.completions_stream = { content: ctext, finish: cfinish };

// No max_tokens: the context left after the prompt, not an error.
const open = await client.completions.create({ model, prompt: "Say 4:", seed: 4 });
if (!(open.usage.completion_tokens > 0)) fail(`no max_tokens: ${JSON.stringify(open)}`);
out.no_max_tokens = { tokens: open.usage.completion_tokens, finish: open.choices[0].finish_reason };

// Penalties the sampler does not have are refused, not ignored.
try {
  await client.chat.completions.create({ model, messages, max_tokens: 4, frequency_penalty: 0.5 });
  fail("frequency_penalty 0.5 was accepted");
} catch (e) {
  if (!(e instanceof OpenAI.APIError) || e.status !== 400 || !String(e.message).includes("frequency_penalty")) fail(`frequency_penalty: ${e}`);
}

try {
  await client.completions.create({ model, prompt: "a", n: 0 });
  fail("n = 0 was accepted");
} catch (e) {
  if (!(e instanceof OpenAI.APIError) || e.status !== 400 || !String(e.message).includes("n = 0")) fail(`n = 0: ${e}`);
  out.bad_request = { status: e.status, message: e.message };
}

const models = await client.models.list();
out.models = models.data.map((m) => m.id);
console.log(JSON.stringify(out));
