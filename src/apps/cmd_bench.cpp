// toy bench: prompt-processing and generation speed, measured the way
// llama.cpp's llama-bench measures it, so the two can be compared side by
// side (bench/compare.sh):
//   ppN: from an empty cache, N random tokens in one eval call (split into
//        -b sized calls like llama-bench), logits of the last token only;
//   tgN: from an empty cache, N single-token eval calls;
// one warmup run first (the whole prompt for pp, one token for tg), then -r
// repetitions; tokens/s per repetition, reported as mean and sample stddev.
// Each test gets its own Session with a context of exactly n_prompt + n_gen
// cells (as llama-bench does) unless -c is given.
//
// --roofline adds a memory-bandwidth probe and, with -m, the decode ceiling:
// bandwidth / bytes read per generated token (runtime/bandwidth.h).
#include "apps/cli.h"
#include "apps/session_options.h"
#include "core/error.h"
#include "core/memory.h"
#include "runtime/bandwidth.h"

#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace toy::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
    ModelFlags model;
    std::string n_prompt = "512";
    std::string n_gen = "128";
    int reps = 5;
    bool json = false;
    std::string output = "md";
    bool no_warmup = false;
    bool roofline = false;
    int64_t roofline_mib = 0;
    uint32_t seed = 1234;
};

struct TestResult {
    int n_prompt = 0, n_gen = 0;
    int64_t n_ctx = 0;
    std::vector<uint64_t> samples_ns;
    std::vector<double> samples_ts;
    std::optional<DecodeBytes> decode_bytes;  // tg tests under --roofline
    double ceiling_ts = 0.0;

    std::string name() const {
        if (n_gen == 0) return fmt::format("pp{}", n_prompt);
        if (n_prompt == 0) return fmt::format("tg{}", n_gen);
        return fmt::format("pp{}+tg{}", n_prompt, n_gen);
    }
};

template <class T>
double mean(const std::vector<T> &v) {
    double s = 0;
    for (T x : v) s += (double)x;
    return v.empty() ? 0.0 : s / (double)v.size();
}

// sample standard deviation (n - 1), 0 for fewer than two samples: llama-bench's
template <class T>
double stddev(const std::vector<T> &v) {
    if (v.size() < 2) return 0.0;
    const double m = mean(v);
    double sq = 0;
    for (T x : v) sq += ((double)x - m) * ((double)x - m);
    return std::sqrt(sq / (double)(v.size() - 1));
}

std::vector<int> parse_counts(const std::string &text, const char *flag) {
    std::vector<int> out;
    size_t i = 0;
    while (i <= text.size()) {
        size_t j = text.find(',', i);
        if (j == std::string::npos) j = text.size();
        std::string item = text.substr(i, j - i);
        size_t used = 0;
        long long v = -1;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception &) {
            used = 0;
        }
        if (item.empty() || used != item.size() || v < 0 || v > 1'000'000) {
            fail("{}: expected token counts >= 0, comma-separated (e.g. 128,512), found '{}'", flag, text);
        }
        out.push_back((int)v);
        i = j + 1;
    }
    return out;
}

