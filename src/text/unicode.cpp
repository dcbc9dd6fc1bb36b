#include "text/unicode.h"

#include <array>

namespace toy::text {

size_t utf8_lead_len(uint8_t lead) {
    if (lead < 0xC0) return 1;
    if (lead < 0xE0) return 2;
    if (lead < 0xF0) return 3;
    return 4;
}

void append_utf8(std::string &out, uint32_t c) {
    if (c < 0x80) {
        out.push_back((char)c);
    } else if (c < 0x800) {
        out.push_back((char)(0xC0 | (c >> 6)));
        out.push_back((char)(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back((char)(0xE0 | (c >> 12)));
        out.push_back((char)(0x80 | ((c >> 6) & 0x3F)));
        out.push_back((char)(0x80 | (c & 0x3F)));
    } else {
        out.push_back((char)(0xF0 | (c >> 18)));
        out.push_back((char)(0x80 | ((c >> 12) & 0x3F)));
        out.push_back((char)(0x80 | ((c >> 6) & 0x3F)));
        out.push_back((char)(0x80 | (c & 0x3F)));
    }
}

std::string cpt_to_utf8(uint32_t cpt) {
    std::string s;
    append_utf8(s, cpt);
    return s;
}

uint32_t decode_utf8(std::string_view s, size_t &pos) {
    const auto byte = [&](size_t k) { return (uint8_t)s[pos + k]; };
    const uint8_t b0 = byte(0);
    if (b0 < 0x80) {
        pos += 1;
        return b0;
    }
    size_t n = 0;
    uint32_t cpt = 0, min = 0;
    if (b0 >= 0xC2 && b0 < 0xE0) { n = 2; cpt = b0 & 0x1F; min = 0x80; }
    else if (b0 >= 0xE0 && b0 < 0xF0) { n = 3; cpt = b0 & 0x0F; min = 0x800; }
    else if (b0 >= 0xF0 && b0 < 0xF5) { n = 4; cpt = b0 & 0x07; min = 0x10000; }
    if (n == 0 || pos + n > s.size()) {
        pos += 1;
        return 0xFFFD;
    }
    for (size_t k = 1; k < n; ++k) {
        if ((byte(k) & 0xC0) != 0x80) {
            pos += 1;
            return 0xFFFD;
        }
        cpt = (cpt << 6) | (byte(k) & 0x3F);
    }
    if (cpt < min || cpt > 0x10FFFF || (cpt >= 0xD800 && cpt <= 0xDFFF)) {
        pos += 1;
        return 0xFFFD;
    }
    pos += n;
    return cpt;
}

std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t start = pos;
        const uint32_t c = decode_utf8(s, pos);
        if (c == 0xFFFD && !(pos - start == 3 && s.substr(start, 3) == "\xEF\xBF\xBD")) {
            out += "\xEF\xBF\xBD";
        } else {
            out.append(s.substr(start, pos - start));
        }
    }
    return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
    // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
    for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
        const uint8_t b = (uint8_t)s[s.size() - back];
        if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking
        if (b < 0xC2 || b > 0xF4) return 0;  // ASCII or a byte that never starts a sequence
        const size_t need = utf8_lead_len(b);
        if (need <= back) return 0;  // complete (or over-long: nothing to wait for)
        // The bytes seen so far must be able to continue a valid sequence.
        if (back >= 2) {
            const uint8_t b1 = (uint8_t)s[s.size() - back + 1];
            if ((b == 0xE0 && b1 < 0xA0) || (b == 0xED && b1 > 0x9F) ||
                (b == 0xF0 && b1 < 0x90) || (b == 0xF4 && b1 > 0x8F)) {
                return 0;
            }
        }
        return back;
    }
    return 0;
}

namespace {

struct ByteMap {
    std::array<std::string, 256> to_unicode;
    std::array<int16_t, 512> from_cpt;  // every image lies below U+0200

    ByteMap() {
        from_cpt.fill(-1);
        uint32_t next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            const uint32_t cpt = printable ? (uint32_t)b : next++;
            to_unicode[b] = cpt_to_utf8(cpt);
            from_cpt[cpt] = (int16_t)b;
        }
    }
};

const ByteMap &byte_map() {
    static const ByteMap map;
    return map;
}

}  // namespace

const std::string &byte_to_unicode(uint8_t byte) { return byte_map().to_unicode[byte]; }

int unicode_to_byte(uint32_t cpt) { return cpt < 512 ? byte_map().from_cpt[cpt] : -1; }

std::string bytes_to_unicode(std::string_view bytes) {
    const ByteMap &m = byte_map();
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) out += m.to_unicode[(uint8_t)c];
    return out;
}

}  // namespace toy::text
