// A JSON file of a checkpoint (config.json, tokenizer.json, ...), parsed, or
// a toy::Error naming the file.
#pragma once

#include "core/error.h"
#include "core/json.h"
#include "core/read_file.h"

#include <nlohmann/json.hpp>

#include <string>

namespace toy::convert {

inline nlohmann::json read_json_file(const std::string &path) {
    const std::string text = read_whole_file(path, "convert");
    try {
        return parse_json(text, path);
    } catch (const nlohmann::json::exception &e) {
        fail("{}: not valid JSON ({})", path, e.what());
    }
}

// j[key], or null when j is not an object or has no such key. (nlohmann's
// const operator[] is undefined behaviour for a missing key: the converter's
// JSON files are untrusted, so every optional member is read through this.)
inline const nlohmann::json &member(const nlohmann::json &j, const char *key) {
    static const nlohmann::json null;
    if (!j.is_object()) return null;
    auto it = j.find(key);
    return it == j.end() ? null : *it;
}

// Runs f, turning the exception nlohmann's accessors throw for a value of an
// unexpected type or a missing key into a toy::Error naming `what`: the
// checkpoint's JSON files are untrusted input.
template <class F>
decltype(auto) with_json_errors(const std::string &what, F &&f) {
    try {
        return f();
    } catch (const nlohmann::json::exception &e) {
        fail("{}: unexpected JSON: {}", what, e.what());
    }
}

}  // namespace toy::convert