std::string utc_now() {
    std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

std::string human_bytes(double b) {
    if (b < 1024.0 * 1024 * 1024) return fmt::format("{:.2f} MiB", b / 1024 / 1024);
    return fmt::format("{:.2f} GiB", b / 1024 / 1024 / 1024);
}

struct ModelInfo {
    std::string filename, type_label;
    size_t size = 0;
    int64_t n_params = 0;
};

ModelInfo describe(const Model &m) {
    ModelInfo info;
    info.filename = m.path();
    std::map<ggml_type, size_t> by_type;
    for (const auto &t : m.file().tensors()) {
        info.n_params += t.n_elements();
        info.size += t.nbytes;  // the file's tensors, as llama-bench counts model size
        by_type[t.type] += t.nbytes;
    }
    // the types holding at least a tenth of the bytes, largest first: "F16", "Q4_K/Q6_K"
    std::vector<std::pair<size_t, ggml_type>> order;
    for (auto [t, b] : by_type) order.push_back({b, t});
    std::sort(order.rbegin(), order.rend());
    std::string types;
    for (auto [b, t] : order) {
        if (b * 10 < info.size && !types.empty()) continue;
        std::string n = ggml_type_name(t);
        for (char &ch : n) ch = (char)std::toupper((unsigned char)ch);
        types += (types.empty() ? "" : "/") + n;
    }
    const double p = (double)info.n_params;
    std::string params = p < 1e7 ? fmt::format("{:.2f}M", p / 1e6)
                         : p < 1e9 ? fmt::format("{:.0f}M", p / 1e6) : fmt::format("{:.1f}B", p / 1e9);
    info.type_label = fmt::format("{} {} {}", m.config().arch, params, types);
    return info;
}

class Runner {
public:
    Runner(const Model &model, const BenchOptions &o, std::mt19937 &rng) : model_(model), o_(o), rng_(rng) {
        n_vocab_ = model.weights().tok_embd->ne[1];
    }

    // set when the first eval of the process ends (llama.cpp's "load time"
    // definition: model load start to the end of the first eval)
    std::optional<Clock::time_point> first_eval_end;

    TestResult run(int n_prompt, int n_gen) {
        TestResult r;
        r.n_prompt = n_prompt;
        r.n_gen = n_gen;
        SessionOptions so = o_.model.session_options();
        so.n_ctx = o_.model.n_ctx > 0 ? o_.model.n_ctx : n_prompt + n_gen;
        r.n_ctx = so.n_ctx;
        Session s(model_, so);
        if (!warned_) {
            print_notes(s);
            warned_ = true;
        }
        if (!o_.no_warmup) {
            if (n_prompt > 0) prompt(s, n_prompt);
            if (n_gen > 0) generate(s, 1);
        }
        for (int rep = 0; rep < o_.reps; ++rep) {
            s.reset();
            auto t0 = Clock::now();
            if (n_prompt > 0) prompt(s, n_prompt);
            if (n_gen > 0) generate(s, n_gen);
            uint64_t ns = (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
            ns = std::max<uint64_t>(ns, 1);
            r.samples_ns.push_back(ns);
            r.samples_ts.push_back(1e9 * (n_prompt + n_gen) / (double)ns);
        }
        return r;
    }

private:
    void mark_first_eval() {
        if (!first_eval_end) first_eval_end = Clock::now();
    }

    void prompt(Session &s, int n) {
        std::uniform_int_distribution<int32_t> pick(0, (int32_t)n_vocab_ - 1);
        const int64_t step = std::max<int64_t>(1, o_.model.n_batch);
        std::vector<int32_t> toks;
        for (int64_t done = 0; done < n; done += step) {
            const int64_t len = std::min<int64_t>(step, n - done);
            toks.resize(len);
            for (auto &t : toks) t = pick(rng_);
            s.eval(toks, /*all_logits=*/false);
            mark_first_eval();
        }
    }

    void generate(Session &s, int n) {
        std::uniform_int_distribution<int32_t> pick(0, (int32_t)n_vocab_ - 1);
        for (int i = 0; i < n; ++i) {
            int32_t t = pick(rng_);
            s.eval(std::span<const int32_t>(&t, 1), /*all_logits=*/false);
            mark_first_eval();
        }
    }

    const Model &model_;
    const BenchOptions &o_;
    std::mt19937 &rng_;
    int64_t n_vocab_ = 0;
    bool warned_ = false;
};

int resolved_threads(int n) { return n > 0 ? n : (int)std::max(1u, std::thread::hardware_concurrency()); }

int flash_attn_code(const std::string &fa) { return fa == "on" ? 1 : fa == "off" ? 0 : -1; }  // llama-bench's

void print_bandwidth(const BandwidthResult &bw) {
    std::printf("memory read bandwidth: %.2f GB/s (best of %d; mean %.2f GB/s; %d threads, %zu MiB buffer, %s loads)\n",
                bw.gb_per_s, bw.runs, bw.mean_gb_per_s, bw.n_threads, bw.buffer_bytes >> 20, bw.kernel);
}

int run_bench(const BenchOptions &o, bool prompt_given) {
    if (o.output != "md" && o.output != "json") fail("-o: expected md or json, found '{}'", o.output);
    const bool json = o.json || o.output == "json";
    if (o.reps < 1) fail("-r: expected at least 1 repetition, found {}", o.reps);
    if (o.roofline_mib < 0) fail("--roofline-mib: expected a size >= 0, found {}", o.roofline_mib);
    if (o.model.n_threads < 0) fail("-t: expected a thread count >= 0, found {}", o.model.n_threads);
    const int n_threads = resolved_threads(o.model.n_threads);

    if (o.model.model_path.empty()) {
        if (!o.roofline) fail("-m: a model file is required (or --roofline alone for the bandwidth probe)");
        BandwidthResult bw = measure_read_bandwidth(n_threads, (size_t)o.roofline_mib << 20);
        if (json) {
            nlohmann::json j = nlohmann::json::array();
            j.push_back({{"bandwidth_gbs", bw.gb_per_s}, {"bandwidth_mean_gbs", bw.mean_gb_per_s},
                         {"buffer_bytes", bw.buffer_bytes}, {"n_threads", bw.n_threads}, {"runs", bw.runs},
                         {"kernel", bw.kernel}});
            std::printf("%s\n", j.dump(2).c_str());
        } else {
            print_bandwidth(bw);
        }
        return 0;
    }

    // in roofline mode the interesting test is tg; pp runs only when asked for
    const std::vector<int> pps = (o.roofline && !prompt_given) ? std::vector<int>{} : parse_counts(o.n_prompt, "-p");
    const std::vector<int> tgs = parse_counts(o.n_gen, "-n");
    // validate the session flags before the (possibly slow) load
    const SessionOptions so = o.model.session_options();

    auto t_load0 = Clock::now();
    auto model = o.model.load();
    const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_load0).count();
    const ModelInfo info = describe(*model);
    const auto placement = model->placement();

    std::mt19937 rng(o.seed);
    Runner runner(*model, o, rng);
    std::vector<TestResult> results;
    for (int p : pps)
        if (p > 0) results.push_back(runner.run(p, 0));
    for (int n : tgs)
        if (n > 0) results.push_back(runner.run(0, n));
    const size_t rss = peak_rss_bytes();  // before the bandwidth probe's buffer
    const double load_first_eval_ms =
        runner.first_eval_end ? std::chrono::duration<double, std::milli>(*runner.first_eval_end - t_load0).count() : 0.0;

    std::optional<BandwidthResult> bw;
    if (o.roofline) {
        bw = measure_read_bandwidth(n_threads, (size_t)o.roofline_mib << 20);
        for (auto &r : results) {
            if (r.n_prompt != 0) continue;
            // a tg run attends 1..n_gen cells; on average n_gen / 2
            r.decode_bytes = decode_bytes_per_token(*model, std::max(1, r.n_gen / 2), so.type_k, so.type_v);
            r.ceiling_ts = bw->gb_per_s * 1e9 / (double)r.decode_bytes->total();
        }
    }

    const std::string test_time = utc_now();
    if (json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto &r : results) {
            nlohmann::json j = {
                {"build", "toy 0.1.0"},
                {"backends", "CPU"},
                {"model_filename", info.filename},
                {"model_type", info.type_label},
                {"model_size", info.size},
                {"model_n_params", info.n_params},
                {"n_batch", o.model.n_batch},
                {"n_ubatch", o.model.n_ubatch},
                {"n_threads", n_threads},
                {"type_k", ggml_type_name(so.type_k)},
                {"type_v", ggml_type_name(so.type_v)},
                {"flash_attn", flash_attn_code(o.model.flash_attn)},
                {"use_mmap", !o.model.no_mmap},
                {"repack", !o.model.no_repack},
                {"fuse", !o.model.no_fuse},
                {"huge_pages", want_huge_pages(o.model.load_options().huge_pages)},
                {"n_ctx", r.n_ctx},
                {"n_prompt", r.n_prompt},
                {"n_gen", r.n_gen},
                {"n_depth", 0},
                {"test", r.name()},
                {"test_time", test_time},
                {"avg_ns", (uint64_t)std::llround(mean(r.samples_ns))},
                {"stddev_ns", (uint64_t)std::llround(stddev(r.samples_ns))},
                {"avg_ts", mean(r.samples_ts)},
                {"stddev_ts", stddev(r.samples_ts)},
                {"samples_ns", r.samples_ns},
                {"samples_ts", r.samples_ts},
                {"load_ms", load_ms},
                {"load_first_eval_ms", load_first_eval_ms},
                {"peak_rss_bytes", rss},
                {"weights_by_buffer", nlohmann::json(std::map<std::string, size_t>(placement.begin(), placement.end()))},
            };
            if (bw) {
                j["bandwidth_gbs"] = bw->gb_per_s;
                if (r.decode_bytes) {
                    j["bytes_per_token"] = r.decode_bytes->total();
                    j["weight_bytes_per_token"] = r.decode_bytes->weights;
                    j["kv_bytes_per_token"] = r.decode_bytes->kv;
                    j["ceiling_ts"] = r.ceiling_ts;
                    j["ceiling_fraction"] = mean(r.samples_ts) / r.ceiling_ts;
                }
            }
            arr.push_back(std::move(j));
        }
        std::printf("%s\n", arr.dump(2).c_str());
        return 0;
    }

    // markdown, shaped like llama-bench's; fa / cache types only when not the defaults
    const bool show_fa = o.model.flash_attn != "auto";
    const bool show_kv = o.model.cache_type_k != "f16" || o.model.cache_type_v != "f16";
    std::printf("| %-28s | %10s | %10s | %7s | %7s |%s%s %13s | %20s |\n", "model", "size", "params", "backend", "threads",
                show_kv ? " type_k | type_v |" : "", show_fa ? " fa |" : "", "test", "t/s");
    std::printf("| %s | %s | %s | %s | %s |%s%s %s | %s |\n", std::string(28, '-').c_str(), "---------:", "---------:",
                "-------", "------:", show_kv ? " -----: | -----: |" : "", show_fa ? " -: |" : "", "------------:",
                "-------------------:");
    const std::string params = info.n_params < 1'000'000'000 ? fmt::format("{:.2f} M", info.n_params / 1e6)
                                                             : fmt::format("{:.2f} B", info.n_params / 1e9);
    for (const auto &r : results) {
        std::string kv = show_kv ? fmt::format(" {:>6} | {:>6} |", ggml_type_name(so.type_k), ggml_type_name(so.type_v)) : "";
        std::string fa = show_fa ? fmt::format(" {:>2} |", flash_attn_code(o.model.flash_attn)) : "";
        std::string ts = fmt::format("{:.2f} ± {:.2f}", mean(r.samples_ts), stddev(r.samples_ts));
        std::printf("| %-28s | %10s | %10s | %7s | %7d |%s%s %13s | %21s |\n", info.type_label.c_str(),
                    human_bytes((double)info.size).c_str(), params.c_str(), "CPU", n_threads, kv.c_str(), fa.c_str(),
                    r.name().c_str(), ts.c_str());
    }
    std::printf("\nload: %.1f ms (Model::load), %.1f ms to the end of the first eval; peak RSS: %.1f MiB%s\n", load_ms,
                load_first_eval_ms, rss / 1024.0 / 1024.0, o.model.no_mmap ? "" : " (mapped weights count once touched)");
    std::string where;
    for (const auto &[buf, bytes] : placement) {
        where += fmt::format("{}{} {:.1f} MiB", where.empty() ? "" : ", ", buf, bytes / 1024.0 / 1024.0);
    }
    std::printf("weights: %s\n", where.c_str());
    if (bw) {
        print_bandwidth(*bw);
        for (const auto &r : results) {
            if (!r.decode_bytes) continue;
            const DecodeBytes &d = *r.decode_bytes;
            std::printf("%s: decode reads %.2f MB/token (weights %.2f MB + KV %.3f MB at context %d); ceiling %.2f t/s; "
                        "measured %.2f t/s = %.1f%% of the ceiling\n",
                        r.name().c_str(), d.total() / 1e6, d.weights / 1e6, d.kv / 1e6, std::max(1, r.n_gen / 2),
                        r.ceiling_ts, mean(r.samples_ts), 100.0 * mean(r.samples_ts) / r.ceiling_ts);
        }
    }
    return 0;
}

