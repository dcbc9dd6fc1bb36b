// Numeric flag values, read as written (cli.h: check_numeric_flags).
#include "apps/cli.h"

#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace toy::cli {
namespace {

// The text of a numeric flag's value, checked before CLI11 converts it.
// CLI11 2.1 takes an empty value for 0 (--temp '' sampled greedily, -t ''
// used every thread), wraps a negative value of an unsigned flag (--seed -2
// became 2^64 - 2), saturates a number past 64 bits, reads 010 as octal, and
// a float past its range as infinity. So a whole number is decimal digits (a
// sign first where negatives make sense) within 64 bits, and any other number
// is finite and within float's range; CLI11 then checks the narrower types.
// A whole number is rewritten without its leading zeros and sign.
std::string check_number(const std::string &kind, std::string &text) {
    if (text.empty()) return "expected a number, found an empty value";
    const char *b = text.data(), *e = b + text.size();
    if (*b == '+') ++b;
    if (kind == "INT" || kind == "UINT") {
        if (kind == "UINT" && *b == '-') return "expected a whole number >= 0, found '" + text + "'";
        int64_t i = 0;
        uint64_t u = 0;
        const auto r = *b == '-' ? std::from_chars(b, e, i) : std::from_chars(b, e, u);
        if (r.ec == std::errc::result_out_of_range || (*b != '-' && kind == "INT" && u > (uint64_t)INT64_MAX)) {
            return "'" + text + "' is out of range";
        }
        if (r.ec != std::errc() || r.ptr != e) return "expected a whole number, found '" + text + "'";
        text = *b == '-' ? std::to_string(i) : std::to_string(u);  // what CLI11 reads as decimal
        return "";
    }
    char *end = nullptr;
    const double v = std::strtod(b, &end);
    if (end != e) return "expected a number, found '" + text + "'";
    if (!std::isfinite(v) || std::fabs(v) > FLT_MAX) return "expected a finite number, found '" + text + "'";
    return "";
}

}  // namespace

void check_numeric_flags(CLI::App &app) {
    for (CLI::Option *opt : app.get_options()) {
        // "FLOAT", "INT:..." or, for a flag of several values such as
        // --lora-scaled FILE SCALE, "[TEXT,FLOAT]": each value's kind
        const std::string type = opt->get_type_name();
        const bool several = type.size() > 2 && type.front() == '[';
        const std::vector<std::string> kinds =
            several ? CLI::detail::split(type.substr(1, type.find(']') - 1), ',')
                    : std::vector<std::string>{type.substr(0, type.find_first_of(": "))};
        for (size_t i = 0; i < kinds.size(); ++i) {
            const std::string kind = kinds[i];
            if (kind != "INT" && kind != "UINT" && kind != "FLOAT") continue;
            // (a transform: it may rewrite the text, and runs before the flag's own)
            CLI::Validator check([kind](std::string &v) { return check_number(kind, v); }, "");
            if (several) check.application_index((int)i);  // the i-th value of each group
            opt->transform(check);
        }
    }
    for (CLI::App *sub : app.get_subcommands({})) check_numeric_flags(*sub);
}

}  // namespace toy::cli
