// JSON Schema -> GBNF: the grammar behind `-j/--json-schema` and the server's
// response_format, so a model can only write JSON that validates.
//
// The subset: type (one or a list), enum, const, anyOf, oneOf (as anyOf),
// allOf (keywords merged; properties and required united), local $ref
// (#, #/$defs/..., #/definitions/..., any local pointer; recursion allowed),
// properties in schema order with any subset of the optional ones, required,
// additionalProperties (false, or absent beside properties: no other keys, as
// llama.cpp does; true or a schema: other keys after the declared ones, whose
// names are not checked against the declared ones),
// items, prefixItems (a tuple: every position required unless minItems says
// less), minItems, maxItems, minLength, maxLength, pattern (an ECMAScript
// subset, whole match), format date / time / date-time / uuid, integer
// minimum / maximum / exclusiveMinimum / exclusiveMaximum as exact digit
// ranges. Numbers are bounded (16 digits before and after the point, 2 in the
// exponent) so generation cannot run away; bounds on non-integer numbers are
// not enforced (a warning). Between tokens the grammar allows at most one
// newline and 20 spaces or tabs.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace toy::text {

// JSON Schema -> GBNF text whose root rule accepts exactly the JSON texts that
// validate against the schema (within the subset above; strings only in their
// shortest escaping). Throws toy::Error naming the keyword and its JSON pointer
// (e.g. "json schema: unsupported keyword 'not' at /properties/a") for
// constraints it cannot honour. Annotations (title, description, $schema, $id,
// $comment, examples, default, deprecated, readOnly, writeOnly) are ignored.
// Unknown string formats are accepted as plain strings, unknown keywords and
// unenforced number bounds are ignored; each is reported in `warnings` when
// it is not null.
std::string json_schema_to_gbnf(const nlohmann::ordered_json &schema, std::vector<std::string> *warnings = nullptr);

// The type a schema without "type" implies by its keywords (properties ->
// object, items -> array, minLength / pattern / format -> string, minimum ->
// number), "" when none does. The converter and the tests' validator share it.
std::string json_schema_implied_type(const nlohmann::ordered_json &schema);

// The grammar for any JSON object (response_format {"type":"json_object"} with
// no schema); its values may be any JSON value.
std::string json_object_gbnf();

}  // namespace toy::text
