// json_schema_violation: a small JSON Schema validator for the tests, with the
// subset and the conventions of text/json_schema.h, so a test can check that
// what a model wrote under a schema's grammar validates:
// - additionalProperties absent means no other keys when there are
//   properties (as the converter does), any keys when there are none; a key
//   that is required but not among properties is allowed;
// - allOf (and $ref beside other keywords) merges its schemas' keywords, and
//   keywords beside anyOf/oneOf apply inside each branch, as in the converter;
// - oneOf is checked as anyOf;
// - without `type`, object / array / string / number keywords imply the type;
// - prefixItems is a tuple: every position is required unless minItems says
//   less, and further items need `items`;
// - pattern is an ECMAScript std::regex that must match the whole string;
// - format date, time, date-time, uuid are checked; other formats are not.
#pragma once

#include "text/json_schema.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <regex>
#include <string>

namespace toy::test {

namespace json_schema_detail {

using Json = nlohmann::ordered_json;

inline std::string child(const std::string &at, const std::string &key) {
    std::string out = at + "/";
    for (char c : key) out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
    return out;
}

inline std::string place(const std::string &at) { return at.empty() ? "/" : at; }

inline bool is_annotation(const std::string &k) {
    static const char *const names[] = {"title",    "description", "$schema",     "$id",       "$comment",
                                        "examples", "default",     "deprecated",  "readOnly",  "writeOnly",
                                        "$defs",    "definitions", "$anchor",     "contentEncoding", "contentMediaType"};
    return std::any_of(std::begin(names), std::end(names), [&](const char *n) { return k == n; });
}

inline const Json *resolve(const Json &root, const std::string &ref) {
    if (ref.empty() || ref[0] != '#') return nullptr;
    try {
        const Json::json_pointer p(ref.substr(1));
        if (root.contains(p)) return &root.at(p);
    } catch (const nlohmann::json::exception &) {
    }
    return nullptr;
}

// allOf / $ref-with-siblings: one schema with the keywords of all (false: unresolvable).
inline bool merge(const Json &root, Json &acc, const Json &part, int depth) {
    if (depth > 64) return false;
    if (part.is_boolean()) return part.get<bool>();
    if (!part.is_object()) return false;
    for (const auto &[k, v] : part.items()) {
        if (is_annotation(k)) continue;
        if (k == "allOf") {
            for (const auto &p : v)
                if (!merge(root, acc, p, depth + 1)) return false;
        } else if (k == "$ref") {
            const Json *target = v.is_string() ? resolve(root, v.get<std::string>()) : nullptr;
            if (!target || !merge(root, acc, *target, depth + 1)) return false;
        } else if (k == "properties") {
            Json &props = acc["properties"];
            if (props.is_null()) props = Json::object();
            for (const auto &[pk, pv] : v.items()) {
                if (!props.contains(pk) || props[pk] == pv) props[pk] = pv;
                else props[pk] = Json{{"allOf", Json::array({props[pk], pv})}};
            }
        } else if (k == "required") {
            Json &req = acc["required"];
            if (req.is_null()) req = Json::array();
            for (const auto &r : v)
                if (std::find(req.begin(), req.end(), r) == req.end()) req.push_back(r);
        } else if (acc.contains(k) && acc[k] != v) {
            return false;
        } else {
            acc[k] = v;
        }
    }
    return true;
}

inline bool has_type(const Json &v, const std::string &t) {
    if (t == "integer")
        return v.is_number_integer() ||
               (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()));
    if (t == "number") return v.is_number();
    if (t == "string") return v.is_string();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    return false;
}

inline std::string kind(const Json &v) {
    if (v.is_number_integer()) return "integer";
    if (v.is_number_float()) return "number";
    return v.type_name();
}

inline size_t length(const std::string &s) {  // code points
    return (size_t)std::count_if(s.begin(), s.end(), [](char c) { return ((unsigned char)c & 0xC0) != 0x80; });
}

inline bool format_ok(const std::string &format, const std::string &s) {
    static const std::string date = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
    static const std::string time = R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
    static const std::regex date_re(date), time_re(time), date_time_re(date + "T" + time),
        uuid_re(R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})");
    if (format == "date") return std::regex_match(s, date_re);
    if (format == "time") return std::regex_match(s, time_re);
    if (format == "date-time") return std::regex_match(s, date_time_re);
    if (format == "uuid") return std::regex_match(s, uuid_re);
    return true;
}

