"""Load generator for bench/serve-compare.sh: streaming chat clients against an
OpenAI-compatible server, standard library only. Writes a JSON summary."""
import argparse, http.client, json, statistics, threading, time


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def rss_mib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


PROMPTS = [f"Tell me story number {i} about a {thing}." for i, thing in
           enumerate(["cat", "dog", "boat", "kite", "tree", "robot", "castle", "river"] * 4)]


def chat(port, prompt, max_tokens, stream=True):
    """One request; returns (text, ttft_s, [inter-token gaps s], error or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                       "temperature": 0, "stream": stream})
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return "", None, [], f"status {r.status}: {r.read()[:200]!r}"
        if not stream:
            j = json.loads(r.read())
            return j["choices"][0]["message"]["content"], None, [], None
        text, ttft, gaps, last = "", None, [], None
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            j = json.loads(data)
            choices = j.get("choices") or []
            piece = (choices[0].get("delta") or {}).get("content") if choices else None
            if piece:
                now = time.perf_counter()
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
                text += piece
        return text, ttft, gaps, None
    except Exception as e:  # noqa: BLE001 - every failure counts as an error
        return "", None, [], repr(e)
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser()
    for a, t in [("--port", int), ("--pid", int), ("--clients", int), ("--seconds", float), ("--max-tokens", int),
                 ("--name", str), ("--out", str)]:
        ap.add_argument(a, type=t, required=True)
    o = ap.parse_args()

    # the replies each prompt gives alone, one at a time
    alone = {p: chat(o.port, p, o.max_tokens, stream=False)[0] for p in sorted(set(PROMPTS))}

    lock = threading.Lock()
    results = {"requests": 0, "errors": 0, "tokens": 0, "ttft": [], "itl": [], "equal": 0, "error_samples": []}
    rss = []
    end = time.perf_counter() + o.seconds

    def client(i):
        k = i
        while time.perf_counter() < end:
            prompt = PROMPTS[k % len(PROMPTS)]
            k += o.clients
            text, ttft, gaps, err = chat(o.port, prompt, o.max_tokens)
            with lock:
                results["requests"] += 1
                if err:
                    results["errors"] += 1
                    if len(results["error_samples"]) < 3:
                        results["error_samples"].append(err)
                    continue
                results["tokens"] += len(gaps) + (1 if ttft is not None else 0)
                if ttft is not None:
                    results["ttft"].append(ttft)
                results["itl"].extend(gaps)
                results["equal"] += text == alone[prompt]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(o.clients)]
    t_start = time.perf_counter()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        rss.append((time.perf_counter() - t_start, rss_mib(o.pid)))
        time.sleep(1.0)
    wall = time.perf_counter() - t_start
    # RSS slope after warm-up (the first fifth), MiB per minute, least squares
    warm = [(t, m) for t, m in rss if t > wall / 5]
    slope = float("nan")
    if len(warm) >= 2:
        mt, mm = statistics.mean(t for t, _ in warm), statistics.mean(m for _, m in warm)
        den = sum((t - mt) ** 2 for t, _ in warm)
        slope = 60 * sum((t - mt) * (m - mm) for t, m in warm) / den if den else 0.0
    s = {
        "name": o.name, "requests": results["requests"], "errors": results["errors"],
        "error_samples": results["error_samples"],
        "tokens_per_s": results["tokens"] / wall,
        "ttft_p50_ms": 1e3 * percentile(results["ttft"], 0.5), "ttft_p99_ms": 1e3 * percentile(results["ttft"], 0.99),
        "itl_p50_ms": 1e3 * percentile(results["itl"], 0.5), "itl_p99_ms": 1e3 * percentile(results["itl"], 0.99),
        "peak_rss_mib": max((m for _, m in rss), default=float("nan")), "rss_slope_mib_per_min": slope,
        "replies_equal_to_alone": f"{results['equal']}/{results['requests'] - results['errors']}",
    }
    json.dump(s, open(o.out, "w"), indent=1)
    print(f"{o.name:6s} requests {s['requests']} errors {s['errors']} | {s['tokens_per_s']:.1f} tok/s | "
          f"TTFT p50 {s['ttft_p50_ms']:.0f} p99 {s['ttft_p99_ms']:.0f} ms | ITL p50 {s['itl_p50_ms']:.1f} "
          f"p99 {s['itl_p99_ms']:.1f} ms | RSS peak {s['peak_rss_mib']:.0f} MiB, slope {slope:.2f} MiB/min | "
          f"equal to alone {s['replies_equal_to_alone']}")
    if s["error_samples"]:
        print("  errors, e.g.:", *s["error_samples"], sep="\n  ")


main()
