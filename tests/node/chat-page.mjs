// The server's chat page in headless Chromium (Debian's chromium, driven by
// playwright-core): type a message, press Enter, and a streamed reply appears.
//   node chat-page.mjs TOY_BINARY MODEL.gguf
import { chromium } from "playwright-core";
import { startServer } from "./serve.mjs";
import { existsSync } from "node:fs";

const [toy, model] = process.argv.slice(2);
const browserPath = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find(existsSync);
if (!browserPath) {
  console.log("no chromium: install Debian's chromium package (scripts/install-deps.sh does)");
  process.exit(1);
}
const { server, port } = await startServer(toy, model);

let ok = false;
const browser = await chromium.launch({ executablePath: browserPath, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${port}/`);
  await page.waitForFunction(() => document.getElementById("model").textContent.length > 0);
  await page.fill("#input", "Tell me a story");
  await page.press("#input", "Enter");
  await page.waitForSelector(".msg.user");
  // the reply streams in: its text grows, then the send button is enabled again
  await page.waitForFunction(() => document.querySelector(".msg.assistant")?.textContent.length > 0, null, { timeout: 60000 });
  await page.waitForFunction(() => !document.getElementById("send").disabled, null, { timeout: 60000 });
  const reply = await page.textContent(".msg.assistant");
  const user = await page.textContent(".msg.user");
  ok = user === "Tell me a story" && reply.length > 0 && !(await page.$(".msg.error"));
  console.log(`${ok ? "ok  " : "FAIL"}  chat page: "${user}" -> ${JSON.stringify(reply.slice(0, 60))}`);
} finally {
  await browser.close();
  server.kill();
}
process.exit(ok ? 0 : 1);
