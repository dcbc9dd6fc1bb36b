// Completion requests: the JSON body of /v1/completions and
// /v1/chat/completions -> what the scheduler runs, every field checked (a
// wrong type or value is a 400 that names the field).
#include "serve/request.h"

#include "core/error.h"
#include "core/json.h"
#include "text/json_schema.h"

#include <cmath>
#include <cstdlib>

namespace toy::serve {

using json = nlohmann::ordered_json;

json parse_body(const std::string &body) {
    json j;
    try {
        j = parse_json<json>(body, "the request body");
    } catch (const json::exception &) {
        throw ApiError{400, "the request body is not valid JSON"};
    } catch (const Error &e) {
        throw ApiError{400, e.what()};
    }
    if (!j.is_object()) throw ApiError{400, "the request body must be a JSON object"};
    return j;
}

namespace {

// OpenAI's {"token id": bias} or llama-server's [[id, bias], ...]; a bias of
// false bans the token. Without the field (or null), `fallback`.
std::vector<std::pair<int32_t, float>> logit_bias_of(const json &b, int32_t n_vocab,
                                                     const std::vector<std::pair<int32_t, float>> &fallback) {
    auto it = b.find("logit_bias");
    if (it == b.end() || it->is_null()) return fallback;
    std::vector<std::pair<int32_t, float>> out;
    auto add = [&](const json &id, const json &bias) {
        int64_t token = -1;
        if (id.is_number_integer()) {
            token = id.get<int64_t>();
        } else if (id.is_string()) {
            const std::string s = id.get<std::string>();
            char *end = nullptr;
            token = std::strtoll(s.c_str(), &end, 10);
            if (s.empty() || *end) token = -1;
        }
        if (token < 0 || token >= n_vocab) {
            throw ApiError{400, fmt::format("'logit_bias' keys must be token ids from 0 to {}, found {}", n_vocab - 1,
                                            id.dump())};
        }
        if (bias.is_boolean() && !bias.get<bool>()) {
            out.emplace_back((int32_t)token, -INFINITY);
        } else if (bias.is_number()) {
            out.emplace_back((int32_t)token, bias.get<float>());
        } else {
            throw ApiError{400, fmt::format("'logit_bias' values must be numbers (or false), found {}", bias.dump())};
        }
    };
    if (it->is_object()) {
        for (const auto &[id, bias] : it->items()) add(json(id), bias);
    } else if (it->is_array()) {
        for (const json &pair : *it) {
            if (!pair.is_array() || pair.size() != 2) throw ApiError{400, "'logit_bias' pairs must be [token id, bias]"};
            add(pair[0], pair[1]);
        }
    } else {
        throw ApiError{400, "'logit_bias' must be an object of token id: bias"};
    }
    return out;
}

text::SamplerParams sampling_of(const json &b, int32_t n_vocab, const text::SamplerParams &defaults) {
    text::SamplerParams p = defaults;
    p.logit_bias = logit_bias_of(b, n_vocab, defaults.logit_bias);
    // llama-server's names where OpenAI has no field
    const std::pair<const char *, float *> numbers[] = {
        {"temperature", &p.temp},          {"top_p", &p.top_p},
        {"min_p", &p.min_p},               {"presence_penalty", &p.presence_penalty},
        {"frequency_penalty", &p.frequency_penalty}, {"repeat_penalty", &p.repeat_penalty},
        {"typical_p", &p.typical_p},       {"top_n_sigma", &p.top_n_sigma},
        {"xtc_probability", &p.xtc_probability}, {"xtc_threshold", &p.xtc_threshold},
        {"dry_multiplier", &p.dry_multiplier}, {"dry_base", &p.dry_base},
        {"mirostat_tau", &p.mirostat_tau}, {"mirostat_eta", &p.mirostat_eta},
    };
    for (auto [name, dst] : numbers) *dst = field<float>(b, name, *dst, "a number");
    const std::pair<const char *, int32_t *> integers[] = {
        {"top_k", &p.top_k}, {"min_keep", &p.min_keep}, {"dry_allowed_length", &p.dry_allowed_length},
        {"dry_penalty_last_n", &p.dry_penalty_last_n}, {"mirostat", &p.mirostat}, {"repeat_last_n", &p.penalty_last_n},
    };
    for (auto [name, dst] : integers) *dst = field<int32_t>(b, name, *dst, "an integer");
    if (auto it = b.find("dry_sequence_breakers"); it != b.end() && !it->is_null()) {
        if (!it->is_array()) throw ApiError{400, "'dry_sequence_breakers' must be an array of strings"};
        p.dry_sequence_breakers.clear();
        for (const json &s : *it) {
            if (!s.is_string()) throw ApiError{400, "'dry_sequence_breakers' must be an array of strings"};
            p.dry_sequence_breakers.push_back(s.get<std::string>());
        }
    }
    if (auto it = b.find("samplers"); it != b.end() && !it->is_null()) {
        // llama-server's: an array of names, or one string of them
        std::string names;
        if (it->is_string()) {
            names = it->get<std::string>();
        } else if (it->is_array()) {
            for (const json &n : *it) {
                if (!n.is_string()) throw ApiError{400, "'samplers' must be an array of sampler names"};
                if (!names.empty()) names += ';';
                names += n.get<std::string>();
            }
        } else {
            throw ApiError{400, "'samplers' must be an array of sampler names"};
        }
        try {
            p.order = text::parse_stages(names, "'samplers'");
        } catch (const Error &e) {
            throw ApiError{400, e.what()};
        }
    }
    if (const int64_t seed = field<int64_t>(b, "seed", -1, "an integer"); seed >= 0) p.seed = (uint64_t)seed;
    // OpenAI's range for the request's own value (null is none); the server's --temp may be below 0: greedy, as in llama.cpp
    if (p.temp < 0 && field<float>(b, "temperature", 0.0f, "a number") < 0) {
        throw ApiError{400, fmt::format("'temperature' must be >= 0, found {}", p.temp)};
    }
    try {
        text::check_params(p, text::ParamNames::fields);
    } catch (const Error &e) {
        throw ApiError{400, e.what()};
    }
    return p;
}

std::vector<std::string> stops_of(const json &b) {
    auto it = b.find("stop");
    if (it == b.end() || it->is_null()) return {};
    if (it->is_string()) return {it->get<std::string>()};
    std::vector<std::string> out;
    if (it->is_array()) {
        for (const auto &s : *it) {
            if (!s.is_string()) throw ApiError{400, "'stop' must be a string or an array of strings"};
            out.push_back(s.get<std::string>());
        }
        return out;
    }
    throw ApiError{400, "'stop' must be a string or an array of strings"};
}

// Constrained output: llama-server's `grammar` (GBNF) and `json_schema`, and
// OpenAI's response_format ({"type": "text"}, {"type": "json_object"} with an
// optional "schema", {"type": "json_schema", "json_schema": {"schema": ...}}).
std::shared_ptr<const text::Grammar> grammar_of(const json &b, const text::Vocab &vocab) {
    const bool has_grammar = b.contains("grammar") && !b["grammar"].is_null();
    const bool has_schema = b.contains("json_schema") && !b["json_schema"].is_null();
    const bool has_format = b.contains("response_format") && !b["response_format"].is_null();
    if (has_grammar + has_schema + has_format > 1) {
        throw ApiError{400, "give at most one of 'grammar', 'json_schema' and 'response_format'"};
    }
    std::string gbnf;
    try {
        if (has_grammar) {
            if (!b["grammar"].is_string()) throw ApiError{400, "'grammar' must be a string (GBNF)"};
            gbnf = b["grammar"].get<std::string>();
        } else if (has_schema || has_format) {
            json schema;
            bool any_object = false;
            if (has_schema) {
                schema = b["json_schema"];
            } else {
                const auto &f = b["response_format"];
                const std::string type = f.is_object() && f.contains("type") && f["type"].is_string() ? f["type"].get<std::string>() : "";
                if (type == "text") return nullptr;
                if (type == "json_object") {
                    if (f.contains("schema")) schema = f["schema"];
                    else any_object = true;
                } else if (type == "json_schema") {
                    if (!f.contains("json_schema") || !f["json_schema"].is_object() || !f["json_schema"].contains("schema")) {
                        throw ApiError{400, "response_format json_schema needs {\"json_schema\": {\"schema\": {...}}}"};
                    }
                    schema = f["json_schema"]["schema"];
                } else {
                    throw ApiError{400, "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                                        "{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {...}}}"};
                }
            }
            gbnf = any_object ? text::json_object_gbnf() : text::json_schema_to_gbnf(schema);
        } else {
            return nullptr;
        }
        return text::Grammar::parse(gbnf, "root", &vocab);
    } catch (const Error &e) {
        throw ApiError{400, e.what()};
    }
}

// Function calling is not implemented: a request that offers the model tools
// (OpenAI's `tools`, or the older `functions`) is a 400, as in llama-server
// without --jinja, rather than a reply written as if none were offered. With
// tool_choice "none" (function_call "none") the model may call none anyway,
// so the request is served without them.
void refuse_tools(const json &b) {
    const std::pair<const char *, const char *> offers[] = {{"tools", "tool_choice"}, {"functions", "function_call"}};
    for (auto [key, choice] : offers) {
        auto it = b.find(key);
        if (it == b.end() || it->is_null() || (it->is_array() && it->empty())) continue;
        auto c = b.find(choice);
        if (c != b.end() && c->is_string() && *c == "none") continue;
        throw ApiError{400, fmt::format("'{}': toy serve does not call tools (function calling is not supported); send "
                                        "the request without '{}', or with \"{}\": \"none\"",
                                        key, key, choice)};
    }
}

std::vector<text::Message> messages_of(const json &b) {
    auto it = b.find("messages");
    if (it == b.end() || !it->is_array() || it->empty()) throw ApiError{400, "'messages' must be a non-empty array"};
    std::vector<text::Message> out;
    for (const auto &m : *it) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
            throw ApiError{400, "each message must be an object with a string 'role'"};
        }
        const std::string role = m["role"];
        if (role != "system" && role != "user" && role != "assistant" && role != "developer") {
            throw ApiError{400, fmt::format("unknown role '{}': expected system, user or assistant", role)};
        }
        std::string content;
        const json &c = m.contains("content") ? m["content"] : json();
        if (c.is_string()) {
            content = c.get<std::string>();
        } else if (c.is_array()) {  // [{"type": "text", "text": ...}]
            for (const auto &part : c) {
                const auto type = part.is_object() ? part.find("type") : part.end();
                if (type == part.end() || *type != "text" || !part.contains("text") || !part["text"].is_string()) {
                    throw ApiError{400, "message content parts must be {\"type\": \"text\", \"text\": ...}"};
                }
                content += part["text"].get<std::string>();
            }
        } else {
            throw ApiError{400, fmt::format("the content of a '{}' message must be a string", role)};
        }
        out.push_back({role == "developer" ? "system" : role, content});
    }
    return out;
}

