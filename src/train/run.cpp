#include "train/run.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/memory.h"
#include "model/export.h"
#include "train/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace toy::train {
namespace {

const char *mode_name(Mode m) { return m == Mode::Full ? "full" : "lora"; }
const char *schedule_name(ScheduleKind k) {
    return k == ScheduleKind::Cosine ? "cosine" : k == ScheduleKind::Linear ? "linear" : "constant";
}

template <class E>
E enum_from(const std::string &s, std::initializer_list<std::pair<const char *, E>> names, const char *what) {
    for (auto &[n, e] : names)
        if (s == n) return e;
    fail("checkpoint settings: unknown {} '{}'", what, s);
}

// FNV-1a over the windows' tokens and masks (63 bits: stored as a GGUF integer).
uint64_t hash_windows(const std::vector<Window> &ws) {
    // FNV's offset basis short of its last digit, as checkpoints have always
    // stored this hash: kept so that they resume
    uint64_t h = 1469598103934665603ull;
    for (const Window &w : ws) {
        h = fnv1a_bytes(w.tokens.data(), w.tokens.size() * sizeof(int32_t), h);
        h = fnv1a_bytes(w.mask.data(), w.mask.size(), h);
    }
    return h >> 1;
}

std::string duration(double s) {
    const int64_t t = (int64_t)std::llround(std::max(0.0, s));
    return t >= 3600 ? fmt::format("{}:{:02d}:{:02d}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02d}", t / 60, t % 60);
}

// The CSV log: one row per step. A resumed run keeps the rows up to the
// checkpoint's step and goes on from there: rows written after that
// checkpoint by a run that was killed (and a row cut off mid-line) are
// dropped first, so every step has exactly one row.
class CsvLog {
public:
    CsvLog(const std::string &path, bool resume, int64_t resume_step) : path_(path) {
        if (path.empty()) return;
        const bool exists = resume && fs::exists(path);
        if (exists) {
            std::ifstream in(path, std::ios::binary);
            std::string kept, line;
            while (std::getline(in, line)) {
                if (in.eof()) break;  // no newline: a row cut off by the kill
                const bool header = kept.empty() && line.rfind("step,", 0) == 0;
                if (!header && std::strtoll(line.c_str(), nullptr, 10) > resume_step) break;
                kept += line + '\n';
            }
            write_file_atomic(path, kept);
            header_done_ = !kept.empty();
        }
        out_.open(path, exists ? std::ios::app : std::ios::trunc);
        if (!out_) fail("{}: cannot write the training log", path);
    }
    void row(int64_t step, int64_t epoch, const StepStats &st, double val, float lr, double tps, double elapsed) {
        if (path_.empty()) return;
        if (!header_done_) {
            out_ << "step,epoch,loss,val_loss,lr,grad_norm";
            for (auto &g : st.group_norms) out_ << ",grad_norm_" << g.first;
            out_ << ",tokens_per_s,elapsed_s\n";
            header_done_ = true;
        }
        out_ << fmt::format("{},{},{:.6f},{},{:.6g},{:.6g}", step, epoch, st.loss, std::isnan(val) ? "" : fmt::format("{:.6f}", val), lr,
                            st.grad_norm);
        for (auto &g : st.group_norms) out_ << fmt::format(",{:.6g}", g.second);
        out_ << fmt::format(",{:.1f},{:.3f}\n", tps, elapsed);
        out_.flush();
        if (!out_) fail("{}: writing the training log failed (is the disk full?)", path_);
    }

private:
    std::string path_;
    std::ofstream out_;
    bool header_done_ = false;
};

}  // namespace

nlohmann::json RunSettings::to_json() const {
    std::vector<std::string> targets;
    for (auto p : lora.targets) targets.push_back(graph::kProjNames[(int)p]);
    return {{"model", model},
            {"data", data},
            {"val_data", val_data},
            {"val_split", val_split},
            {"separator", separator},
            {"chat_template", chat_template},
            {"mode", mode_name(mode)},
            {"lens_from", lens_from},
            {"lora", {{"rank", lora.rank}, {"alpha", lora.alpha}, {"targets", targets}, {"per_head", lora.per_head}, {"seed", lora.seed}}},
            {"n_ctx", n_ctx},
            {"n_batch", n_batch},
            {"n_ubatch", n_ubatch},
            {"optimizer",
             {{"kind", opt.kind == OptimizerKind::AdamW ? "adamw" : "sgd"},
              {"lr", opt.lr},
              {"beta1", opt.beta1},
              {"beta2", opt.beta2},
              {"eps", opt.eps},
              {"weight_decay", opt.weight_decay},
              {"grad_clip", opt.grad_clip}}},
            {"schedule", schedule_name(schedule)},
            {"warmup", warmup},
            {"lr_min_ratio", lr_min_ratio},
            {"epochs", epochs},
            {"max_steps", max_steps},
            {"eval_every", eval_every},
            {"seed", seed}};
}

