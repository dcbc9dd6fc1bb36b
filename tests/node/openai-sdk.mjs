// toy serve as OpenAI's own Node SDK and curl see it: models, chat and text
// completions with and without streaming, usage, an API key error, and the
// server-sent-events framing byte by byte (curl -N).
//   node openai-sdk.mjs TOY_BINARY MODEL.gguf
import OpenAI from "openai";
import { execFileSync } from "node:child_process";
import { startServer } from "./serve.mjs";
import assert from "node:assert/strict";

const [toy, model] = process.argv.slice(2);
const key = "sk-toy-test";
const { server, port } = await startServer(toy, model, ["--api-key", key]);

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key });
let failed = 0;
async function check(name, f) {
  try {
    await f();
    console.log(`ok    ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL  ${name}: ${e.message}`);
  }
}

await check("models.list", async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, "model");
});

const messages = [{ role: "user", content: "Tell me a story." }];
let whole = "";
await check("chat.completions.create", async () => {
  const r = await client.chat.completions.create({ model: "any", messages, max_tokens: 12, temperature: 0 });
  whole = r.choices[0].message.content;
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.ok(whole.length > 0);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
});

await check("chat.completions.create stream", async () => {
  const stream = await client.chat.completions.create({ model: "any", messages, max_tokens: 12, temperature: 0, stream: true });
  let text = "", finish = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, "chat.completion.chunk");
    text += chunk.choices[0]?.delta?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.ok(chunks >= 3);
  assert.equal(text, whole);
  assert.equal(finish, "length");
});

await check("completions.create, with and without stream", async () => {
  const r = await client.completions.create({ model: "any", prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
  assert.equal(r.object, "text_completion");
  const stream = await client.completions.create({ model: "any", prompt: "Once upon a time", max_tokens: 8, temperature: 0, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  assert.equal(text, r.choices[0].text);
});

await check("embeddings.create: the SDK's base64 and plain floats agree, unit length", async () => {
  const r = await client.embeddings.create({ model: "any", input: ["Once upon a time", "The cat sat."] });  // (base64 by default)
  assert.equal(r.object, "list");
  assert.equal(r.data.length, 2);
  assert.ok(r.usage.prompt_tokens > 0);
  const floats = await client.embeddings.create({ model: "any", input: "Once upon a time", encoding_format: "float" });
  assert.equal(floats.data[0].embedding.length, r.data[0].embedding.length);
  for (let i = 0; i < floats.data[0].embedding.length; i++) assert.ok(Math.abs(floats.data[0].embedding[i] - r.data[0].embedding[i]) < 1e-6);
  const norm = Math.hypot(...r.data[1].embedding);
  assert.ok(Math.abs(norm - 1) < 1e-5, String(norm));
});

await check("response_format json_schema: the reply is JSON valid under the schema, keys in its order", async () => {
  const schema = {
    type: "object",
    properties: { title: { type: "string", maxLength: 20 }, pages: { type: "integer", minimum: 1, maximum: 999 } },
    required: ["title", "pages"],
    additionalProperties: false,
  };
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model: "any", messages, max_tokens: 200, temperature: 1, seed,
      response_format: { type: "json_schema", json_schema: { name: "book", strict: true, schema } },
    });
    assert.equal(r.choices[0].finish_reason, "stop");
    const content = r.choices[0].message.content;
    const book = JSON.parse(content);
    assert.deepEqual(Object.keys(book), ["title", "pages"]);
    assert.equal(typeof book.title, "string");
    assert.ok(book.title.length <= 20, content);
    assert.ok(Number.isInteger(book.pages) && book.pages >= 1 && book.pages <= 999, content);
  }
});

await check("a wrong key is an AuthenticationError (401)", async () => {
  const bad = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401 && e instanceof OpenAI.AuthenticationError);
});

await check("a bad request is a BadRequestError (400) with the server's message", async () => {
  await assert.rejects(client.chat.completions.create({ model: "any", messages: [{ role: "wizard", content: "x" }] }),
                       (e) => e.status === 400 && /unknown role/.test(e.message));
});

await check("curl -N: every event is 'data: ...' + a blank line, the last is [DONE]", async () => {
  const body = JSON.stringify({ messages, max_tokens: 5, temperature: 0, stream: true });
  const raw = execFileSync("curl", ["-sN", "-H", `Authorization: Bearer ${key}`, "-H", "Content-Type: application/json",
                                    "-d", body, `http://127.0.0.1:${port}/v1/chat/completions`]).toString();
  assert.ok(raw.endsWith("data: [DONE]\n\n"), JSON.stringify(raw.slice(-40)));
  const events = raw.split("\n\n").slice(0, -1);
  for (const e of events) assert.ok(e.startsWith("data: ") && !e.includes("\n"), JSON.stringify(e));
  assert.ok(events.length >= 4);
});

server.kill();

// speculative decoding (the model drafting for itself, and prompt lookup): the
// same replies at temperature 0, and the drafts counted in /metrics
for (const flags of [["-md", model, "--draft-max", "4"], ["--lookup-ngram", "2"]]) {
  await check(`toy serve ${flags.join(" ")}: the same reply, drafts in /metrics`, async () => {
    const spec = await startServer(toy, model, flags);
    try {
      const c = new OpenAI({ baseURL: `http://127.0.0.1:${spec.port}/v1`, apiKey: "none" });
      const r = await c.chat.completions.create({ model: "any", messages, max_tokens: 12, temperature: 0 });
      assert.equal(r.choices[0].message.content, whole);
      const long = await c.completions.create({ model: "any", prompt: "Once upon a time", max_tokens: 64, temperature: 0 });
      assert.equal(long.usage.completion_tokens, 64);
      const metrics = await (await fetch(`http://127.0.0.1:${spec.port}/metrics`)).text();
      const drafted = Number(metrics.match(/^toy_draft_tokens_total (\d+)$/m)[1]);
      const accepted = Number(metrics.match(/^toy_draft_tokens_accepted_total (\d+)$/m)[1]);
      assert.ok(drafted > 0 && accepted <= drafted, metrics);
      if (flags[0] === "-md") assert.ok(accepted > 0, metrics);  // the model agrees with itself
    } finally {
      spec.server.kill();
    }
  });
}
process.exit(failed ? 1 : 0);
