// A JSON file of a checkpoint (config.json, tokenizer.json, ...), parsed, or
// a toy::Error naming the file.
#pragma once

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace toy::convert {

inline nlohmann::json read_json_file(const std::string &path) {
    std::ifstream in(path);
    if (!in) fail("{}: cannot open", path);
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception &e) {
        fail("{}: not valid JSON ({})", path, e.what());
    }
}

}  // namespace toy::convert