// A list of token ids (a completions prompt's, an embeddings input's), each
// checked; `where` names the list in errors.
std::vector<int32_t> ids_of(const json &list, const text::Vocab &vocab, const std::string &where) {
    std::vector<int32_t> ids;
    for (const json &id : list) {
        const int64_t v = id.is_number_integer() ? id.get<int64_t>() : -1;
        if (v < 0 || v >= vocab.n_tokens()) {
            throw ApiError{400, fmt::format("{} token ids must be integers from 0 to {}, found {}", where, vocab.n_tokens() - 1, id.dump())};
        }
        ids.push_back((int32_t)v);
    }
    if (ids.empty()) throw ApiError{400, fmt::format("{} is an empty list of token ids", where)};
    return ids;
}

// The completions prompt: a string (tokenized with BOS, as llama-server does),
// or OpenAI's other form of one prompt, its token ids (taken as they are).
std::vector<int32_t> prompt_of(const json &b, const text::Vocab &vocab) {
    auto it = b.find("prompt");
    if (it == b.end() || !(it->is_string() || it->is_array())) {
        throw ApiError{400, "'prompt' must be a string or an array of token ids"};
    }
    if (it->is_string()) return vocab.tokenize(it->get<std::string>(), true, false);
    if (it->empty()) throw ApiError{400, "'prompt' is an empty array: no tokens to continue"};
    if (!(*it)[0].is_number_integer()) {
        throw ApiError{400, "'prompt': one prompt per request (a string or an array of token ids), found an array of prompts"};
    }
    return ids_of(*it, vocab, "'prompt'");
}

}  // namespace