RunSettings RunSettings::from_json(const nlohmann::json &j) {
    try {
        RunSettings s;
        s.model = j.at("model");
        s.data = j.at("data");
        s.val_data = j.at("val_data");
        s.val_split = j.at("val_split");
        s.separator = j.at("separator");
        s.chat_template = j.at("chat_template");
        s.mode = enum_from<Mode>(j.at("mode"), {{"full", Mode::Full}, {"lora", Mode::Lora}}, "mode");
        s.lens_from = j.at("lens_from");
        const auto &l = j.at("lora");
        s.lora.rank = l.at("rank");
        s.lora.alpha = l.at("alpha");
        std::string targets;
        for (const auto &t : l.at("targets")) {
            if (!targets.empty()) targets += ',';
            targets += t.get<std::string>();
        }
        if (!targets.empty()) s.lora.targets = parse_lora_targets(targets);
        s.lora.per_head = l.at("per_head");
        s.lora.seed = l.at("seed");
        s.n_ctx = j.at("n_ctx");
        s.n_batch = j.at("n_batch");
        s.n_ubatch = j.at("n_ubatch");
        const auto &o = j.at("optimizer");
        s.opt.kind = enum_from<OptimizerKind>(o.at("kind"), {{"adamw", OptimizerKind::AdamW}, {"sgd", OptimizerKind::Sgd}}, "optimizer");
        s.opt.lr = o.at("lr");
        s.opt.beta1 = o.at("beta1");
        s.opt.beta2 = o.at("beta2");
        s.opt.eps = o.at("eps");
        s.opt.weight_decay = o.at("weight_decay");
        s.opt.grad_clip = o.at("grad_clip");
        s.schedule = enum_from<ScheduleKind>(
            j.at("schedule"), {{"cosine", ScheduleKind::Cosine}, {"linear", ScheduleKind::Linear}, {"constant", ScheduleKind::Constant}},
            "schedule");
        s.warmup = j.at("warmup");
        s.lr_min_ratio = j.at("lr_min_ratio");
        s.epochs = j.at("epochs");
        s.max_steps = j.at("max_steps");
        s.eval_every = j.at("eval_every");
        s.seed = j.at("seed");
        return s;
    } catch (const nlohmann::json::exception &e) {
        fail("checkpoint settings: {}", e.what());
    }
}

Trainable load_trainable(const RunSettings &s, const SplitOptions &split) {
    LoadOptions lo = trainable_load_options();
    // LoRA: the frozen base's blocks on their devices, each block's adapters
    // beside them. Full: the base stays on the CPU (it is only read once),
    // each block's F32 parameters, gradients and moments go to its device.
    // The head goes where -ngl puts it, with the loss (Trainer).
    if (s.mode == Mode::Lora) lo.split = split;
    Trainable t;
    t.model = Model::load(s.model, lo);
    check_trainable(t.model->config());
    if (s.mode == Mode::Full) {
        t.tm = TrainableModel::full(*t.model, s.lens_from, s.seed, plan_split(split, t.model->config().n_layer));
    } else {
        t.tm = TrainableModel::lora(*t.model, s.lora);
    }
    return t;
}

TrainerOptions trainer_options(const RunSettings &s) {
    const int64_t n_batch = s.n_batch > 0 ? s.n_batch : s.n_ctx;
    const int64_t n_ubatch = s.n_ubatch > 0 ? std::min(s.n_ubatch, n_batch) : n_batch;
    if (s.n_ctx < 1) fail("-c: expected a positive window length, found {}", s.n_ctx);
    if (n_batch % s.n_ctx != 0 || n_ubatch % s.n_ctx != 0 || n_batch % n_ubatch != 0) {
        fail("-b {} / -ub {}: expected multiples of -c {} with -ub dividing -b", n_batch, n_ubatch, s.n_ctx);
    }
    TrainerOptions to;
    to.n_ctx = s.n_ctx;
    to.seqs_per_ubatch = n_ubatch / s.n_ctx;
    to.ubatches = n_batch / n_ubatch;
    to.opt = s.opt;
    return to;
}

