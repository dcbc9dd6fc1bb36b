// llama.cpp's tokenizer test vectors next to a vocabulary GGUF (X.gguf.inp,
// X.gguf.out), read for the tokenizer and converter tests.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace toy::test {

struct Case {
    std::string text;
    std::vector<int32_t> ids;
};

// .inp: cases separated by "\n__ggml_vocab_test__\n"; .out: one line of
// space-separated ids per case (the format llama.cpp's test-tokenizer-0 reads).
inline std::vector<Case> read_cases(const std::string &gguf_path) {
    const std::string inp = [&] {
        std::ifstream f(gguf_path + ".inp", std::ios::binary);
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str();
    }();
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t pos = 0;
    while (pos < inp.size()) {
        const size_t next = inp.find(sep, pos);
        if (next == std::string::npos) {
            texts.push_back(inp.substr(pos));
            break;
        }
        texts.push_back(inp.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::ifstream out(gguf_path + ".out");
    std::vector<Case> cases;
    std::string line;
    size_t k = 0;
    while (std::getline(out, line)) {
        Case c;
        if (k < texts.size()) c.text = texts[k];
        std::istringstream ls(line);
        int64_t id;
        while (ls >> id) c.ids.push_back((int32_t)id);
        cases.push_back(std::move(c));
        ++k;
    }
    EXPECT_EQ(texts.size(), cases.size()) << gguf_path << ": .inp and .out disagree on the number of cases";
    return cases;
}

}  // namespace toy::test
