// JSON from untrusted input: request bodies, training data, checkpoint and
// converter files, schemas. nlohmann's parser keeps its own stack, but
// printing, copying, comparing and hashing a value recurse once per level:
// 200000 nested '[' in a request's logit_bias parsed fine and then ended
// `toy serve` with SIGSEGV where the error message quoted the value (a
// training-data line the same). parse_json refuses values nested deeper than
// kMaxJsonDepth as it reads them; no real request, schema or file comes near.
#pragma once

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <string_view>

namespace toy {

inline constexpr int kMaxJsonDepth = 512;

// Throws nlohmann's parse errors for text that is not JSON, and a toy::Error
// naming `what` for JSON nested too deep.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, std::string_view what) {
    return Json::parse(text.begin(), text.end(), [what](int depth, nlohmann::json::parse_event_t, Json &) {
        if (depth > kMaxJsonDepth) fail("{}: JSON nested deeper than {} levels", what, kMaxJsonDepth);
        return true;
    });
}

}  // namespace toy
