// Parsing the server's requests (serve/api.cpp answers them): kept apart so
// the parser can be tested and fuzzed without a socket.
#pragma once

#include "serve/scheduler.h"
#include "text/chat_template.h"
#include "text/vocab.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace toy::serve {

// An error the client caused (or the server's state): status and OpenAI's error type.
struct ApiError {
    int status;
    std::string message;
    std::string type = "invalid_request_error";
};

// The body as a JSON object (else a 400), keys in document order (a JSON
// schema's properties are written in the order it gives them).
nlohmann::ordered_json parse_body(const std::string &body);

// body[key] if present, as T, else `fallback`; a value of another type is an error naming the key
template <typename T>
T field(const nlohmann::ordered_json &body, const char *key, T fallback, const char *expected) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return fallback;
    const bool ok = std::is_same_v<T, bool>          ? it->is_boolean()
                    : std::is_same_v<T, std::string> ? it->is_string()
                    : std::is_integral_v<T>          ? it->is_number_integer()
                                                     : it->is_number();
    if (!ok) throw ApiError{400, fmt::format("'{}' must be {}, found {}", key, expected, it->type_name())};
    if constexpr (std::is_floating_point_v<T>) {
        // 1e999 parses as infinity, 1e300 becomes one as a float
        const double v = it->get<double>();
        if (!std::isfinite(v) || std::abs(v) > (double)std::numeric_limits<T>::max()) {
            throw ApiError{400, fmt::format("'{}' must be a finite number within a float's range, found {}", key, it->dump())};
        }
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        // an integer past T's range would wrap around
        using limits = std::numeric_limits<T>;
        const bool fits = it->is_number_unsigned()
                              ? it->get<uint64_t>() <= (uint64_t)limits::max()
                              : it->get<int64_t>() >= (int64_t)limits::min() && it->get<int64_t>() <= (int64_t)limits::max();
        if (!fits) throw ApiError{400, fmt::format("'{}' is out of range: {}", key, it->dump())};
    }
    return it->get<T>();
}

struct CompletionRequest {
    Request req;
    bool stream = false;
};

// The sampling of a request that sets nothing: OpenAI's defaults where
// OpenAI has the field (temperature 1; no top-k, top-p or min-p),
// llama.cpp's for the rest. `toy serve`'s sampling flags start from these.
text::SamplerParams default_request_sampling();

// A completion (chat: the messages through the chat template) request's body;
// each sampling field it gives replaces the one in `defaults`. Throws
// ApiError for what the client got wrong.
CompletionRequest parse_completion(const std::string &body, bool chat, const text::Vocab &vocab, const text::ChatTemplate &tmpl,
                                   const text::SamplerParams &defaults = default_request_sampling());

struct EmbeddingsRequest {
    std::vector<std::vector<int32_t>> inputs;  // each text's tokens (BOS and EOS as the model asks), or ids as given
    bool base64 = false;                       // encoding_format "base64": float32 little-endian bytes
};

// OpenAI's embeddings body: "input" a string, an array of strings, an array
// of token ids or an array of such arrays (at most 2048 inputs), with
// "encoding_format" float or base64, and "dimensions" only as the model's
// n_embd. Throws ApiError for what the client got wrong.
EmbeddingsRequest parse_embeddings(const std::string &body, const text::Vocab &vocab, int64_t n_embd);

}  // namespace toy::serve
