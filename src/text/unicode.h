// UTF-8 helpers and the GPT-2 byte <-> printable-character mapping used by
// byte-level BPE vocabularies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace toy::text {

// Length of the UTF-8 sequence announced by a lead byte: 1 for ASCII and for
// stray continuation bytes (0x80-0xBF), else 2, 3 or 4 from the high bits.
// Tokenizers cut text into characters with this, so it never fails.
size_t utf8_lead_len(uint8_t lead);

// Appends the UTF-8 encoding of a code point (must be <= 0x10FFFF).
void append_utf8(std::string &out, uint32_t cpt);
std::string cpt_to_utf8(uint32_t cpt);

// Decodes one code point at `pos` and advances `pos`. A malformed sequence
// (bad lead, truncated, overlong, surrogate, > 0x10FFFF) consumes one byte
// and yields U+FFFD.
uint32_t decode_utf8(std::string_view s, size_t &pos);

// The text with every malformed byte replaced by U+FFFD: a valid UTF-8
// subject for the regex engine.
std::string sanitize_utf8(std::string_view s);

// Number of bytes at the end of `s` that form the beginning of a UTF-8
// sequence still waiting for continuation bytes (0 when `s` ends on a
// character boundary, or when the tail can never become valid).
size_t utf8_incomplete_tail(std::string_view s);

// GPT-2 byte-level encoding: every byte maps to one printable code point
// (printable Latin-1 bytes map to themselves, the rest to U+0100 upward).
const std::string &byte_to_unicode(uint8_t byte);
// Inverse of byte_to_unicode for one code point; -1 when it is not one of
// the 256 images.
int unicode_to_byte(uint32_t cpt);
// Byte-encodes a whole string.
std::string bytes_to_unicode(std::string_view bytes);

}  // namespace toy::text