Command reg("bench", "Measure prompt (pp) and generation (tg) speed like llama-bench; --roofline for bandwidth",
            [](CLI::App &app) {
                auto o = std::make_shared<BenchOptions>();
                o->model.add_to(app, /*with_trace=*/false);
                app.get_option("--model")->required(false);
                app.add_option("-p,--n-prompt", o->n_prompt, "prompt lengths for pp tests, comma-separated; 0 skips");
                app.add_option("-n,--n-gen", o->n_gen, "token counts for tg tests, comma-separated; 0 skips");
                app.add_option("-r,--repetitions", o->reps, "repetitions of each test");
                app.add_flag("--json", o->json, "print a JSON array, one object per test (llama-bench -o json fields)");
                app.add_option("-o,--output", o->output, "output format: md or json");
                app.add_flag("--no-warmup", o->no_warmup, "skip the warmup run before each test");
                app.add_flag("--roofline", o->roofline,
                             "measure memory read bandwidth; with -m also the tg ceiling (pp only with an explicit -p)");
                app.add_option("--roofline-mib", o->roofline_mib,
                               "bandwidth probe buffer in MiB (0: max(1 GiB, 4 x L3), at most a quarter of memory)");
                app.add_option("-s,--seed", o->seed, "seed of the random tokens");
                return [o, &app] { return run_bench(*o, app.count("--n-prompt") > 0); };
            });

}  // namespace
}  // namespace toy::cli
