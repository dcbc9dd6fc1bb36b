// Starts `toy serve` on a free port for the client tests; resolves to
// { server, port } once it listens and has loaded the model.
import { spawn } from "node:child_process";

export function startServer(toy, model, extra = []) {
  const server = spawn(toy, ["serve", "-m", model, "--port", "0", "-np", "2", "-c", "512", "-t", "2", ...extra],
                       { stdio: ["ignore", "ignore", "pipe"] });
  return new Promise((resolve, reject) => {
    let err = "";
    server.stderr.on("data", (d) => {
      err += d;
      const m = err.match(/on http:\/\/[^:]+:(\d+)/);
      if (m) resolve({ server, port: Number(m[1]) });
    });
    server.on("exit", (code) => reject(new Error(`toy serve exited (${code}): ${err}`)));
  });
}