EmbeddingsRequest parse_embeddings(const std::string &body, const text::Vocab &vocab, int64_t n_embd) {
    const auto b = parse_body(body);
    EmbeddingsRequest r;
    const std::string format = field<std::string>(b, "encoding_format", "float", "a string");
    if (format != "float" && format != "base64") throw ApiError{400, fmt::format("'encoding_format' must be float or base64, found '{}'", format)};
    r.base64 = format == "base64";
    const int64_t dims = field<int64_t>(b, "dimensions", n_embd, "an integer");
    if (dims != n_embd) throw ApiError{400, fmt::format("'dimensions': this model's embeddings have {} dimensions, found {}", n_embd, dims)};
    auto it = b.find("input");
    if (it == b.end() || !(it->is_string() || it->is_array())) {
        throw ApiError{400, "'input' must be a string, an array of strings, an array of token ids or an array of such arrays"};
    }
    auto text = [&](const json &t, const std::string &where) {
        const std::string s = t.get<std::string>();
        if (s.empty()) throw ApiError{400, fmt::format("{} is an empty string: nothing to embed", where)};
        return vocab.tokenize(s, /*add_special=*/true, /*parse_special=*/true);  // as llama-server
    };
    if (it->is_string()) {
        r.inputs.push_back(text(*it, "'input'"));
        return r;
    }
    if (it->empty()) throw ApiError{400, "'input' is an empty array: nothing to embed"};
    if ((*it)[0].is_number_integer()) {  // one input as token ids
        r.inputs.push_back(ids_of(*it, vocab, "'input'"));
        return r;
    }
    constexpr size_t kMostInputs = 2048;  // OpenAI's limit
    if (it->size() > kMostInputs) throw ApiError{400, fmt::format("'input' has {} inputs, at most {}", it->size(), kMostInputs)};
    for (size_t k = 0; k < it->size(); ++k) {
        const json &e = (*it)[k];
        const std::string where = fmt::format("'input'[{}]", k);
        if (e.is_string()) {
            r.inputs.push_back(text(e, where));
        } else if (e.is_array()) {
            r.inputs.push_back(ids_of(e, vocab, where));
        } else {
            throw ApiError{400, fmt::format("{} must be a string or an array of token ids, found {}", where, e.type_name())};
        }
    }
    return r;
}

