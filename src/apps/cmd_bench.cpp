// toy bench: prompt-processing and generation speed, measured the way
// llama.cpp's llama-bench measures it, so the two can be compared side by
// side (bench/compare.sh):
//   ppN: from an empty cache, N random tokens in one eval call (split into
//        -b sized calls like llama-bench), logits of the last token only;
//   tgN: from an empty cache, N single-token eval calls;
//   ppN+tgM (-pg N,M): both, timed together;
//   "@ dD" (-d D): the same from a cache already holding D tokens (filled
//        before each repetition, not timed);
// one warmup run first (the whole prompt for pp, one token for tg), then -r
// repetitions; tokens/s per repetition, reported as mean and sample stddev.
// Each test gets its own Session with a context of exactly depth + n_prompt
// + n_gen cells (as llama-bench does) unless -c is given. -t, -fa, -ctk and
// -ctv take comma lists too: every combination is run, and each row is
// printed when its test is done (md, csv, json or jsonl).
//
// --roofline adds a memory-bandwidth probe and, with -m, the decode ceiling:
// bandwidth / bytes read per generated token (runtime/bandwidth.h), from a
// fresh buffer and from the model's own weights where they lie. A tg test's
// runs are also paired with a read of the weights right before and after
// each: where the memory's speed moves by the minute (a shared VM), the runs
// whose two reads agree say how close decoding comes to the speed it had.
#include "apps/cli.h"
#include "apps/session_options.h"
#include "core/error.h"
#include "core/lists.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "runtime/bandwidth.h"
#include "runtime/kv_cache.h"

#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace toy::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
    ModelFlags model;
    std::string n_prompt = "512";
    std::string n_gen = "128";
    std::string n_depth = "0";
    std::vector<std::string> pg;  // "pp,tg" pairs
    // comma lists, one run per combination
    std::string threads = "0", flash_attn = "auto", cache_type_k = "f16", cache_type_v = "f16";
    int reps = 5;
    bool json = false;
    std::string output = "md";
    bool no_warmup = false;
    bool roofline = false;
    int64_t roofline_mib = 0;
    uint32_t seed = 1234;
};

// One combination of the list flags.
struct Instance {
    int n_threads = 0;
    std::string flash_attn, cache_type_k, cache_type_v;
};

struct TestResult {
    Instance inst;
    int n_prompt = 0, n_gen = 0, n_depth = 0;
    int64_t n_ctx = 0;
    std::vector<uint64_t> samples_ns;
    std::vector<double> samples_ts;
    std::optional<DecodeBytes> decode_bytes;  // tg tests under --roofline
    Session::GraphWork graph;                 // the last graph the test evaluated (tg: one decode step)
    double ceiling_ts = 0.0;
    double weights_ceiling_ts = 0.0;  // the same from the model's own weights' bandwidth
    std::vector<double> reads_gbs;    // tg under --roofline: the weights read before each run and after the last (GB/s)