RunResult run_training(RunSettings s, const RunIo &io) {
    using clock = std::chrono::steady_clock;
    const auto t_start = clock::now();
    RunResult res;
    FILE *log = io.progress;
    auto say = [&](const std::string &line) {
        if (log) std::fprintf(log, "toy: %s\n", line.c_str());
    };

    // 1. Resuming: the checkpoint's settings are the run's settings.
    std::string resume = io.resume;
    if (!resume.empty() && fs::is_directory(resume)) {
        const std::string dir = resume;
        resume = latest_checkpoint(dir);
        if (resume.empty()) fail("--resume {}: the directory holds no checkpoint-<step>.gguf", dir);
    }
    if (!resume.empty()) s = RunSettings::from_json(checkpoint_settings(resume));
    // what the end writes can be written (a missing directory found after the last step lost the run)
    if (!io.output.empty()) check_writable(io.output);
    if (!io.plot_svg.empty()) check_writable(io.plot_svg);

    // 2. The model, its tokenizer and the data.
    Trainable t = load_trainable(s, io.split);
    Model *model = t.model.get();
    if (t.tm->split().offloads()) say("split: " + t.tm->split().describe());
    const text::Vocab vocab = text::Vocab::load(model->file());
    std::unique_ptr<text::ChatTemplate> chat;
    auto needs_chat = [](const std::string &p) { return p.ends_with(".jsonl"); };
    if (needs_chat(s.data) || needs_chat(s.val_data)) {
        std::string note;
        chat = std::make_unique<text::ChatTemplate>(text::select_chat_template(model->file(), vocab, s.chat_template, "", &note));
        if (!note.empty()) say(note);
    }
    Dataset train = load_dataset(s.data, vocab, chat.get(), s.n_ctx, s.separator);
    Dataset val;
    if (!s.val_data.empty()) {
        val = load_dataset(s.val_data, vocab, chat.get(), s.n_ctx, s.separator);
    } else if (s.val_split > 0) {
        val = train.split_tail(s.val_split);
    }

    // 3. The step's shape.
    TrainableModel *tm = t.tm.get();
    TrainerOptions to = trainer_options(s);
    to.recompute = io.grad_checkpointing;
    to.trace = io.trace;
    const int64_t n_batch = to.seqs_per_ubatch * to.ubatches * s.n_ctx;
    const int64_t per_step = to.seqs_per_ubatch * to.ubatches;
    const int64_t n_windows = (int64_t)train.windows.size();
    const int64_t steps_per_epoch = n_windows / per_step;
    if (steps_per_epoch == 0) {
        fail("{}: {} windows of {} tokens, but one step takes {} (-b {}): lower -b or -c, or give more text", s.data, n_windows,
             s.n_ctx, per_step, n_batch);
    }
    if (s.epochs < 1 && s.max_steps < 1) fail("-epochs: expected at least 1, found {}", s.epochs);
    const int64_t total = s.max_steps > 0 ? s.max_steps : s.epochs * steps_per_epoch;
    LrSchedule sched{s.opt.lr, s.warmup, total, s.schedule, s.lr_min_ratio};

    Engine engine(io.n_threads, tm->split().devices);
    Trainer trainer(engine, *tm, to);
    CheckpointState st;
    st.settings = s.to_json();
    st.data_hash = hash_windows(train.windows);
    if (!resume.empty()) {
        const uint64_t want = st.data_hash;
        st = load_checkpoint(resume, tm->params());
        if (st.data_hash != want) {
            fail("{}: the training data differs from the data this checkpoint was trained on ({})", resume, s.data);
        }
        trainer.set_optimizer_steps(st.step);
        say(fmt::format("resuming {} at step {} of {}", resume, st.step, total));
    }
    std::string where;  // "; 3.1 MiB of it on RPC0"
    for (const auto &[dev, bytes] : tm->params().offloaded_bytes()) {
        where += fmt::format("{} {:.1f} MiB{} on {}", where.empty() ? ";" : ",", bytes / 1048576.0, where.empty() ? " of it" : "",
                             ggml_backend_dev_name(dev));
    }
    say(fmt::format("{}{} of {}: {} trainable parameters ({:.1f} MiB with gradients and moments{}); {}: {} documents, {} tokens, "
                    "{} windows of {}{}; {} held out; {} steps of {} sequences ({} per epoch)",
                    s.mode == Mode::Full ? "full fine-tune" : "LoRA", s.mode == Mode::Full ? "" : fmt::format(" rank {}", s.lora.rank),
                    s.model, tm->params().n_elements(), tm->params().state_bytes() / 1048576.0, where, s.data, train.n_documents,
                    train.n_tokens, n_windows, s.n_ctx, train.n_skipped ? fmt::format(" ({} skipped)", train.n_skipped) : "",
                    val.windows.size(), total, per_step, steps_per_epoch));

    // 4. The loop.
    if (!io.checkpoint_dir.empty()) make_directories(io.checkpoint_dir, "--checkpoint-dir");
    CsvLog csv(io.log_csv, !resume.empty(), st.step);
    auto save = [&](int64_t step) {
        if (io.checkpoint_dir.empty()) return;
        st.step = step;
        res.checkpoint = checkpoint_name(io.checkpoint_dir, step);
        save_checkpoint(res.checkpoint, tm->params(), st);
        prune_checkpoints(io.checkpoint_dir, std::max(1, io.keep_checkpoints));
    };
    auto evaluate = [&](int64_t step) -> double {
        if (val.windows.empty()) return NAN;
        const double v = trainer.evaluate(val.windows);
        st.val_steps.push_back(step);
        st.val_loss.push_back((float)v);
        return v;
    };
    if (st.step == 0 && !val.windows.empty()) evaluate(0);
    const bool tty = log && isatty(fileno(log));
    std::vector<int64_t> order;
    int64_t order_epoch = -1;
    const int64_t tokens_per_step = per_step * s.n_ctx;
    const auto t_loop = clock::now();
    int64_t step = st.step;
    const int64_t first_step = st.step;
    double last_val = st.val_loss.empty() ? NAN : st.val_loss.back();
    if (!st.train_loss.empty()) res.train_loss = st.train_loss.back();  // a resumed run that has no step left to take
    auto last_print = clock::now() - std::chrono::hours(1);
    while (step < total) {
        if (io.stop && io.stop->load()) {
            res.interrupted = true;
            break;
        }
        const int64_t epoch = step / steps_per_epoch, idx = step % steps_per_epoch;
        if (epoch != order_epoch) {
            order = epoch_order(n_windows, s.seed, epoch);
            order_epoch = epoch;
        }
        std::vector<const Window *> batch;
        for (int64_t i = 0; i < per_step; ++i) batch.push_back(&train.windows[order[idx * per_step + i]]);
        const float lr = sched.at(step);
        const auto t0 = clock::now();
        const StepStats ss = trainer.step(batch, lr);
        const double dt = std::chrono::duration<double>(clock::now() - t0).count();
        ++step;
        st.train_loss.push_back((float)ss.loss);
        double v = NAN;
        if ((s.eval_every > 0 && step % s.eval_every == 0) || step == total) v = evaluate(step);
        if (!std::isnan(v)) last_val = v;
        const double elapsed = std::chrono::duration<double>(clock::now() - t_loop).count();
        const double tps = tokens_per_step / dt;
        csv.row(step, epoch + 1, ss, v, lr, tps, elapsed);
        res.train_loss = ss.loss;
        if (io.checkpoint_every > 0 && step % io.checkpoint_every == 0 && step < total) save(step);
        if (log && (tty || step == total || clock::now() - last_print > std::chrono::seconds(10) || !std::isnan(v))) {
            const double per = elapsed / (double)(step - first_step);
            const std::string line = fmt::format(
                "step {}/{} | epoch {}/{} | loss {:.4f} | val {} | lr {:.2e} | {:.0f} tok/s | ETA {}", step, total,
                epoch + 1, (total + steps_per_epoch - 1) / steps_per_epoch, ss.loss,
                std::isnan(last_val) ? "-" : fmt::format("{:.4f}", last_val), lr, tps, duration(per * (total - step)));
            std::fprintf(log, tty ? "\r%s\033[K" : "%s\n", line.c_str());
            std::fflush(log);
            last_print = clock::now();
        }
    }
    if (tty) std::fprintf(log, "\n");
    res.steps = step;
    const double loop_s = std::chrono::duration<double>(clock::now() - t_loop).count();
    res.tokens_per_s = step > first_step ? tokens_per_step * (double)(step - first_step) / std::max(1e-9, loop_s) : 0;

    // 5. The end (or a signal): checkpoint, write, plot (the loop evaluated the last step).
    res.val_loss = last_val;
    save(step);
    if (res.interrupted) {
        say(fmt::format("stopped at step {} of {}{}", step, total,
                        res.checkpoint.empty() ? " (no --checkpoint-dir: nothing saved)"
                                               : fmt::format("; resume with --resume {}", io.checkpoint_dir)));
    } else if (!io.output.empty()) {
        if (io.per_head_layout && s.mode == Mode::Full) {
            // written in the standard layout, then split by the exporter
            const std::string standard = io.output + ".standard.tmp";
            tm->write(standard);
            ExportOptions eo;
            eo.per_head_layout = true;
            std::error_code ec;  // (removing the temporary must not hide the export's own error)
            try {
                export_model(*Model::load(standard, trainable_load_options()), LoraSet{}, io.output, eo);
            } catch (...) {
                fs::remove(standard, ec);
                throw;
            }
            fs::remove(standard, ec);
        } else {
            tm->write(io.output);
        }
        say(fmt::format("wrote {} ({})", io.output, s.mode == Mode::Full ? "model" : "LoRA adapter"));
    }
    if (!io.plot_svg.empty()) write_loss_plot(io.plot_svg, st.train_loss, st.val_steps, st.val_loss, fs::path(s.data).filename().string());
    res.peak_rss = peak_rss_bytes();
    say(fmt::format("{} steps, train loss {:.4f}, held-out loss {}, {:.0f} tokens/s, peak RSS {:.1f} MiB, {:.1f} s", step,
                    res.train_loss, std::isnan(res.val_loss) ? "-" : fmt::format("{:.4f}", res.val_loss), res.tokens_per_s,
                    res.peak_rss / 1048576.0, std::chrono::duration<double>(clock::now() - t_start).count()));
    return res;
}

