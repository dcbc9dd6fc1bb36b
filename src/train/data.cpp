#include "train/data.h"

#include "core/error.h"
#include "core/json.h"
#include "core/read_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

namespace toy::train {

Dataset Dataset::split_tail(double fraction) {
    if (!(fraction > 0.0 && fraction < 1.0)) fail("-val-split: expected a fraction between 0 and 1, found {}", fraction);
    const int64_t n = (int64_t)windows.size();
    const int64_t n_val = std::max<int64_t>(1, (int64_t)std::llround(n * fraction));
    if (n_val >= n) {
        fail("{}: holding out {:g}% of {} window{} leaves none to train on (a smaller -val-split, more text or a smaller -c)",
             source, fraction * 100, n, n == 1 ? "" : "s");
    }
    Dataset val;
    val.source = source + " (held out)";
    val.windows.assign(std::make_move_iterator(windows.end() - n_val), std::make_move_iterator(windows.end()));
    windows.resize(n - n_val);
    return val;
}

Dataset pack_stream(const std::vector<int32_t> &stream, const std::vector<uint8_t> &mask, int64_t n_ctx) {
    Dataset d;
    d.n_tokens = (int64_t)stream.size();
    for (int64_t at = 0; at + n_ctx + 1 <= (int64_t)stream.size(); at += n_ctx) {
        Window w;
        w.tokens.assign(stream.begin() + at, stream.begin() + at + n_ctx + 1);
        w.mask.assign(mask.begin() + at + 1, mask.begin() + at + n_ctx + 1);
        w.n_targets = std::count(w.mask.begin(), w.mask.end(), 1);
        if (w.n_targets == 0) {
            ++d.n_skipped;
            continue;
        }
        d.windows.push_back(std::move(w));
    }
    return d;
}

namespace {

std::string read_file(const std::string &path) {
    std::string s = read_whole_file(path, "training data");
    if (s.empty()) fail("{}: the training data file is empty", path);
    return s;
}

// Tokens of r.text[begin, end) (special tokens of the template parsed, the
// messages' own text never), BOS only at 0.
std::vector<int32_t> tokenize_segment(const text::Vocab &vocab, const text::Rendered &r, size_t begin, size_t end) {
    text::Rendered cut{r.text.substr(0, end), r.content};
    return text::tokenize_rendered(vocab, cut, begin);
}

Dataset load_chat(const std::string &path, const std::string &body, const text::Vocab &vocab,
                  const text::ChatTemplate &chat, int64_t n_ctx) {
    std::vector<int32_t> stream;
    std::vector<uint8_t> mask;
    int64_t n_conv = 0, n_no_reply = 0, line_no = 0;
    std::istringstream lines(body);
    std::string line;
    while (std::getline(lines, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        nlohmann::json j;
        try {
            j = parse_json(line, fmt::format("{}:{}", path, line_no));
        } catch (const Error &) {
            throw;
        } catch (const std::exception &e) {
            fail("{}:{}: expected a JSON object per line, found text that is not JSON ({})", path, line_no,
                 std::string(e.what()).substr(0, 80));
        }
        if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array()) {
            fail("{}:{}: expected {{\"messages\": [...]}}, found {}", path, line_no, j.dump().substr(0, 60));
        }
        std::vector<text::Message> msgs;
        for (const auto &m : j["messages"]) {
            if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
                !m["content"].is_string()) {
                fail("{}:{}: expected messages with string \"role\" and \"content\", found {}", path, line_no,
                     m.dump().substr(0, 60));
            }
            msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
        }
        if (std::none_of(msgs.begin(), msgs.end(), [](const text::Message &m) { return m.role == "assistant"; })) {
            ++n_no_reply;
            continue;
        }
        // assistant replies as character ranges of the whole rendering: from the
        // end of the prompt that asks for reply i to the end of the rendering through it
        const text::Rendered full = chat.render(msgs, false);
        std::vector<std::pair<size_t, size_t>> replies;
        for (size_t i = 0; i < msgs.size(); ++i) {
            if (msgs[i].role != "assistant") continue;
            std::vector<text::Message> before(msgs.begin(), msgs.begin() + i), through(msgs.begin(), msgs.begin() + i + 1);
            const std::string p = chat.apply(before, true), t = chat.apply(through, false);
            if (!full.text.starts_with(t) || !t.starts_with(p)) {
                fail("{}:{}: the chat template does not render this conversation as a sequence of prefixes; "
                     "cannot tell the assistant's tokens",
                     path, line_no);
            }
            replies.emplace_back(p.size(), t.size());
        }
        // tokenized whole, as at inference; a reply's tokens are those after the
        // tokens of the text before it (where that text does not end on a token
        // boundary of the whole, at the end of the tokens the two share)
        const std::vector<int32_t> ids = text::tokenize_rendered(vocab, full, 0);
        auto token_at = [&](size_t chars) {
            const std::vector<int32_t> head = tokenize_segment(vocab, full, 0, chars);
            size_t n = 0;
            while (n < head.size() && n < ids.size() && head[n] == ids[n]) ++n;
            return n;
        };
        std::vector<uint8_t> target(ids.size(), 0);
        for (auto [b, e] : replies) {
            const size_t tb = token_at(b), te = e >= full.text.size() ? ids.size() : token_at(e);
            for (size_t i = tb; i < te; ++i) target[i] = 1;
        }
        stream.insert(stream.end(), ids.begin(), ids.end());
        mask.insert(mask.end(), target.begin(), target.end());
        ++n_conv;
    }
    if (n_conv == 0) {
        fail("{}: no conversation with an assistant turn ({} lines, {} without a reply)", path, line_no, n_no_reply);
    }
    if ((int64_t)stream.size() < n_ctx + 1) {
        fail("{}: {} tokens of conversations are shorter than one window (-c {} needs {})", path, stream.size(), n_ctx,
             n_ctx + 1);
    }
    Dataset d = pack_stream(stream, mask, n_ctx);
    d.n_documents = n_conv;
    d.n_skipped += n_no_reply;
    if (d.windows.empty()) fail("{}: no window of {} tokens holds an assistant token", path, n_ctx);
    return d;
}

Dataset load_text(const std::string &path, const std::string &body, const text::Vocab &vocab, int64_t n_ctx,
                  const std::string &separator) {
    std::vector<int32_t> stream;
    int64_t n_docs = 0;
    size_t at = 0;
    while (at <= body.size()) {
        size_t end = separator.empty() ? std::string::npos : body.find(separator, at);
        if (end == std::string::npos) end = body.size();
        std::string_view doc(body.data() + at, end - at);
        if (doc.find_first_not_of(" \t\r\n") != std::string_view::npos) {
            // trim the newlines around a separator line, keep the document's own text
            while (!doc.empty() && (doc.front() == '\n' || doc.front() == '\r')) doc.remove_prefix(1);
            while (!doc.empty() && (doc.back() == '\n' || doc.back() == '\r')) doc.remove_suffix(1);
            std::vector<int32_t> ids = vocab.tokenize(doc, true, false);
            stream.insert(stream.end(), ids.begin(), ids.end());
            if (vocab.eos() != text::Vocab::kNoToken && (ids.empty() || ids.back() != vocab.eos())) stream.push_back(vocab.eos());
            ++n_docs;
        }
        at = end + std::max<size_t>(separator.size(), 1);
    }
    if (n_docs == 0) fail("{}: the training data holds no text", path);
    if ((int64_t)stream.size() < n_ctx + 1) {
        fail("{}: {} tokens of text are shorter than one window (-c {} needs {})", path, stream.size(), n_ctx, n_ctx + 1);
    }
    Dataset d = pack_stream(stream, std::vector<uint8_t>(stream.size(), 1), n_ctx);
    d.n_documents = n_docs;
    return d;
}

}  // namespace

Dataset load_dataset(const std::string &path, const text::Vocab &vocab, const text::ChatTemplate *chat, int64_t n_ctx,
                     const std::string &separator) {
    if (n_ctx < 1) fail("-c: expected a positive window length, found {}", n_ctx);
    const std::string body = read_file(path);
    Dataset d;
    if (path.ends_with(".jsonl")) {
        if (!chat) fail("{}: chat data needs a chat template, and the model has none (give --chat-template)", path);
        d = load_chat(path, body, vocab, *chat, n_ctx);
    } else {
        d = load_text(path, body, vocab, n_ctx, separator);
    }
    d.source = path;
    return d;
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch + 1);
    // Fisher-Yates with our own index draws: std::shuffle's use of the engine
    // is the library's choice, and the order must not change with it
    for (int64_t i = n - 1; i > 0; --i) {
        const int64_t j = (int64_t)(rng() % (uint64_t)(i + 1));
        std::swap(order[i], order[j]);
    }
    return order;
}

}  // namespace toy::train