inline std::string check(const Json &root, const Json &s, const Json &v, const std::string &at, int depth) {
    if (depth > 256) return place(at) + ": the schema nests too deeply";
    if (s.is_boolean()) return s.get<bool>() ? "" : place(at) + ": the schema is false";
    if (!s.is_object()) return place(at) + ": the schema is not an object";

    Json rest = Json::object();  // the constraining keywords
    for (const auto &[k, x] : s.items())
        if (!is_annotation(k)) rest[k] = x;
    if (s.contains("allOf") || (s.contains("$ref") && rest.size() > 1)) {
        Json merged = Json::object();
        if (!merge(root, merged, s, 0)) return place(at) + ": allOf has conflicting or unresolvable schemas";
        return check(root, merged, v, at, depth + 1);
    }
    if (s.contains("$ref")) {
        const Json *target = s["$ref"].is_string() ? resolve(root, s["$ref"].get<std::string>()) : nullptr;
        if (!target) return place(at) + ": unresolvable $ref " + s["$ref"].dump();
        return check(root, *target, v, at, depth + 1);
    }
    if (s.contains("anyOf") || s.contains("oneOf")) {
        const Json &branches = s.contains("anyOf") ? s["anyOf"] : s["oneOf"];
        rest.erase("anyOf");
        rest.erase("oneOf");
        std::string first;
        for (const auto &b : branches) {
            const Json branch = rest.empty() ? b : Json{{"allOf", Json::array({rest, b})}};
            const std::string r = check(root, branch, v, at, depth + 1);
            if (r.empty()) return "";
            if (first.empty()) first = r;
        }
        return place(at) + ": matches no branch of anyOf/oneOf (first: " + first + ")";
    }
    if (s.contains("const")) return v == s["const"] ? "" : place(at) + ": expected " + s["const"].dump() + ", found " + v.dump();
    if (s.contains("enum")) {
        for (const auto &e : s["enum"])
            if (v == e) return "";
        return place(at) + ": " + v.dump() + " is not one of " + s["enum"].dump();
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
        if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
        else
            for (const auto &t : s["type"]) types.push_back(t.get<std::string>());
    } else if (const std::string implied = toy::text::json_schema_implied_type(s); !implied.empty()) {
        types.push_back(implied);
    }
    if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string &t) { return has_type(v, t); })) {
        std::string want;
        for (const auto &t : types) want += (want.empty() ? "" : " or ") + t;
        return place(at) + ": expected " + want + ", found " + kind(v);
    }

    if (v.is_string()) {
        const std::string str = v.get<std::string>();
        const size_t n = length(str);
        if (s.contains("minLength") && n < s["minLength"].get<size_t>())
            return place(at) + ": " + std::to_string(n) + " characters, fewer than minLength " + s["minLength"].dump();
        if (s.contains("maxLength") && n > s["maxLength"].get<size_t>())
            return place(at) + ": " + std::to_string(n) + " characters, more than maxLength " + s["maxLength"].dump();
        if (s.contains("pattern") && !std::regex_match(str, std::regex(s["pattern"].get<std::string>(), std::regex::ECMAScript)))
            return place(at) + ": " + v.dump() + " does not match pattern " + s["pattern"].dump();
        if (s.contains("format") && !format_ok(s["format"].get<std::string>(), str))
            return place(at) + ": " + v.dump() + " is not a " + s["format"].get<std::string>();
    }

    if (v.is_number()) {
        const double x = v.get<double>();
        auto num = [&](const char *k) { return s[k].get<double>(); };
        const bool old_min = s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean() && s["exclusiveMinimum"].get<bool>();
        const bool old_max = s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean() && s["exclusiveMaximum"].get<bool>();
        if (s.contains("minimum") && (old_min ? x <= num("minimum") : x < num("minimum")))
            return place(at) + ": " + v.dump() + " is below minimum " + s["minimum"].dump();
        if (s.contains("maximum") && (old_max ? x >= num("maximum") : x > num("maximum")))
            return place(at) + ": " + v.dump() + " is above maximum " + s["maximum"].dump();
        if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number() && x <= num("exclusiveMinimum"))
            return place(at) + ": " + v.dump() + " is not above exclusiveMinimum " + s["exclusiveMinimum"].dump();
        if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number() && x >= num("exclusiveMaximum"))
            return place(at) + ": " + v.dump() + " is not below exclusiveMaximum " + s["exclusiveMaximum"].dump();
    }

    if (v.is_object()) {
        const Json props = s.contains("properties") ? s["properties"] : Json::object();
        const Json required = s.contains("required") ? s["required"] : Json::array();
        for (const auto &r : required)
            if (!v.contains(r.get<std::string>())) return place(at) + ": missing required property " + r.dump();
        const char *ap_key = !s.contains("additionalProperties") && s.contains("unevaluatedProperties")
                                 ? "unevaluatedProperties"
                                 : "additionalProperties";
        const Json ap = s.contains(ap_key) ? s[ap_key] : Json(!s.contains("properties"));
        for (const auto &[k, x] : v.items()) {
            const std::string where = child(at, k);
            if (props.contains(k)) {
                const std::string r = check(root, props[k], x, where, depth + 1);
                if (!r.empty()) return r;
            } else if (ap.is_boolean() && !ap.get<bool>()) {
                if (std::find(required.begin(), required.end(), Json(k)) == required.end())
                    return place(at) + ": property \"" + k + "\" is not allowed (additionalProperties)";
            } else {
                const std::string r = check(root, ap, x, where, depth + 1);
                if (!r.empty()) return r;
            }
        }
        if (s.contains("minProperties") && v.size() < s["minProperties"].get<size_t>())
            return place(at) + ": fewer properties than minProperties " + s["minProperties"].dump();
        if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<size_t>())
            return place(at) + ": more properties than maxProperties " + s["maxProperties"].dump();
    }

    if (v.is_array()) {
        const Json *prefix = nullptr;
        Json more = Json(true);
        if (s.contains("prefixItems")) {
            prefix = &s["prefixItems"];
            more = s.contains("items") ? s["items"] : Json(false);
        } else if (s.contains("items") && s["items"].is_array()) {
            prefix = &s["items"];
            more = s.contains("additionalItems") ? s["additionalItems"] : Json(false);
        } else if (s.contains("items")) {
            more = s["items"];
        }
        if (prefix && !s.contains("minItems") && v.size() < prefix->size())
            return place(at) + ": " + std::to_string(v.size()) + " items, fewer than the " +
                   std::to_string(prefix->size()) + " of prefixItems";
        for (size_t i = 0; i < v.size(); ++i) {
            const std::string where = at + "/" + std::to_string(i);
            const Json &sub = prefix && i < prefix->size() ? (*prefix)[i] : more;
            if (sub.is_boolean() && !sub.get<bool>())
                return place(at) + ": item " + std::to_string(i) + " is not allowed (no more items)";
            const std::string r = check(root, sub, v[i], where, depth + 1);
            if (!r.empty()) return r;
        }
        if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>())
            return place(at) + ": " + std::to_string(v.size()) + " items, fewer than minItems " + s["minItems"].dump();
        if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>())
            return place(at) + ": " + std::to_string(v.size()) + " items, more than maxItems " + s["maxItems"].dump();
    }
    return "";
}

}  // namespace json_schema_detail

// "" when `instance` validates against `schema`, else where and how the first
// violation is ("/age: 151 is above maximum 150").
inline std::string json_schema_violation(const nlohmann::ordered_json &schema, const nlohmann::ordered_json &instance) {
    return json_schema_detail::check(schema, schema, instance, "", 0);
}

}  // namespace toy::test
