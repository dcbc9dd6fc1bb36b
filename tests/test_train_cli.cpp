// `toy train` end to end: a run stopped by SIGINT resumes to the same loss
// curve as one never stopped, bad data and flags are one-line errors, chat
// data trains on the assistant's tokens only, --trace reports per block.
#include "model/model.h"
#include "test_util.h"
#include "text/vocab.h"
#include "train/data.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <random>
#include <spawn.h>
#include <thread>

extern char **environ;

namespace {

using toy::test::run_toy;
using toy::test::TempDir;
namespace fs = std::filesystem;

const std::string kStories = toy::test::shared_path("models/stories260K.gguf");

std::string write(const TempDir &d, const std::string &name, const std::string &text) {
    std::ofstream(d.file(name)) << text;
    return d.file(name);
}

std::string stories(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
        s += "Once upon a time, a little " + std::string(i % 2 ? "cat" : "dog") + " found a " +
             std::string(i % 3 ? "red" : "big") + " ball. It played all day and was happy.\n<|endoftext|>\n";
    }
    return s;
}

void expect_one_line_error(const toy::test::CommandResult &r, const std::string &needle) {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(r.err.rfind("toy: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

// "toy train" with these arguments as a child process.
pid_t spawn_toy(const std::vector<std::string> &args) {
    std::vector<char *> argv{const_cast<char *>(toy::test::toy_bin())};
    for (const auto &a : args) argv.push_back(const_cast<char *>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    posix_spawn(&pid, toy::test::toy_bin(), nullptr, nullptr, argv.data(), environ);
    return pid;
}

size_t lines_in(const std::string &path) {
    std::ifstream in(path);
    return (size_t)std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
}

}  // namespace

TEST(TrainCli, SigintCheckpointsAndTheResumedRunMatchesAnUninterruptedOne) {
    TempDir d;
    const std::string data = write(d, "data.txt", stories(200));
    auto args = [&](const std::string &tag) {
        return std::vector<std::string>{"train", "-m", kStories, "-f", data, "--lora-rank", "4", "-c", "32", "-b", "64",
                                        "--steps", "300", "-lr", "1e-3", "-t", "1", "-q", "-o", d.file(tag + ".gguf"),
                                        "--checkpoint-dir", d.file(tag), "--log", d.file(tag + ".csv")};
    };
    // uninterrupted
    auto full = toy::test::run_toy([&] {
        std::string s;
        for (auto &a : args("full")) s += toy::test::shell_quote(a) + " ";
        return s;
    }());
    ASSERT_EQ(full.code, 0) << full.err;

    // stopped by SIGINT part way, then resumed
    pid_t pid = spawn_toy(args("cut"));
    ASSERT_GT(pid, 0);
    for (int i = 0; i < 3000 && lines_in(d.file("cut.csv")) < 40; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    const int code = WEXITSTATUS(status);
    ASSERT_TRUE(code == 130 || code == 0) << code;  // 0 only if it finished before the signal
    ASSERT_FALSE(fs::is_empty(d.file("cut")));
    auto resumed = run_toy("train --resume " + d.file("cut") + " -t 1 -q -o " + d.file("cut.gguf") + " --checkpoint-dir " +
                           d.file("cut") + " --log " + d.file("cut.csv"));
    ASSERT_EQ(resumed.code, 0) << resumed.err;

    auto a = toy::gguf::File::open(d.file("full/checkpoint-000300.gguf"));
    auto b = toy::gguf::File::open(d.file("cut/checkpoint-000300.gguf"));
    EXPECT_EQ(a->get_float_array("toy.checkpoint.train_loss"), b->get_float_array("toy.checkpoint.train_loss"));
    for (const auto &t : a->tensors()) {
        EXPECT_EQ(0, std::memcmp(a->tensor_data(t), b->tensor_data(b->tensor(t.name)), t.nbytes)) << t.name;
    }
    // the log continues where it stopped: one row per step
    EXPECT_EQ(lines_in(d.file("cut.csv")), 301u);
    // resumed once more with no step left: the output again, and the last step's loss (it said "train loss nan")
    auto again = run_toy("train --resume " + d.file("full") + " -t 1 -o " + d.file("again.gguf"));
    ASSERT_EQ(again.code, 0) << again.err;
    char last[64];
    std::snprintf(last, sizeof last, "300 steps, train loss %.4f,", a->get_float_array("toy.checkpoint.train_loss").back());
    EXPECT_NE(again.err.find(last), std::string::npos) << again.err;
    EXPECT_TRUE(fs::exists(d.file("again.gguf")));
}

TEST(TrainCli, BadDataFlagsAndCheckpointsAreOneLineErrors) {
    TempDir d;
    const std::string ok = write(d, "ok.txt", stories(40));
    const std::string base = "train -m " + kStories + " --lora-rank 4 -c 32 --steps 2 -q -o " + d.file("o.gguf") + " ";
    expect_one_line_error(run_toy(base + "-f " + write(d, "empty.txt", "")), "empty");
    expect_one_line_error(run_toy(base + "-f " + write(d, "short.txt", "Once upon a time.")), "shorter than one window");
    expect_one_line_error(run_toy(base + "-f " + d.file("missing.txt")), "training data: cannot read");
    // a directory opens as a stream of nothing: it was "the training data file is empty"
    expect_one_line_error(run_toy(base + "-f " + d.file("")), "is a directory, not a file");
    // the shape flags of --from-scratch were ignored by a fine-tune
    expect_one_line_error(run_toy(base + "-f " + ok + " --n-layer 2"), "--n-layer: describes a new model (give --from-scratch)");
    // outputs that cannot be written fail before the first step, not after the last (the run was lost)
    const std::string steps = "train -m " + kStories + " --lora-rank 4 -c 32 --steps 100000 -q -f " + ok;
    expect_one_line_error(run_toy(steps + " -o " + d.file("no-dir/o.gguf")), "no-dir/o.gguf: cannot create a temporary file");
    expect_one_line_error(run_toy(steps + " -o " + d.file("o.gguf") + " --plot " + d.file("no-dir/p.svg")), "no-dir/p.svg");
    EXPECT_FALSE(fs::exists(d.file("o.gguf")));
    // a device without end was read until memory ran out
    expect_one_line_error(run_toy(base + "-f /dev/zero"), "training data: '/dev/zero' gives more than 1 GiB");
    expect_one_line_error(run_toy(base + "--chat-template chatml -f " + write(d, "bad.jsonl", "{\"messages\": []}\nnot json\n")),
                          "bad.jsonl:2");
    // a line of a million '[' parsed, then SIGSEGV where the error message quoted it
    expect_one_line_error(run_toy(base + "--chat-template chatml -f " +
                                  write(d, "deep.jsonl", std::string(1000000, '[') + std::string(1000000, ']') + "\n")),
                          "deep.jsonl:1: JSON nested deeper than 512 levels");
    expect_one_line_error(
        run_toy(base + "--chat-template chatml -f " +
                write(d, "noreply.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n")),
        "no conversation with an assistant turn");
    expect_one_line_error(run_toy(base + "-f " + ok + " -opt adam"), "-opt");
    expect_one_line_error(run_toy(base + "-f " + ok + " --lora-targets q,x"), "--lora-targets");
    expect_one_line_error(run_toy(base + "-f " + ok + " -b 48"), "multiples of -c");
    // numbers that ran as something else before: a negative -b, --steps or
    // --lora-rank as their defaults (a whole epoch, a full fine-tune),
    // --lora-rank 100000 as a 6 GiB adapter of stories260K's 64 x 32 K
    const std::string bare = "train -m " + kStories + " -c 32 -q -o " + d.file("o.gguf") + " -f " + ok + " ";
    for (const auto &[flags, needle] : std::vector<std::pair<std::string, std::string>>{
             {"-b -2", "-b: expected"},
             {"-ub -1", "-ub: expected"},
             {"--steps -1", "--steps: expected"},
             {"--warmup -5", "--warmup"},
             {"--eval-every -2", "--eval-every"},
             {"--lora-rank -3", "--lora-rank: expected a rank >= 1"},
             {"--lora-rank 100000", "expected at most 32, the smaller side of the 'k' projection (64 x 32)"},
             {"--lora-rank 9 --lora-per-head", "expected at most 8, the smaller side of the 'q' projection (64 x 8 per head)"},
             {"--lora-rank 4 --lora-alpha 0", "--lora-alpha"},
             {"--adam-beta1 1", "--adam-beta1"},
             {"--adam-beta2 -0.5", "--adam-beta2"},
             {"--adam-eps 0", "--adam-eps"},
             // every window held out (it said "need at least 2" of a file that had them)
             {"--val-split 0.999", "windows leaves none to train on (a smaller -val-split, more text or a smaller -c)"},
             {"--keep-checkpoints 0", "--keep-checkpoints"},
             {"--checkpoint-every -1", "--checkpoint-every"},
             // a directory that cannot be made (was "internal: filesystem error")
             {"--steps 1 --checkpoint-dir " + ok + "/sub", "--checkpoint-dir " + ok + "/sub: cannot create the directory: Not a directory"},
         }) {
        SCOPED_TRACE(flags);
        expect_one_line_error(run_toy(bare + flags), needle);
    }
    EXPECT_FALSE(fs::exists(d.file("o.gguf")));
    expect_one_line_error(run_toy("train --from-scratch -m " + kStories + " -f " + ok + " -o " + d.file("o.gguf")), "exactly one");
    expect_one_line_error(
        run_toy("train -m " + toy::test::fixture_path("llama-256.q8_0.gguf") + " -f " + ok + " -c 16 -q -o " + d.file("o.gguf")),
        "LoRA");
    expect_one_line_error(run_toy("train -m " + toy::test::fixture_path("qwen3moe.f32.gguf") + " -f " + ok + " -q -o " + d.file("o.gguf")),
                          "mul_mat_id");

    // checkpoints: not one, truncated, of another model
    expect_one_line_error(run_toy("train --resume " + kStories + " -q"), "not a toy training checkpoint");
    const std::string model = d.file("model.gguf");
    fs::copy_file(kStories, model);
    auto r = run_toy("train -m " + model + " -f " + ok + " --lora-rank 4 -c 32 --steps 2 -q -o " + d.file("o.gguf") +
                     " --checkpoint-dir " + d.file("ck"));
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string ck = d.file("ck/checkpoint-000002.gguf");
    fs::copy_file(ck, d.file("cut.gguf"));
    fs::resize_file(d.file("cut.gguf"), fs::file_size(ck) / 2);
    expect_one_line_error(run_toy("train --resume " + d.file("cut.gguf") + " -q"), "cut.gguf");
    expect_one_line_error(run_toy("train --resume " + ck + " -lr 1 -q"), "keeps the settings");
    fs::remove(model);
    fs::copy_file(toy::test::fixture_path("llama-tied.f32.gguf"), model);  // the base changed under the checkpoint
    auto mismatch = run_toy("train --resume " + ck + " -q -o " + d.file("o.gguf"));
    EXPECT_EQ(mismatch.code, 1);
    EXPECT_EQ(std::count(mismatch.err.begin(), mismatch.err.end(), '\n'), 1) << mismatch.err;
}

// --bench measures optimizer steps and writes nothing (from scratch, its
// random start lives in a temporary file that is removed).
TEST(TrainCli, BenchMeasuresStepsAndWritesNothing) {
    TempDir d;
    const toy::test::CommandResult r = run_toy("train -m " + kStories + " --lora-rank 4 -c 32 -b 64 --bench 2 -o " + d.file("o.gguf"));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("mode       lora"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("data       random tokens"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("median of 2 after one untimed step"), std::string::npos) << r.out;
    EXPECT_TRUE(std::filesystem::is_empty(d.path)) << "wrote into " << d.path;
    const toy::test::CommandResult scratch = run_toy("train --from-scratch --preset custom --arch llama --n-embd 32 --n-layer 1 --n-head 2 "
                                   "--n-ff 64 --n-vocab 300 -c 16 -b 16 --bench 1");
    ASSERT_EQ(scratch.code, 0) << scratch.err;
    EXPECT_NE(scratch.out.find("(from scratch)"), std::string::npos) << scratch.out;
    const std::string start = scratch.out.substr(11, scratch.out.find(" (from scratch)") - 11);
    EXPECT_FALSE(std::filesystem::exists(start)) << start;
    // a negative count trained for real and wrote a model
    expect_one_line_error(run_toy("train -m " + kStories + " --lora-rank 4 -c 32 --bench -1 -o " + d.file("o.gguf")),
                          "--bench: expected a number of steps >= 1");
    EXPECT_TRUE(std::filesystem::is_empty(d.path));
}

TEST(TrainCli, ChatDataTrainsOnTheAssistantTokensOnly) {
    TempDir d;
    const std::string jsonl = write(
        d, "chat.jsonl",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me about the dog.\"}, {\"role\": \"assistant\", "
        "\"content\": \"The dog was happy.\"}]}\n"
        "\n"
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be kind.\"}, {\"role\": \"user\", \"content\": \"And the "
        "cat?\"}, {\"role\": \"assistant\", \"content\": \"The cat slept.\"}, {\"role\": \"user\", \"content\": "
        "\"Then?\"}, {\"role\": \"assistant\", \"content\": \"It ran home.\"}]}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"no reply here\"}]}\n");
    auto model = toy::Model::load(kStories);
    const toy::text::Vocab vocab = toy::text::Vocab::load(model->file());
    const toy::text::ChatTemplate chat(toy::text::ChatTemplate::builtin_source("chatml"));
    // windows of one token: each kept window is one target, in stream order
    toy::train::Dataset ds = toy::train::load_dataset(jsonl, vocab, &chat, 1);
    EXPECT_EQ(ds.n_documents, 2);
    EXPECT_GE(ds.n_skipped, 1);  // the conversation without a reply (and the windows without a target)
    std::vector<int32_t> targets;
    for (const auto &w : ds.windows) targets.push_back(w.tokens[1]);
    const std::string text = vocab.detokenize(targets, true);
    EXPECT_EQ(text, "The dog was happy.<|im_end|>\nThe cat slept.<|im_end|>\nIt ran home.<|im_end|>\n");

    auto r = run_toy("train -m " + kStories + " --lora-rank 4 --chat-template chatml -f " + jsonl + " -c 8 --steps 3 -q -o " +
                     d.file("chat-adapter.gguf"));
    EXPECT_EQ(r.code, 0) << r.err;
}

TEST(TrainCli, TracePrintsPerBlockStatisticsDuringTraining) {
    TempDir d;
    auto r = run_toy("train -m " + kStories + " -f " + write(d, "t.txt", stories(20)) + " -c 16 --steps 1 -q --trace -o " +
                     d.file("t.gguf"));
    ASSERT_EQ(r.code, 0) << r.err;
    for (const char *name : {"attn_norm-0", "ffn_out-0", "l_out-0", "l_out-4", "result_output"}) {
        EXPECT_NE(r.err.find(std::string(" ") + name + " "), std::string::npos) << name;
    }
}

// Issue 14's fault test: training killed with SIGKILL at random moments (in a
// step, in the middle of writing a checkpoint or the log) resumes from the
// newest intact checkpoint, and the finished run equals one never stopped:
// the same loss curve (checkpoint and CSV log, one row per step) and the same
// weights, with no temporary files left behind.
TEST(TrainCli, SigkillAtRandomMomentsAlwaysResumesToTheSameRun) {
    TempDir d;
    const std::string data = write(d, "data.txt", stories(200));
    auto args = [&](const std::string &tag) {
        return std::vector<std::string>{"train", "-m", kStories, "-f", data, "--lora-rank", "4", "-c", "32", "-b", "64",
                                        "--steps", "200", "-lr", "1e-3", "-t", "1", "-q", "-o", d.file(tag + ".gguf"),
                                        "--checkpoint-dir", d.file(tag), "--checkpoint-every", "3", "--log", d.file(tag + ".csv")};
    };
    auto run_to_end = [&](std::vector<std::string> a) {
        std::string s;
        for (auto &x : a) s += toy::test::shell_quote(x) + " ";
        return run_toy(s);
    };
    auto steps_and_losses = [](const std::string &csv) {
        std::ifstream in(csv);
        std::vector<std::string> rows;
        for (std::string line; std::getline(in, line);) rows.push_back(line.substr(0, line.find(',', line.find(',', line.find(',') + 1) + 1)));
        return rows;  // "step,epoch,loss" of every row
    };
    ASSERT_EQ(run_to_end(args("full")).code, 0);
    const auto full_log = steps_and_losses(d.file("full.csv"));
    ASSERT_EQ(full_log.size(), 201u);
    auto full = toy::gguf::File::open(d.file("full/checkpoint-000200.gguf"));

    auto has_checkpoint = [](const std::string &dir) {
        if (!fs::exists(dir)) return false;
        for (const auto &e : fs::directory_iterator(dir))
            if (e.path().extension() == ".gguf") return true;
        return false;
    };
    std::mt19937 rng(14);
    for (int run = 0; run < 20; ++run) {
        SCOPED_TRACE("run " + std::to_string(run));
        const std::string tag = "cut" + std::to_string(run);
        // killed once or twice, each time at a random moment of its own run
        for (int kill_no = 0; kill_no < 1 + run % 2; ++kill_no) {
            std::vector<std::string> a = args(tag);
            if (has_checkpoint(d.file(tag))) {
                a = {"train", "--resume", d.file(tag), "-t", "1", "-q", "-o", d.file(tag + ".gguf"), "--checkpoint-dir", d.file(tag),
                     "--checkpoint-every", "3", "--log", d.file(tag + ".csv")};
            }
            pid_t pid = spawn_toy(a);
            ASSERT_GT(pid, 0);
            std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 500000)(rng)));
            kill(pid, SIGKILL);
            waitpid(pid, nullptr, 0);
        }
        // then resumed (or started again, if it died before its first checkpoint) to the end
        auto done = has_checkpoint(d.file(tag)) ? run_toy("train --resume " + d.file(tag) + " -t 1 -q -o " + d.file(tag + ".gguf") + " --checkpoint-dir " +
                                  d.file(tag) + " --log " + d.file(tag + ".csv"))
                        : run_to_end(args(tag));
        ASSERT_EQ(done.code, 0) << done.err;
        auto cut = toy::gguf::File::open(d.file(tag + "/checkpoint-000200.gguf"));
        EXPECT_EQ(full->get_float_array("toy.checkpoint.train_loss"), cut->get_float_array("toy.checkpoint.train_loss"));
        for (const auto &t : full->tensors()) {
            EXPECT_EQ(0, std::memcmp(full->tensor_data(t), cut->tensor_data(cut->tensor(t.name)), t.nbytes)) << t.name;
        }
        EXPECT_EQ(steps_and_losses(d.file(tag + ".csv")), full_log);
        for (const auto &e : fs::directory_iterator(d.file(tag))) {
            EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
        }
    }
}