double held_out_loss(const std::string &model_path, const std::string &data, int64_t n_ctx, int n_threads,
                     int64_t *n_targets) {
    auto model = Model::load(model_path, trainable_load_options());
    const text::Vocab vocab = text::Vocab::load(model->file());
    Dataset d = load_dataset(data, vocab, nullptr, n_ctx);
    auto tm = TrainableModel::frozen(*model);
    Engine engine(n_threads);
    TrainerOptions to;
    to.n_ctx = n_ctx;
    to.seqs_per_ubatch = std::min<int64_t>(8, (int64_t)d.windows.size());
    Trainer tr(engine, *tm, to);
    if (n_targets) {
        *n_targets = 0;
        for (const Window &w : d.windows) *n_targets += w.n_targets;
    }
    return tr.evaluate(d.windows);
}

void write_loss_plot(const std::string &path, const std::vector<float> &train, const std::vector<int64_t> &val_steps,
                     const std::vector<float> &val, const std::string &title) {
    const double W = 720, H = 420, L = 60, R = 20, T = 40, B = 50;
    double lo = INFINITY, hi = -INFINITY;
    for (float v : train) lo = std::min(lo, (double)v), hi = std::max(hi, (double)v);
    for (float v : val) lo = std::min(lo, (double)v), hi = std::max(hi, (double)v);
    if (!(hi > lo)) hi = lo + 1, lo -= 1;
    const double pad = 0.05 * (hi - lo);
    lo -= pad;
    hi += pad;
    const double n = std::max<double>(1, (double)train.size());
    auto x = [&](double step) { return L + (W - L - R) * step / n; };
    auto y = [&](double v) { return T + (H - T - B) * (hi - v) / (hi - lo); };
    std::string svg = fmt::format(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n"
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        "<text x=\"{}\" y=\"22\" font-size=\"15\">toy train: {}</text>\n",
        W, H, L, title);
    for (int i = 0; i <= 5; ++i) {
        const double v = lo + (hi - lo) * i / 5, yy = y(v);
        svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                           "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3f}</text>\n",
                           L, yy, W - R, yy, L - 6, yy + 4, v);
        const double st = n * i / 5;
        svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:.0f}</text>\n", x(st), H - B + 18, st);
    }
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step</text>\n", (L + W - R) / 2, H - 12);
    auto polyline = [&](const std::vector<std::pair<double, double>> &pts, const char *color, double width) {
        if (pts.empty()) return;
        svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" points=\"", color, width);
        for (auto [sx, v] : pts) svg += fmt::format("{:.1f},{:.1f} ", x(sx), y(v));
        svg += "\"/>\n";
    };
    std::vector<std::pair<double, double>> tp, vp;
    for (size_t i = 0; i < train.size(); ++i) tp.emplace_back((double)(i + 1), train[i]);
    for (size_t i = 0; i < val.size(); ++i) vp.emplace_back((double)val_steps[i], val[i]);
    polyline(tp, "#1f77b4", 1.2);
    polyline(vp, "#d62728", 2);
    for (auto [sx, v] : vp) svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"#d62728\"/>\n", x(sx), y(v));
    svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#1f77b4\">train loss</text>"
                       "<text x=\"{}\" y=\"{}\" fill=\"#d62728\">held-out loss</text>\n</svg>\n",
                       W - R - 200, T + 14, W - R - 110, T + 14);
    write_file_atomic(path, svg);
}

}  // namespace toy::train