text::SamplerParams default_request_sampling() {
    text::SamplerParams p;
    p.temp = 1.0f;
    p.top_p = 1.0f;
    p.top_k = 0;
    p.min_p = 0.0f;
    return p;
}

CompletionRequest parse_completion(const std::string &body, bool chat, const text::Vocab &vocab, const text::ChatTemplate &tmpl,
                                   const text::SamplerParams &defaults) {
    const json b = parse_body(body);
    CompletionRequest out;
    Request &r = out.req;
    // DRY's breaker tokens and the stop strings' automaton are made here, on
    // the connection's thread: the engine thread serves every client (a
    // megabyte of either took it 0.4 s and more)
    r.sampling = text::with_dry_breakers(sampling_of(b, vocab.n_tokens(), defaults), vocab);
    r.limits.stop = stops_of(b);
    if (!r.limits.stop.empty()) r.limits.stop_set = std::make_shared<const text::StringSet>(r.limits.stop);
    // chat's max_completion_tokens, else max_tokens (the older name)
    const bool newer = chat && b.contains("max_completion_tokens") && !b["max_completion_tokens"].is_null();
    const char *limit_key = newer ? "max_completion_tokens" : "max_tokens";
    const int64_t max_tokens = field<int64_t>(b, limit_key, -1, "an integer");
    if (b.contains(limit_key) && !b[limit_key].is_null() && max_tokens < 1) {
        throw ApiError{400, fmt::format("'{}' must be at least 1, found {}", limit_key, max_tokens)};
    }
    r.limits.max_tokens = max_tokens;
    r.limits.ignore_eos = field<bool>(b, "ignore_eos", false, "true or false");  // llama-server's
    r.limits.grammar = grammar_of(b, vocab);
    out.stream = field<bool>(b, "stream", false, "true or false");
    // log-probabilities: chat's logprobs + top_logprobs, completions' logprobs N, llama-server's n_probs
    int n_logprobs = field<int>(b, "n_probs", -1, "an integer");
    if (chat) {
        if (field<bool>(b, "logprobs", false, "true or false")) n_logprobs = field<int>(b, "top_logprobs", 0, "an integer");
    } else {
        n_logprobs = field<int>(b, "logprobs", n_logprobs, "an integer");
    }
    if (n_logprobs > 20) throw ApiError{400, fmt::format("at most 20 top log-probabilities, found {}", n_logprobs)};
    r.n_logprobs = n_logprobs < 0 ? -1 : n_logprobs;
    // one choice per request (as llama-server): a client asking for more would otherwise get one silently
    for (const char *key : {"n", "best_of"}) {
        if (const int64_t n = field<int64_t>(b, key, 1, "an integer"); n != 1) {
            throw ApiError{400, fmt::format("'{}': one choice per request is supported, found {}", key, n)};
        }
    }
    if (chat) {
        refuse_tools(b);
        r.prompt = text::tokenize_rendered(vocab, tmpl.render(messages_of(b), true));
    } else {
        r.prompt = prompt_of(b, vocab);
    }
    return out;
}

}  // namespace toy::serve
