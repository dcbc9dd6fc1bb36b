// toy train: full fine-tune, LoRA, or from scratch (train/run.h).
//
//   toy train -m base.gguf -f corpus.txt -c 128 -b 512 -epochs 2 -o tuned.gguf
//   toy train -m base.gguf -f chat.jsonl --lora-rank 16 --lora-targets q,v -o adapter.gguf
//   toy train --from-scratch --arch llama --n-embd 256 --n-layer 4 --vocab-from base.gguf -f corpus.txt -o new.gguf
//   toy train --resume ckpt/          (continue where a stopped run left off)
#include "apps/cli.h"
#include "apps/init_flags.h"
#include "apps/session_options.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "train/bench.h"
#include "train/run.h"

#include <csignal>
#include <unistd.h>
#include <filesystem>

namespace fs = std::filesystem;

namespace toy::cli {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

struct TrainFlags {
    train::RunSettings s;
    train::RunIo io;
    bool from_scratch = false;
    InitFlags init;
    int lora_rank = 0;
    std::string lora_targets = "q,k,v,o";
    std::string optimizer = "adamw", schedule = "cosine";
    float lr_min = 0.0f;
    bool trace = false, quiet = false;
    int64_t bench_steps = 0;
    SplitFlags split{0};  // -ngl 0 unless asked: blocks and their trainable tensors on the CPU
    std::vector<CLI::Option *> run_flags;   // flags that a resumed run takes from its checkpoint
    std::vector<CLI::Option *> init_flags;  // the shape of a new model (--from-scratch only)
};

int run_bench(const TrainFlags &f) {
    if (!f.io.resume.empty()) fail("--bench: measures a fresh run (no --resume)");
    struct Cleanup {
        std::string path;
        ~Cleanup() {
            std::error_code ec;  // (a destructor: never throws)
            if (!path.empty()) fs::remove(path, ec);
        }
    } cleanup{f.from_scratch ? f.s.model : ""};
    const train::RunSettings &s = f.s;
    const train::BenchResult r = train::bench_training(s, f.io.n_threads, f.bench_steps, f.io.grad_checkpointing);
    const double mib = 1048576.0;
    fmt::print("model      {} ({})\n", s.model, f.from_scratch ? "from scratch" : "fine-tune");
    fmt::print("mode       {}, {} trainable parameters, windows of {} tokens, {} tokens per step\n", r.mode, r.n_trainable,
               s.n_ctx, r.tokens_per_step);
    fmt::print("data       {}\n", s.data.empty() ? "random tokens" : s.data);
    fmt::print("speed      {:.1f} tokens/s ({:.1f} ms per step, median of {} after one untimed step)\n", r.tokens_per_s,
               r.ms_per_step, r.steps);
    fmt::print("compute    {:.3g} GFLOP per token -> {:.1f} GFLOP/s = {:.0f}% of this machine's F32 matmul peak ({:.1f} GFLOP/s)\n",
               r.flops_per_token / 1e9, r.gflops, 100.0 * r.gflops / r.peak_gflops, r.peak_gflops);
    fmt::print("memory     weights {:.1f} MiB, trainable state {:.1f} MiB (values, gradients, moments), peak RSS {:.1f} MiB\n",
               r.weight_bytes / mib, r.state_bytes / mib, r.peak_rss / mib);
    return 0;
}

int run_train(TrainFlags &f) {
    train::RunSettings &s = f.s;
    if (f.bench_steps < 0) fail("--bench: expected a number of steps >= 1 (0: train, no measurement), found {}", f.bench_steps);
    if (!f.io.resume.empty()) {
        for (CLI::Option *o : f.run_flags) {
            if (o->count() > 0) {
                fail("{}: a resumed run keeps the settings of its checkpoint (give only --resume, -t, -o and output flags)",
                     o->get_name());
            }
        }
    } else {
        if (s.data.empty() && f.bench_steps == 0) fail("-f: training data is required (a text file, or chat .jsonl)");
        if (f.from_scratch == !s.model.empty()) fail("give exactly one of -m (fine-tune a model) or --from-scratch");
        if (!s.lens_from.empty() && !f.from_scratch) fail("--lens-from: starts a new model (give --from-scratch)");
        if (!f.from_scratch) {
            // (a fine-tune has the shape of -m: --n-layer 2 was ignored without a word)
            for (CLI::Option *o : f.init_flags) {
                if (o->count() > 0) fail("{}: describes a new model (give --from-scratch); a fine-tune keeps -m's", o->get_name());
            }
        }
        if (f.lora_rank > 0) {
            if (f.from_scratch) fail("--lora-rank: a model trained from scratch is trained whole (no LoRA)");
            s.mode = train::Mode::Lora;
            s.lora.rank = f.lora_rank;
            s.lora.targets = train::parse_lora_targets(f.lora_targets);
            s.lora.seed = s.seed;
        } else if (s.lora.per_head) {
            fail("--lora-per-head: needs --lora-rank");
        }
        if (f.optimizer == "adamw") {
            s.opt.kind = train::OptimizerKind::AdamW;
        } else if (f.optimizer == "sgd") {
            s.opt.kind = train::OptimizerKind::Sgd;
        } else {
            fail("-opt: expected adamw or sgd, found '{}'", f.optimizer);
        }
        if (f.schedule == "cosine") {
            s.schedule = train::ScheduleKind::Cosine;
        } else if (f.schedule == "linear") {
            s.schedule = train::ScheduleKind::Linear;
        } else if (f.schedule == "constant") {
            s.schedule = train::ScheduleKind::Constant;
        } else {
            fail("--lr-schedule: expected cosine, linear or constant, found '{}'", f.schedule);
        }
        if (!(s.opt.lr > 0)) fail("-lr: expected a positive learning rate, found {}", s.opt.lr);
        if (f.lr_min < 0 || f.lr_min > s.opt.lr) fail("-lr-min: expected 0..{} (-lr), found {}", s.opt.lr, f.lr_min);
        s.lr_min_ratio = f.lr_min / s.opt.lr;
        if (s.opt.weight_decay < 0) fail("-wd: expected >= 0, found {}", s.opt.weight_decay);
        if (s.opt.grad_clip < 0) fail("--grad-clip: expected >= 0 (0: off), found {}", s.opt.grad_clip);
        if (s.val_split < 0 || s.val_split >= 1) fail("-val-split: expected a fraction in [0, 1), found {}", s.val_split);
        if (!(s.opt.beta1 >= 0 && s.opt.beta1 < 1)) fail("--adam-beta1: expected a value in [0, 1), found {}", s.opt.beta1);
        if (!(s.opt.beta2 >= 0 && s.opt.beta2 < 1)) fail("--adam-beta2: expected a value in [0, 1), found {}", s.opt.beta2);
        if (!(s.opt.eps > 0)) fail("--adam-eps: expected a positive epsilon, found {}", s.opt.eps);
        // counts where 0 means "as the help says" and a negative value means nothing
        if (s.n_batch < 0) fail("-b: expected a multiple of -c (0: -c), found {}", s.n_batch);
        if (s.n_ubatch < 0) fail("-ub: expected a divisor of -b (0: -b), found {}", s.n_ubatch);
        if (s.max_steps < 0) fail("--steps: expected a count >= 1 (0: -epochs decides), found {}", s.max_steps);
        if (s.warmup < 0) fail("--warmup: expected a number of steps >= 0, found {}", s.warmup);
        if (s.eval_every < 0) fail("--eval-every: expected a number of steps >= 0 (0: at start and end only), found {}", s.eval_every);
        if (f.lora_rank < 0) fail("--lora-rank: expected a rank >= 1 (0: no LoRA, the whole model), found {}", f.lora_rank);
        if (f.lora_rank > 0 && !(s.lora.alpha > 0)) fail("--lora-alpha: expected a positive alpha, found {}", s.lora.alpha);
        if (!s.val_data.empty() && s.val_split > 0) fail("--val-file / -val-split: give one of them");
        if (f.from_scratch) {
            // the random start is a model file like any other, kept beside the checkpoints
            InitOptions o = init_options_from(f.init);
            o.type = InitType::F32;
            o.seed = s.seed;
            if (f.bench_steps > 0) {
                s.model = (fs::temp_directory_path() / fmt::format("toy-bench-{}.init.gguf", getpid())).string();
            } else {
                const bool beside_output = f.io.checkpoint_dir.empty();
                const fs::path dir = beside_output ? fs::path(f.io.output).parent_path() : fs::path(f.io.checkpoint_dir);
                if (!dir.empty()) make_directories(dir.string(), beside_output ? "-o" : "--checkpoint-dir");
                s.model = (dir / (fs::path(f.io.output).stem().string() + ".init.gguf")).string();
            }
            const InitResult r = init_model(o, s.model);
            if (!f.quiet) std::fprintf(stderr, "toy: from scratch: %s %lld parameters, initial weights in %s\n", o.arch.c_str(),
                                       (long long)r.n_params, s.model.c_str());
        }
    }
    if (f.io.checkpoint_every < 0) {
        fail("--checkpoint-every: expected a number of steps >= 0 (0: only at the end), found {}", f.io.checkpoint_every);
    }
    if (f.io.keep_checkpoints < 1) fail("--keep-checkpoints: expected at least 1, found {}", f.io.keep_checkpoints);
    f.io.split = f.split.options();
    if (f.bench_steps > 0) {
        if (asks_offload(f.io.split)) fail("--bench: measures training on the CPU (no -ngl)");
        return run_bench(f);
    }
    if (f.io.output.empty() && f.io.resume.empty()) fail("-o: an output file is required");
    if (f.io.per_head_layout && s.mode == train::Mode::Lora) fail("--per-head-layout: a LoRA run writes an adapter, not a model");
    f.io.progress = f.quiet ? nullptr : stderr;
    f.io.trace = f.trace ? stderr : nullptr;
    f.io.stop = &g_stop;
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
    const train::RunResult r = train::run_training(s, f.io);
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    return r.interrupted ? 130 : 0;
}

Command reg("train", "Train a model: full fine-tune, LoRA, or from scratch (AdamW, checkpoints, resume)", [](CLI::App &app) {
    auto f = std::make_shared<TrainFlags>();
    train::RunSettings &s = f->s;
    auto run = [&](CLI::Option *o) {
        f->run_flags.push_back(o);
        return o;
    };
    run(app.add_option("-m,--model", s.model, "model to fine-tune (F32/F16/BF16 whole; any type with --lora-rank)"));
    run(app.add_flag("--from-scratch", f->from_scratch, "train a new model of the shape the init flags give (toy init's flags)"));
    run(app.add_option("-f,--file", s.data, "training data: text (documents split at --sep, joined with EOS) or chat .jsonl"));
    run(app.add_option("--val-file", s.val_data, "held-out data (same format)"));
    run(app.add_option("--val-split", s.val_split, "hold out this fraction of the windows (also -val-split)"));
    run(app.add_option("--sep", s.separator, "document separator in text data (default <|endoftext|>)"));
    run(app.add_option("--chat-template", s.chat_template, "chat template for .jsonl data: a built-in name (default: the model's)"));
    run(app.add_option("-c,--ctx-size", s.n_ctx, "tokens per training window (default 128)"));
    run(app.add_option("-b,--batch-size", s.n_batch, "tokens per optimizer step, a multiple of -c (default -c)"));
    run(app.add_option("--ubatch-size", s.n_ubatch, "tokens per graph, a divisor of -b (default -b); also -ub"));
    run(app.add_option("--epochs", s.epochs, "passes over the data (default 1); also -epochs"));
    run(app.add_option("--steps", s.max_steps, "stop after this many optimizer steps (overrides -epochs)"));
    run(app.add_option("--learning-rate", s.opt.lr, "peak learning rate (default 1e-4); also -lr"));
    run(app.add_option("--lr-min", f->lr_min, "learning rate at the end of the decay (default 0); also -lr-min"));
    run(app.add_option("--lr-schedule", f->schedule, "cosine, linear or constant after warmup (default cosine)"));
    run(app.add_option("--warmup", s.warmup, "linear warmup steps (default 0)"));
    run(app.add_option("--optimizer", f->optimizer, "adamw or sgd (default adamw); also -opt"));
    run(app.add_option("--weight-decay", s.opt.weight_decay, "decoupled weight decay on matrices (default 0); also -wd"));
    run(app.add_option("--adam-beta1", s.opt.beta1, "AdamW beta1 (default 0.9)"));
    run(app.add_option("--adam-beta2", s.opt.beta2, "AdamW beta2 (default 0.999)"));
    run(app.add_option("--adam-eps", s.opt.eps, "AdamW epsilon (default 1e-8)"));
    run(app.add_option("--grad-clip", s.opt.grad_clip, "clip the global gradient norm to this (default 1; 0: off)"));
    run(app.add_option("--eval-every", s.eval_every, "steps between held-out evaluations (default: at start and end only)"));
    run(app.add_option("-s,--seed", s.seed, "seed for data order, LoRA and from-scratch initialization (default 42)"));
    run(app.add_option("--lens-from", s.lens_from,
                       "from scratch: token embedding = this donor's frozen embedding x a trained projection (same vocabulary)"));
    run(app.add_option("--lora-rank", f->lora_rank, "train a LoRA adapter of this rank on a frozen base"));
    run(app.add_option("--lora-alpha", s.lora.alpha, "LoRA alpha: the update is scaled by alpha / rank (default 16)"));
    run(app.add_option("--lora-targets", f->lora_targets, "projections to adapt: q,k,v,o,gate,up,down or all (default q,k,v,o)"));
    run(app.add_flag("--lora-per-head", s.lora.per_head, "Q adapted per head: one rank-r A_h, B_h per head (block-diagonal)"));
    app.add_flag("--per-head-layout", f->io.per_head_layout,
                 "write the trained model with attn_q/k/v per head (blk.N.attn_q.head_H.weight); toy fuse converts it");
    app.add_option("-o,--output", f->io.output, "the trained model (GGUF), or with --lora-rank the adapter (GGUF)");
    app.add_option("--checkpoint-dir", f->io.checkpoint_dir, "write checkpoints here (at the end, every --checkpoint-every steps, on Ctrl-C)");
    app.add_option("--checkpoint-every", f->io.checkpoint_every, "steps between checkpoints (default: only at the end)");
    app.add_option("--keep-checkpoints", f->io.keep_checkpoints, "checkpoints kept (default 3)");
    app.add_option("--resume", f->io.resume, "continue from a checkpoint file, or the newest in a directory");
    app.add_option("--log", f->io.log_csv, "CSV of every step: loss, val loss, lr, gradient norms, tokens/s");
    app.add_option("--plot", f->io.plot_svg, "SVG plot of the training and held-out losses, written at the end");
    app.add_option("-t,--threads", f->io.n_threads, "threads (0: all)");
    app.add_flag("--grad-checkpointing", f->io.grad_checkpointing,
                 "keep only each block's input and recompute its activations in the backward pass: activation memory of "
                 "one block instead of all, for about one more forward pass of compute");
    app.add_flag("--trace", f->trace, "per-block activation statistics of every training graph (stderr)");
    app.add_flag("-q,--quiet", f->quiet, "no progress lines");
    f->split.add_to(app);
    app.add_option("--bench", f->bench_steps,
                   "measure N optimizer steps (after one untimed): tokens/s, share of the F32 matmul peak, memory; "
                   "-f optional (random tokens), writes nothing");
    const size_t before = app.get_options().size();
    add_init_flags(app, f->init, true);
    for (size_t i = before; i < app.get_options().size(); ++i) {
        f->run_flags.push_back(app.get_options()[i]);
        f->init_flags.push_back(app.get_options()[i]);
    }
    return [f] { return run_train(*f); };
});

}  // namespace
}  // namespace toy::cli