    std::string name() const {
        const std::string depth = n_depth > 0 ? fmt::format(" @ d{}", n_depth) : "";
        if (n_gen == 0) return fmt::format("pp{}{}", n_prompt, depth);
        if (n_prompt == 0) return fmt::format("tg{}{}", n_gen, depth);
        return fmt::format("pp{}+tg{}{}", n_prompt, n_gen, depth);
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

// "a,b,c" as its items (none empty).
std::vector<std::string> list_items(const std::string &text, const char *flag) {
    std::vector<std::string> out = split_list(text);
    for (const std::string &item : out)
        if (item.empty()) fail("{}: expected a comma-separated list, found '{}'", flag, text);
    return out;
}

// A comma list of counts (0 to a million).
std::vector<int> parse_counts(const std::string &text, const char *flag, const char *what = "token counts") {
    std::vector<int> out;
    for (const std::string &item : list_items(text, flag)) {
        size_t used = 0;
        long long v = -1;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception &) {
            used = 0;
        }
        if (used != item.size() || v < 0 || v > 1'000'000) {
            fail("{}: expected {} >= 0, comma-separated (e.g. 128,512), found '{}'", flag, what, text);
        }
        out.push_back((int)v);
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
    std::string backends = "CPU";  // and the backends of the devices a split model uses ("CPU,RPC")
    size_t size = 0;
    int64_t n_params = 0;
};

ModelInfo describe(const Model &m) {
    ModelInfo info;
    info.filename = m.path();
    for (ggml_backend_dev_t d : m.split().devices) {
        const std::string reg = ggml_backend_reg_name(ggml_backend_dev_backend_reg(d));
        if (info.backends.find("," + reg) == std::string::npos) info.backends += "," + reg;
    }
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


// The session options of one combination of the list flags.
SessionOptions session_options(const BenchOptions &o, const Instance &inst) {
    return o.model.session_options(inst.n_threads, inst.flash_attn, inst.cache_type_k, inst.cache_type_v);
}

// Every combination of -t, -fa, -ctk and -ctv, each checked before the load.
std::vector<Instance> instances(const BenchOptions &o) {
    std::vector<Instance> out;
    for (int t : parse_counts(o.threads, "-t", "thread counts"))
        for (const std::string &fa : list_items(o.flash_attn, "-fa"))
            for (const std::string &k : list_items(o.cache_type_k, "-ctk"))
                for (const std::string &v : list_items(o.cache_type_v, "-ctv")) out.push_back({t, fa, k, v});
    for (const Instance &inst : out) (void)session_options(o, inst);  // bad values fail here, in one line
    return out;
}

// A tg test's runs against the reads of the weights around each (--roofline):
// a run is steady when the reads before and after it agree within 10%; its
// fraction is the run's bytes per second over their mean.
struct PairedRuns {
    std::vector<double> fractions;  // of the steady runs
    std::vector<double> reads;      // their reads' mean, GB/s
};

PairedRuns paired_runs(const TestResult &r) {
    PairedRuns p;
    if (!r.decode_bytes || r.reads_gbs.size() != r.samples_ts.size() + 1) return p;
    for (size_t i = 0; i < r.samples_ts.size(); ++i) {
        const double a = r.reads_gbs[i], b = r.reads_gbs[i + 1];
        if (std::min(a, b) < 0.9 * std::max(a, b)) continue;
        p.reads.push_back((a + b) / 2);
        p.fractions.push_back(r.samples_ts[i] * (double)r.decode_bytes->total() / (1e9 * p.reads.back()));
    }
    return p;
}

void print_paired_runs(const TestResult &r) {
    if (r.reads_gbs.empty()) return;
    const PairedRuns p = paired_runs(r);
    std::printf("%s: each run between two reads of the weights (%.1f-%.1f GB/s): ", r.name().c_str(),
                *std::min_element(r.reads_gbs.begin(), r.reads_gbs.end()), *std::max_element(r.reads_gbs.begin(), r.reads_gbs.end()));
    if (p.fractions.empty()) {
        std::printf("none of the %zu runs had reads within 10%% of each other\n", r.samples_ts.size());
        return;
    }
    std::string runs;
    for (size_t i = 0; i < p.fractions.size(); ++i) runs += fmt::format("{}{:.1f}% of {:.1f}", i ? ", " : "", 100.0 * p.fractions[i], p.reads[i]);
    std::printf("%zu of %zu runs steady, their bytes per second %s GB/s read around them (mean %.1f%%)\n", p.fractions.size(),
                r.samples_ts.size(), runs.c_str(), 100.0 * mean(p.fractions));
}

class Runner {
public:
    Runner(const Model &model, const BenchOptions &o, std::mt19937 &rng) : model_(model), o_(o), rng_(rng) {
        n_vocab_ = model.weights().tok_embd->ne[1];
    }

    // set when the first eval of the process ends (llama.cpp's "load time"
    // definition: model load start to the end of the first eval)
    std::optional<Clock::time_point> first_eval_end;

    // Called before each timed run of a test and after its last (null: never).
    std::function<void(TestResult &)> around_runs;

    TestResult run(const Instance &inst, int n_prompt, int n_gen, int n_depth) {
        TestResult r;
        r.inst = inst;
        r.n_prompt = n_prompt;
        r.n_gen = n_gen;
        r.n_depth = n_depth;
        SessionOptions so = session_options(o_, inst);
        so.n_ctx = o_.model.n_ctx > 0 ? o_.model.n_ctx : n_depth + n_prompt + n_gen;
        if (so.n_ctx < n_depth + n_prompt + n_gen) {
            fail("-c {}: test {} needs {} cells", so.n_ctx, r.name(), n_depth + n_prompt + n_gen);
        }
        r.n_ctx = so.n_ctx;
        Session s(model_, so);
        if (!warned_) {
            print_notes(s);
            warned_ = true;
        }
        if (!o_.no_warmup) {
            if (n_depth > 0) prompt(s, n_depth);
            if (n_prompt > 0) prompt(s, n_prompt);
            if (n_gen > 0) generate(s, 1);
        }
        for (int rep = 0; rep < o_.reps; ++rep) {
            s.reset();
            if (n_depth > 0) prompt(s, n_depth);  // the context the test starts from, not timed
            if (around_runs) around_runs(r);
            auto t0 = Clock::now();
            if (n_prompt > 0) prompt(s, n_prompt);
            if (n_gen > 0) generate(s, n_gen);
            uint64_t ns = (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
            ns = std::max<uint64_t>(ns, 1);
            r.samples_ns.push_back(ns);
            r.samples_ts.push_back(1e9 * (n_prompt + n_gen) / (double)ns);
        }
        if (around_runs && o_.reps > 0) around_runs(r);
        r.graph = s.graph_work();
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


// llama-bench's flash_attn field: 1 on, 0 off, -1 auto
int flash_attn_code(const std::string &fa) {
    return fa == "on" || fa == "1" || fa == "true" ? 1 : fa == "off" || fa == "0" || fa == "false" ? 0 : -1;
}

void print_bandwidth(const BandwidthResult &bw) {
    std::printf("memory read bandwidth: %.2f GB/s (best of %d; mean %.2f GB/s; %d threads, %zu MiB buffer, %s loads)\n",
                bw.gb_per_s, bw.runs, bw.mean_gb_per_s, bw.n_threads, bw.buffer_bytes >> 20, bw.kernel);
}

// The rows of the results, each printed when its test is done.
class Printer {
public:
    Printer(const BenchOptions &o, const ModelInfo &info, const std::vector<Instance> &insts)
        : o_(o), info_(info), format_(o.json ? "json" : o.output) {
        for (const Instance &i : insts) {
            show_kv_ |= i.cache_type_k != "f16" || i.cache_type_v != "f16";
            show_fa_ |= i.flash_attn != "auto";
        }
    }

    void begin() {
        if (format_ == "md") {
            std::printf("| %-28s | %10s | %10s | %7s | %7s |%s%s %13s | %20s |\n", "model", "size", "params", "backend",
                        "threads", show_kv_ ? " type_k | type_v |" : "", show_fa_ ? " fa |" : "", "test", "t/s");
            std::printf("| %s | %s | %s | %s | %s |%s%s %s | %s |\n", std::string(28, '-').c_str(), "---------:",
                        "---------:", "-------", "------:", show_kv_ ? " -----: | -----: |" : "", show_fa_ ? " -: |" : "",
                        "------------:", "-------------------:");
        } else if (format_ == "json") {
            std::printf("[");
        }
        std::fflush(stdout);
    }

    // `extra`: fields known only at the end (load, RSS, roofline), or null
    void row(const TestResult &r, const nlohmann::ordered_json &extra) {
        if (format_ == "md") {
            const std::string params = info_.n_params < 1'000'000'000 ? fmt::format("{:.2f} M", info_.n_params / 1e6)
                                                                      : fmt::format("{:.2f} B", info_.n_params / 1e9);
            const std::string kv =
                show_kv_ ? fmt::format(" {:>6} | {:>6} |", r.inst.cache_type_k, r.inst.cache_type_v) : "";
            const std::string fa = show_fa_ ? fmt::format(" {:>2} |", flash_attn_code(r.inst.flash_attn)) : "";
            const std::string ts = fmt::format("{:.2f} ± {:.2f}", mean(r.samples_ts), stddev(r.samples_ts));
            std::printf("| %-28s | %10s | %10s | %7s | %7d |%s%s %13s | %21s |\n", info_.type_label.c_str(),
                        human_bytes((double)info_.size).c_str(), params.c_str(), info_.backends.c_str(), toy::thread_count(r.inst.n_threads),
                        kv.c_str(), fa.c_str(), r.name().c_str(), ts.c_str());
        } else {
            nlohmann::ordered_json j = fields(r);
            if (!extra.is_null()) j.update(extra);
            if (format_ == "json") {
                std::printf("%s\n  %s", n_rows_ ? "," : "", j.dump().c_str());
            } else if (format_ == "jsonl") {
                std::printf("%s\n", j.dump().c_str());
            } else {  // csv: llama-bench's scalar fields, header before the first row
                if (n_rows_ == 0) {
                    std::string head;
                    for (auto it = j.begin(); it != j.end(); ++it)
                        if (!it->is_structured()) head += (head.empty() ? "" : ",") + it.key();
                    std::printf("%s\n", head.c_str());
                }
                std::string line;
                for (auto it = j.begin(); it != j.end(); ++it) {
                    if (it->is_structured()) continue;
                    std::string cell = it->is_string() ? it->get<std::string>() : it->dump();
                    if (cell.find_first_of(",\"\n") != std::string::npos) {
                        std::string q = "\"";
                        for (char c : cell) q += c == '"' ? std::string("\"\"") : std::string(1, c);
                        cell = q + "\"";
                    }
                    line += (line.empty() ? "" : ",") + cell;
                }
                std::printf("%s\n", line.c_str());
            }
        }
        ++n_rows_;
        std::fflush(stdout);
    }

    void end() {
        if (format_ == "json") std::printf("\n]\n");
        std::fflush(stdout);
    }

    bool markdown() const { return format_ == "md"; }

private:
    nlohmann::ordered_json fields(const TestResult &r) const {  // llama-bench's order
        const SessionOptions so = session_options(o_, r.inst);
        return {
            {"build", "toy 0.1.0"},
            {"backends", info_.backends},
            {"model_filename", info_.filename},
            {"model_type", info_.type_label},
            {"model_size", info_.size},
            {"model_n_params", info_.n_params},
            {"n_batch", o_.model.n_batch},
            {"n_ubatch", o_.model.n_ubatch},
            {"n_threads", toy::thread_count(r.inst.n_threads)},
            {"type_k", ggml_type_name(so.type_k)},
            {"type_v", ggml_type_name(so.type_v)},
            {"flash_attn", flash_attn_code(r.inst.flash_attn)},
            {"use_mmap", !o_.model.no_mmap},
            {"repack", !o_.model.no_repack},
            {"fuse", !o_.model.no_fuse},
            {"huge_pages", want_huge_pages(o_.model.load_options().huge_pages)},
            {"n_ctx", r.n_ctx},
            {"n_prompt", r.n_prompt},
            {"n_gen", r.n_gen},
            {"n_depth", r.n_depth},
            {"test", r.name()},
            {"test_time", utc_now()},
            {"avg_ns", (uint64_t)std::llround(mean(r.samples_ns))},
            {"stddev_ns", (uint64_t)std::llround(stddev(r.samples_ns))},
            {"avg_ts", mean(r.samples_ts)},
            {"stddev_ts", stddev(r.samples_ts)},
            {"samples_ns", r.samples_ns},
            {"samples_ts", r.samples_ts},
            {"graph_nodes", r.graph.nodes},
            {"graph_ops", r.graph.ops},
            {"graph_barriers", r.graph.barriers},
        };
    }

    const BenchOptions &o_;
    const ModelInfo &info_;
    std::string format_;
    bool show_kv_ = false, show_fa_ = false;
    int n_rows_ = 0;
};

int run_bench(const BenchOptions &o, bool prompt_given) {
    if (o.output != "md" && o.output != "json" && o.output != "jsonl" && o.output != "csv") {
        fail("-o: expected md, csv, json or jsonl, found '{}'", o.output);
    }
    const bool json = o.json || o.output == "json";
    if (o.reps < 1) fail("-r: expected at least 1 repetition, found {}", o.reps);
    if (o.roofline_mib < 0) fail("--roofline-mib: expected a size >= 0, found {}", o.roofline_mib);
    const std::vector<Instance> insts = instances(o);  // checks -t, -fa, -ctk, -ctv before the load
    const int n_threads = toy::thread_count(insts.front().n_threads);

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
    const std::vector<int> depths = parse_counts(o.n_depth, "-d");
    std::vector<std::pair<int, int>> pgs;
    for (const std::string &pg : o.pg) {
        const std::vector<int> v = parse_counts(pg, "-pg");
        if (v.size() != 2 || v[0] == 0 || v[1] == 0) fail("-pg: expected PROMPT,GEN token counts > 0, found '{}'", pg);
        pgs.emplace_back(v[0], v[1]);
    }

    // what the timed runs decode at least (one instance, one depth), as toy
    // run's -n tells --hugepages auto (LoadOptions::decode_tokens); prompts
    // alone leave it to the probe, as before
    int64_t decoded = 0;
    for (int n : tgs) decoded += n;
    for (const auto &pg : pgs) decoded += pg.second;
    auto t_load0 = Clock::now();
    auto model = o.model.load(decoded > 0 ? decoded * o.reps : -1);
    const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_load0).count();
    const ModelInfo info = describe(*model);
    const auto placement = model->placement();

    std::mt19937 rng(o.seed);
    Runner runner(*model, o, rng);
    if (o.roofline) {
        runner.around_runs = [&](TestResult &r) {
            if (r.n_prompt == 0 && r.n_gen > 0) r.reads_gbs.push_back(measure_weight_bandwidth(*model, n_threads, 1).gb_per_s);
        };
    }
    Printer printer(o, info, insts);
    // rows go out as they finish, except under --roofline, whose ceilings
    // come from the bandwidth probe after the tests
    const bool at_once = o.roofline;
    std::vector<TestResult> results;
    // load time, first eval and peak RSS so far: known from the first row on
    auto process = [&] {
        const double first_eval_ms =
            runner.first_eval_end ? std::chrono::duration<double, std::milli>(*runner.first_eval_end - t_load0).count() : 0.0;
        return nlohmann::ordered_json{
            {"load_ms", load_ms},
            {"load_first_eval_ms", first_eval_ms},
            {"peak_rss_bytes", peak_rss_bytes()},
            {"weights_by_buffer", nlohmann::json(std::map<std::string, size_t>(placement.begin(), placement.end()))},
        };
    };
    if (!at_once) printer.begin();
    auto run = [&](const Instance &inst, int p, int n, int d) {
        results.push_back(runner.run(inst, p, n, d));
        if (!at_once) printer.row(results.back(), process());
    };
    for (const Instance &inst : insts) {
        for (int d : depths) {
            for (int p : pps)
                if (p > 0) run(inst, p, 0, d);
            for (int n : tgs)
                if (n > 0) run(inst, 0, n, d);
            for (auto [p, n] : pgs) run(inst, p, n, d);
        }
    }
    const nlohmann::ordered_json after_tests = process();  // before the bandwidth probe's buffer
    const size_t rss = after_tests["peak_rss_bytes"];
    const double load_first_eval_ms = after_tests["load_first_eval_ms"];

    std::optional<BandwidthResult> bw, own;
    if (o.roofline) {
        bw = measure_read_bandwidth(n_threads, (size_t)o.roofline_mib << 20);
        own = measure_weight_bandwidth(*model, n_threads);
        for (auto &r : results) {
            if (r.n_prompt != 0) continue;
            const SessionOptions so = session_options(o, r.inst);
            // a tg run attends depth + 1..n_gen cells; on average depth + n_gen / 2
            r.decode_bytes = decode_bytes_per_token(*model, std::max(1, r.n_depth + r.n_gen / 2), so.type_k, so.type_v);
            r.ceiling_ts = bw->gb_per_s * 1e9 / (double)r.decode_bytes->total();
            if (own->buffer_bytes > 0) r.weights_ceiling_ts = own->gb_per_s * 1e9 / (double)r.decode_bytes->total();
        }
    }
    if (at_once) {
        printer.begin();
        for (const auto &r : results) {
            nlohmann::ordered_json extra = after_tests;
            extra["bandwidth_gbs"] = bw->gb_per_s;
            if (r.decode_bytes) {
                extra["bytes_per_token"] = r.decode_bytes->total();
                extra["weight_bytes_per_token"] = r.decode_bytes->weights;
                extra["kv_bytes_per_token"] = r.decode_bytes->kv;
                extra["ceiling_ts"] = r.ceiling_ts;
                extra["ceiling_fraction"] = mean(r.samples_ts) / r.ceiling_ts;
                if (own->buffer_bytes > 0) {
                    extra["weights_bandwidth_gbs"] = own->gb_per_s;
                    extra["weights_ceiling_ts"] = r.weights_ceiling_ts;
                    extra["weights_ceiling_fraction"] = mean(r.samples_ts) / r.weights_ceiling_ts;
                }
                if (const PairedRuns p = paired_runs(r); !p.fractions.empty()) {
                    extra["paired_steady_runs"] = p.fractions.size();
                    extra["paired_fraction"] = mean(p.fractions);
                }
            }
            printer.row(r, extra);
        }
    }
    printer.end();
    if (!printer.markdown()) return 0;
    std::printf("\nload: %.1f ms (Model::load), %.1f ms to the end of the first eval; peak RSS: %.1f MiB%s\n", load_ms,
                load_first_eval_ms, rss / 1024.0 / 1024.0, o.model.no_mmap ? "" : " (mapped weights count once touched)");
    std::string where;
    for (const auto &[buf, bytes] : placement) {
        where += fmt::format("{}{} {:.1f} MiB", where.empty() ? "" : ", ", buf, bytes / 1024.0 / 1024.0);
    }
    std::printf("weights: %s\n", where.c_str());
    for (const auto &r : results) {
        if (r.n_prompt != 0 || r.n_gen == 0) continue;
        std::printf("%s: one decode step is %d graph nodes, %d ops that compute (%d fused by ggml), %d thread "
                    "barriers\n",
                    r.name().c_str(), r.graph.nodes, r.graph.ops, r.graph.fused, r.graph.barriers);
    }
    if (bw) {
        print_bandwidth(*bw);
        for (const auto &r : results) {
            if (!r.decode_bytes) continue;
            const DecodeBytes &d = *r.decode_bytes;
            std::printf("%s: decode reads %.2f MB/token (weights %.2f MB + KV %.3f MB at context %d); ceiling %.2f t/s; "
                        "measured %.2f t/s = %.1f%% of the ceiling\n",
                        r.name().c_str(), d.total() / 1e6, d.weights / 1e6, d.kv / 1e6,
                        std::max(1, r.n_depth + r.n_gen / 2), r.ceiling_ts, mean(r.samples_ts),
                        100.0 * mean(r.samples_ts) / r.ceiling_ts);
        }
        if (own->buffer_bytes > 0) {  // (none with weights on a device)
            std::printf("the model's own weights: read at %.2f GB/s (best of %d; mean %.2f GB/s; %.1f MB a pass, where "
                        "they lie in this process)\n",
                        own->gb_per_s, own->runs, own->mean_gb_per_s, own->buffer_bytes / 1e6);
            for (const auto &r : results) {
                if (!r.decode_bytes) continue;
                std::printf("%s: ceiling from them %.2f t/s; measured = %.1f%% of it\n", r.name().c_str(),
                            r.weights_ceiling_ts, 100.0 * mean(r.samples_ts) / r.weights_ceiling_ts);
                print_paired_runs(r);
            }
        }
    }
    return 0;
}

Command reg("bench", "Measure prompt (pp) and generation (tg) speed like llama-bench; --roofline for bandwidth",
            [](CLI::App &app) {
                auto o = std::make_shared<BenchOptions>();
                o->model.add_to(app, /*with_trace=*/false);
                app.get_option("--model")->required(false);
                // the session flags that take comma lists here (every combination runs)
                for (const char *name : {"--threads", "--flash-attn", "--cache-type-k", "--cache-type-v"}) {
                    app.remove_option(app.get_option(name));
                }
                app.add_option("-t,--threads", o->threads, "threads, comma-separated (0: all)");
                app.add_option("--flash-attn", o->flash_attn, "flash attention: on, off, auto (1/0), comma-separated; also -fa");
                app.add_option("--cache-type-k", o->cache_type_k,
                               fmt::format("K cache types, comma-separated ({}); also -ctk", kv_cache_type_names()));
                app.add_option("--cache-type-v", o->cache_type_v, "V cache types, comma-separated; also -ctv");
                app.add_option("-p,--n-prompt", o->n_prompt, "prompt lengths for pp tests, comma-separated; 0 skips");
                app.add_option("-n,--n-gen", o->n_gen, "token counts for tg tests, comma-separated; 0 skips");
                app.add_option("--pg", o->pg, "prompt then generation, timed together: PROMPT,GEN (repeatable); also -pg");
                app.add_option("-d,--n-depth", o->n_depth, "tokens already in the cache when each test starts, comma-separated");
                app.add_option("-r,--repetitions", o->reps, "repetitions of each test");
                app.add_flag("--json", o->json, "same as -o json");
                app.add_option("-o,--output", o->output, "output format: md, csv, json or jsonl (llama-bench's fields)");
                app.add_flag("--no-warmup", o->no_warmup, "skip the warmup run before each test");
                app.add_flag("--roofline", o->roofline,
                             "measure memory read bandwidth; with -m also the tg ceiling, from a fresh buffer and from the model's own weights, "
                             "and each tg run against a read of the weights right before and after it (pp only with an explicit -p)");
                app.add_option("--roofline-mib", o->roofline_mib,
                               "bandwidth probe buffer in MiB (0: max(1 GiB, 4 x L3), at most a quarter of memory)");
                app.add_option("-s,--seed", o->seed, "seed of the random tokens");
                return [o, &app] { return run_bench(*o, app.count("--n-prompt") > 0); };
            });

}  // namespace
}  // namespace toy::cli
