// GGUF reading: mmap + a bounds-checked cursor. Every count read from the file
// is checked against the bytes that remain before anything is allocated, so a
// hostile header cannot make us allocate more than a small multiple of the
// file's size.
#include "gguf/gguf_reader.h"

#include "core/escape.h"
#include "core/memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

namespace toy::gguf {

namespace {

constexpr uint32_t kMaxValueType = 12;
constexpr uint64_t kDefaultAlignment = 32;

bool valid_value_type(uint32_t t) { return t <= kMaxValueType; }

std::string value_type_desc(const Value &v) {
    if (v.type == ValueType::ARRAY) return fmt::format("array of {}", type_name(v.elem_type));
    return type_name(v.type);
}

bool is_integer_type(ValueType t) {
    switch (t) {
        case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
        case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
            return true;
        default:
            return false;
    }
}

bool is_signed_type(ValueType t) {
    return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 || t == ValueType::INT64;
}

bool is_float_type(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

bool is_numeric_type(ValueType t) { return is_integer_type(t) || is_float_type(t) || t == ValueType::BOOL; }

// Reads one little-endian scalar of type t from p into v's scalar fields.
void decode_scalar(ValueType t, const uint8_t *p, Value &v) {
    switch (t) {
        case ValueType::UINT8: v.u = p[0]; break;
        case ValueType::BOOL: v.u = p[0] != 0; break;
        case ValueType::INT8: { int8_t x; std::memcpy(&x, p, 1); v.i = x; break; }
        case ValueType::UINT16: { uint16_t x; std::memcpy(&x, p, 2); v.u = x; break; }
        case ValueType::INT16: { int16_t x; std::memcpy(&x, p, 2); v.i = x; break; }
        case ValueType::UINT32: { uint32_t x; std::memcpy(&x, p, 4); v.u = x; break; }
        case ValueType::INT32: { int32_t x; std::memcpy(&x, p, 4); v.i = x; break; }
        case ValueType::UINT64: { uint64_t x; std::memcpy(&x, p, 8); v.u = x; break; }
        case ValueType::INT64: { int64_t x; std::memcpy(&x, p, 8); v.i = x; break; }
        case ValueType::FLOAT32: { float x; std::memcpy(&x, p, 4); v.f = x; break; }
        case ValueType::FLOAT64: { double x; std::memcpy(&x, p, 8); v.f = x; break; }
        default: break;
    }
}

double scalar_as_double(const Value &v) {
    if (is_float_type(v.type)) return v.f;
    if (is_signed_type(v.type)) return (double)v.i;
    return (double)v.u;
}


bool checked_mul(uint64_t a, uint64_t b, uint64_t &out) { return !__builtin_mul_overflow(a, b, &out); }

// A bounds-checked reader over the mapping. `what` describes the thing being
// read for truncation errors.
class Cursor {
public:
    Cursor(const std::string &path, const uint8_t *base, uint64_t size) : path_(path), base_(base), size_(size) {}

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    const uint8_t *take(uint64_t n, std::string_view what) {
        if (n > remaining()) {
            fail("{}: file is truncated: {} needs {} bytes at byte {}, but the file has {} bytes", path_, what, n,
                 pos_, size_);
        }
        const uint8_t *p = base_ + pos_;
        pos_ += n;
        return p;
    }
    template <class T>
    T read(std::string_view what) {
        T v;
        std::memcpy(&v, take(sizeof(T), what), sizeof(T));
        return v;
    }
    std::string read_string(std::string_view what) {
        uint64_t len = read<uint64_t>(what);
        if (len > remaining()) {
            fail("{}: {} has length {} bytes, but only {} bytes remain in the file (at byte {})", path_, what, len,
                 remaining(), pos_);
        }
        const uint8_t *p = take(len, what);
        return std::string(reinterpret_cast<const char *>(p), len);
    }

private:
    const std::string &path_;
    const uint8_t *base_;
    uint64_t size_;
    uint64_t pos_ = 0;
};

Value read_value(Cursor &c, const std::string &path, const std::string &key, uint32_t type_id) {
    if (!valid_value_type(type_id)) {
        fail("{}: key '{}': value type id {} is not a GGUF type (expected 0..{})", path, key, type_id, kMaxValueType);
    }
    Value v;
    v.type = (ValueType)type_id;
    std::string what = fmt::format("the value of key '{}'", key);
    if (v.type == ValueType::STRING) {
        v.s = c.read_string(what);
        return v;
    }
    if (v.type != ValueType::ARRAY) {
        decode_scalar(v.type, c.take(scalar_size(v.type), what), v);
        return v;
    }
    uint32_t elem = c.read<uint32_t>(what);
    if (elem == (uint32_t)ValueType::ARRAY) {
        fail("{}: key '{}': nested arrays are not supported (found an array of arrays)", path, key);
    }
    if (!valid_value_type(elem)) {
        fail("{}: key '{}': array element type id {} is not a GGUF type (expected 0..{})", path, key, elem,
             kMaxValueType);
    }
    v.elem_type = (ValueType)elem;
    v.n = c.read<uint64_t>(what);
    if (v.elem_type == ValueType::STRING) {
        // Each string takes at least its 8-byte length.
        if (v.n > c.remaining() / 8) {
            fail("{}: key '{}': array claims {} strings, but only {} bytes remain in the file", path, key, v.n,
                 c.remaining());
        }
        v.strings.reserve(v.n);
        for (uint64_t k = 0; k < v.n; ++k) {
            v.strings.push_back(c.read_string(fmt::format("string {} of key '{}'", k, key)));
        }
        return v;
    }
    size_t es = scalar_size(v.elem_type);
    if (v.n > c.remaining() / es) {
        fail("{}: key '{}': array claims {} elements of {} ({} bytes each), but only {} bytes remain in the file",
             path, key, v.n, type_name(v.elem_type), es, c.remaining());
    }
    const uint8_t *p = c.take(v.n * es, what);
    v.raw.assign(p, p + v.n * es);
    if (v.elem_type == ValueType::BOOL) {
        for (auto &b : v.raw) b = b != 0;
    }
    return v;
}

bool valid_tensor_type(uint32_t t) {
    if (t >= GGML_TYPE_COUNT) return false;
    return ggml_blck_size((ggml_type)t) > 0 && ggml_type_size((ggml_type)t) > 0;
}

// The alignment a tensor's values (or blocks) need to be read where they lie:
// the largest power of two, at most 8, that divides a value's (or block's)
// bytes. Every member of a block is aligned to a power of two that divides
// the block's size, so this is enough for all of them (F16 and blocks with
// an F16 scale: 2; F32 and Q8_K: 4; F64: 8), and any general.alignment of 8
// or more meets it.
uint64_t value_alignment(ggml_type type) {
    const uint64_t size = ggml_type_size(type);
    return std::min<uint64_t>(size & (~size + 1), 8);
}

}  // namespace

// ---------------------------------------------------------------- ValueType

const char *type_name(ValueType t) {
    switch (t) {
        case ValueType::UINT8: return "uint8";
        case ValueType::INT8: return "int8";
        case ValueType::UINT16: return "uint16";
        case ValueType::INT16: return "int16";
        case ValueType::UINT32: return "uint32";
        case ValueType::INT32: return "int32";
        case ValueType::FLOAT32: return "float32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::UINT64: return "uint64";
        case ValueType::INT64: return "int64";
        case ValueType::FLOAT64: return "float64";
    }
    return "unknown";
}

size_t scalar_size(ValueType t) {
    switch (t) {
        case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
        case ValueType::UINT16: case ValueType::INT16: return 2;
        case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
        case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
        case ValueType::STRING: case ValueType::ARRAY: return 0;
    }
    return 0;
}

// -------------------------------------------------------------------- Value

Value Value::u32(uint32_t v) {
    Value x;
    x.type = ValueType::UINT32;
    x.u = v;
    return x;
}
Value Value::i32(int32_t v) {
    Value x;
    x.type = ValueType::INT32;
    x.i = v;
    return x;
}
Value Value::u64(uint64_t v) {
    Value x;
    x.type = ValueType::UINT64;
    x.u = v;
    return x;
}
Value Value::f32(float v) {
    Value x;
    x.type = ValueType::FLOAT32;
    x.f = v;
    return x;
}
Value Value::boolean(bool v) {
    Value x;
    x.type = ValueType::BOOL;
    x.u = v ? 1 : 0;
    return x;
}
Value Value::str(std::string v) {
    Value x;
    x.type = ValueType::STRING;
    x.s = std::move(v);
    return x;
}
Value Value::str_array(std::vector<std::string> v) {
    Value x;
    x.type = ValueType::ARRAY;
    x.elem_type = ValueType::STRING;
    x.n = v.size();
    x.strings = std::move(v);
    return x;
}

namespace {
template <class T>
Value numeric_array(ValueType elem, const std::vector<T> &v) {
    Value x;
    x.type = ValueType::ARRAY;
    x.elem_type = elem;
    x.n = v.size();
    x.raw.resize(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(x.raw.data(), v.data(), x.raw.size());
    return x;
}
}  // namespace

Value Value::f32_array(const std::vector<float> &v) { return numeric_array(ValueType::FLOAT32, v); }
Value Value::i32_array(const std::vector<int32_t> &v) { return numeric_array(ValueType::INT32, v); }
Value Value::u32_array(const std::vector<uint32_t> &v) { return numeric_array(ValueType::UINT32, v); }

bool Value::is_integer() const { return is_integer_type(type); }
bool Value::is_float() const { return is_float_type(type); }

double Value::number_at(uint64_t k) const {
    if (type != ValueType::ARRAY || !is_numeric_type(elem_type)) {
        fail("number_at: expected a numeric array, found {}", value_type_desc(*this));
    }
    if (k >= n) fail("number_at: index {} is out of range (array has {} elements)", k, n);
    Value e;
    e.type = elem_type;
    decode_scalar(elem_type, raw.data() + k * scalar_size(elem_type), e);
    return scalar_as_double(e);
}

std::string Value::to_string(size_t max_elems) const {
    switch (type) {
        case ValueType::STRING: return quote_escaped(s);
        case ValueType::BOOL: return u ? "true" : "false";
        case ValueType::FLOAT32: return fmt::format("{}", (float)f);  // shortest form that reads back as this float
        case ValueType::FLOAT64: return fmt::format("{}", f);
        case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
            return std::to_string(i);
        case ValueType::ARRAY: break;
        default: return std::to_string(u);
    }
    std::string out = "[";
    uint64_t shown = std::min<uint64_t>(n, max_elems);
    for (uint64_t k = 0; k < shown; ++k) {
        if (k) out += ", ";
        if (elem_type == ValueType::STRING) {
            out += quote_escaped(strings[k]);
        } else {
            Value e;
            e.type = elem_type;
            decode_scalar(elem_type, raw.data() + k * scalar_size(elem_type), e);
            out += e.to_string();
        }
    }
    if (shown < n) out += fmt::format("{}... ({} {} total)", shown ? ", " : "", n, type_name(elem_type));
    out += "]";
    return out;
}

bool Value::operator==(const Value &o) const {
    if (type != o.type) return false;
    switch (type) {
        case ValueType::STRING: return s == o.s;
        case ValueType::FLOAT32: case ValueType::FLOAT64:
            return std::memcmp(&f, &o.f, sizeof f) == 0 || f == o.f;
        case ValueType::INT8: case ValueType::INT16: case ValueType::INT32: case ValueType::INT64:
            return i == o.i;
        case ValueType::ARRAY:
            return elem_type == o.elem_type && n == o.n && strings == o.strings && raw == o.raw;
        default: return u == o.u;
    }
}

// --------------------------------------------------------------- TensorInfo

std::vector<float> to_f32(const void *src, ggml_type type, int64_t n) {
    std::vector<float> out(n);
    if (type == GGML_TYPE_F32) {
        std::memcpy(out.data(), src, n * sizeof(float));
    } else {
        const auto *traits = ggml_get_type_traits(type);
        if (!traits->to_float) fail("cannot convert {} to float", ggml_type_name(type));
        traits->to_float(src, out.data(), n);
    }
    return out;
}

std::string TensorInfo::shape_string() const {
    std::string out = "[";
    for (int d = 0; d < n_dims; ++d) {
        if (d) out += ", ";
        out += std::to_string(ne[d]);
    }
    return out + "]";
}

uint64_t tensor_nbytes(ggml_type type, const std::array<int64_t, 4> &ne, const std::string &what) {
    if (!valid_tensor_type((uint32_t)type)) {
        fail("{}: type id {} is not a ggml tensor type", what, (int)type);
    }
    for (int d = 0; d < 4; ++d) {
        if (ne[d] < 0) fail("{}: dimension {} is {}, expected a non-negative size", what, d, ne[d]);
    }
    int64_t blck = ggml_blck_size(type);
    if (ne[0] % blck != 0) {
        fail("{}: type {} stores blocks of {} elements, but ne[0] = {} is not a multiple of {}", what,
             ggml_type_name(type), blck, ne[0], blck);
    }
    uint64_t n_el = 1;
    for (int d = 0; d < 4; ++d) {
        if (!checked_mul(n_el, (uint64_t)ne[d], n_el) || n_el > (uint64_t)std::numeric_limits<int64_t>::max()) {
            fail("{}: element count of shape [{}, {}, {}, {}] overflows 64 bits", what, ne[0], ne[1], ne[2], ne[3]);
        }
    }
    uint64_t bytes = (uint64_t)(ne[0] / blck);
    if (!checked_mul(bytes, ggml_type_size(type), bytes) || !checked_mul(bytes, (uint64_t)ne[1], bytes) ||
        !checked_mul(bytes, (uint64_t)ne[2], bytes) || !checked_mul(bytes, (uint64_t)ne[3], bytes)) {
        fail("{}: byte size of shape [{}, {}, {}, {}] as {} overflows 64 bits", what, ne[0], ne[1], ne[2], ne[3],
             ggml_type_name(type));
    }
    return bytes;
}

// --------------------------------------------------------------------- File

std::unique_ptr<File> File::open(const std::string &path) {
    std::unique_ptr<File> f(new File());
    f->path_ = path;
    f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f->fd_ < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (fstat(f->fd_, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
    f->size_ = (uint64_t)st.st_size;
    if (f->size_ < 24) {
        fail("{}: not a GGUF file: it has {} bytes, a GGUF header needs at least 24", path, f->size_);
    }
    void *p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, f->fd_, 0);
    if (p == MAP_FAILED) fail("{}: cannot map {} bytes: {}", path, f->size_, std::strerror(errno));
    f->base_ = static_cast<const uint8_t *>(p);
    f->parse();
    return f;
}

std::unique_ptr<File> File::open_model(const std::string &path) {
    std::unique_ptr<File> f = open(path);
    f->open_parts();
    return f;
}

void File::open_parts() {
    // (split.count and split.no are u16 in llama.cpp, split.tensors.count i32)
    const std::optional<int64_t> count = opt_int(kSplitCount);
    if (!count || *count == 1) return;
    if (*count < 1 || *count > 65535) fail("{}: key 'split.count': expected 1 to 65535 files, found {}", path_, *count);
    const int64_t no = get_int(kSplitNo);
    // llama.cpp's gguf-split names, numbered from 1: PREFIX-00002-of-00003.gguf
    auto name_of = [&](const std::string &prefix, int64_t i) { return fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, i + 1, *count); };
    const std::string ending = name_of("", no);
    const bool named = path_.size() > ending.size() && path_.ends_with(ending);
    const std::string prefix = named ? path_.substr(0, path_.size() - ending.size()) : "";
    if (no != 0) {
        if (no < 0 || no >= *count) fail("{}: key 'split.no': expected 0 to {} (file 1 to {} of a split model), found {}", path_, *count - 1, *count, no);
        fail("{}: file {} of a split model of {} files: open its first file{}", path_, no + 1, *count,
             named ? ", " + name_of(prefix, 0) : " (split.no 0)");
    }
    if (!named) {
        fail("{}: the first of a split model's {} files: expected a name ending in '{}' (as llama.cpp's gguf-split writes them), "
             "by which the others are found", path_, *count, ending);
    }
    for (int64_t i = 1; i < *count; ++i) {
        const std::string name = name_of(prefix, i);
        std::unique_ptr<File> part;
        try {
            part = open(name);
        } catch (const Error &e) {
            fail("{}: file {} of this split model: {}", path_, i + 1, e.what());
        }
        const std::optional<int64_t> part_no = part->opt_int(kSplitNo), part_count = part->opt_int(kSplitCount);
        if (part_no != i || part_count != count) {
            auto shown = [](const std::optional<int64_t> &v) { return v ? std::to_string(*v) : std::string("missing"); };
            fail("{}: expected file {} of {} of the split model {} (split.no {}, split.count {}), found split.no {}, split.count {}",
                 name, i + 1, *count, path_, i, *count, shown(part_no), shown(part_count));
        }
        for (TensorInfo t : part->tensors()) {
            if (const TensorInfo *seen = find_tensor(t.name)) {
                fail("{}: tensor '{}' is in two files of the split model: {} and {}", path_, t.name, file(seen->file).path(), name);
            }
            t.file = (uint32_t)i;
            tensor_index_.emplace(t.name, tensors_.size());
            tensors_.push_back(std::move(t));
        }
        parts_.push_back(std::move(part));
    }
    if (const std::optional<int64_t> n = opt_int(kSplitTensorsCount); n && *n != (int64_t)tensors_.size()) {
        fail("{}: key 'split.tensors.count': the split model has {} tensors, its {} files hold {}", path_, *n, *count, tensors_.size());
    }
}

size_t File::file_holding(const void *p) const {
    const auto *at = static_cast<const uint8_t *>(p);
    for (size_t i = 0; i < n_files(); ++i) {
        const File &f = file(i);
        if (at >= f.base_ && at < f.base_ + f.size_) return i;
    }
    fail("{}: an address outside the model's files (a bug)", path_);
}

File::~File() {
    if (base_) munmap(const_cast<uint8_t *>(base_), size_);
    if (fd_ >= 0) ::close(fd_);
}

void File::parse() {
    const std::string &path = path_;
    Cursor c(path, base_, size_);
    const uint8_t *magic = c.take(4, "the magic");
    if (std::memcmp(magic, "GGUF", 4) != 0) {
        fail("{}: not a GGUF file: expected magic 'GGUF', found bytes {:02x} {:02x} {:02x} {:02x}", path, magic[0],
             magic[1], magic[2], magic[3]);
    }
    version_ = c.read<uint32_t>("the version");
    if (version_ != 2 && version_ != 3) {
        if (version_ != 0 && (version_ & 0xffff) == 0) {
            fail("{}: unsupported GGUF version {} (expected 2 or 3; the file looks big-endian, which is not "
                 "supported)", path, version_);
        }
        fail("{}: unsupported GGUF version {} (expected 2 or 3)", path, version_);
    }
    uint64_t n_tensors = c.read<uint64_t>("the tensor count");
    uint64_t n_kv = c.read<uint64_t>("the key-value count");
    // A key-value pair takes at least 8 (key length) + 4 (type) + 1 (smallest value) bytes,
    // a tensor info at least 8 (name length) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset).
    if (n_kv > c.remaining() / 13) {
        fail("{}: header claims {} key-value pairs, but the file has only {} bytes after the header", path, n_kv,
             c.remaining());
    }
    if (n_tensors > c.remaining() / 32) {
        fail("{}: header claims {} tensors, but the file has only {} bytes after the header", path, n_tensors,
             c.remaining());
    }

    kv_.reserve(n_kv);
    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string key = c.read_string(fmt::format("key {}", k));
        if (kv_index_.count(key)) fail("{}: duplicate key '{}'", path, key);
        uint32_t type_id = c.read<uint32_t>(fmt::format("the type of key '{}'", key));
        Value v = read_value(c, path, key, type_id);
        kv_index_.emplace(key, kv_.size());
        kv_.push_back({std::move(key), std::move(v)});
    }

    if (const Value *a = find("general.alignment")) {
        if (a->type != ValueType::UINT32) {
            fail("{}: key 'general.alignment': expected uint32, found {}", path, value_type_desc(*a));
        }
        if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
            fail("{}: key 'general.alignment': expected a power of two, found {}", path, a->u);
        }
        alignment_ = a->u;
    } else {
        alignment_ = kDefaultAlignment;
    }

    tensors_.reserve(n_tensors);
    for (uint64_t k = 0; k < n_tensors; ++k) {
        TensorInfo t;
        t.name = c.read_string(fmt::format("the name of tensor {}", k));
        if (t.name.size() >= GGML_MAX_NAME) {
            fail("{}: tensor {} name '{}' is {} bytes long, expected fewer than {}", path, k, t.name.substr(0, 80),
                 t.name.size(), GGML_MAX_NAME);
        }
        if (tensor_index_.count(t.name)) fail("{}: duplicate tensor name '{}'", path, t.name);
        std::string what = fmt::format("tensor '{}'", t.name);
        uint32_t n_dims = c.read<uint32_t>(what);
        if (n_dims < 1 || n_dims > 4) fail("{}: tensor '{}' has {} dimensions, expected 1..4", path, t.name, n_dims);
        t.n_dims = (int)n_dims;
        for (uint32_t d = 0; d < n_dims; ++d) {
            t.ne[d] = c.read<int64_t>(what);
            if (t.ne[d] <= 0) {
                fail("{}: tensor '{}' dimension {} has size {}, expected a positive size", path, t.name, d, t.ne[d]);
            }
        }
        uint32_t type_id = c.read<uint32_t>(what);
        if (!valid_tensor_type(type_id)) {
            fail("{}: tensor '{}' has type id {}, which is not a ggml tensor type", path, t.name, type_id);
        }
        t.type = (ggml_type)type_id;
        t.offset = c.read<uint64_t>(what);
        t.nbytes = tensor_nbytes(t.type, t.ne, fmt::format("{}: tensor '{}'", path, t.name));
        if (t.offset % alignment_ != 0) {
            fail("{}: tensor '{}' has offset {}, expected a multiple of the alignment {}", path, t.name, t.offset,
                 alignment_);
        }
        tensor_index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }

    // The data section starts at the next multiple of the alignment (ggml pads only when there are tensors).
    data_offset_ = c.pos();
    if (n_tensors > 0) data_offset_ = (data_offset_ + alignment_ - 1) / alignment_ * alignment_;
    for (const TensorInfo &t : tensors_) {
        uint64_t end = 0;
        if (__builtin_add_overflow(t.offset, t.nbytes, &end) || __builtin_add_overflow(end, data_offset_, &end)) {
            fail("{}: tensor '{}' lies past the end of the file (offset {} + {} bytes overflows 64 bits)", path,
                 t.name, t.offset, t.nbytes);
        }
        if (end > size_) {
            fail("{}: tensor '{}' lies past the end of the file (ends at byte {}, file has {})", path, t.name, end,
                 size_);
        }
        // A general.alignment below 8 can leave a tensor's values at an address
        // they cannot be read from in place (an F16 value at an odd byte).
        const uint64_t start = data_offset_ + t.offset, need = value_alignment(t.type);
        if (start % need != 0) {
            fail("{}: tensor '{}' ({}) starts at byte {} of the file, expected a multiple of {} to read its values in "
                 "place (general.alignment is {})",
                 path, t.name, ggml_type_name(t.type), start, need, alignment_);
        }
    }
}

// ------------------------------------------------------------ File metadata

const Value *File::find(std::string_view key) const {
    auto it = kv_index_.find(std::string(key));
    return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const Value &File::require(std::string_view key) const {
    const Value *v = find(key);
    if (!v) fail("{}: missing key '{}'", path_, key);
    return *v;
}

namespace {

[[noreturn]] void wrong_type(const std::string &path, std::string_view key, std::string_view expected, const Value &v) {
    fail("{}: key '{}': expected {}, found {}", path, key, expected, value_type_desc(v));
}

// Integer value as int64; false when it does not fit.
bool to_int64(const Value &v, int64_t &out) {
    if (is_signed_type(v.type)) {
        out = v.i;
        return true;
    }
    if (v.u > (uint64_t)std::numeric_limits<int64_t>::max()) return false;
    out = (int64_t)v.u;
    return true;
}

}  // namespace

std::string File::get_string(std::string_view key) const {
    const Value &v = require(key);
    if (v.type != ValueType::STRING) wrong_type(path_, key, "a string", v);
    return v.s;
}

int64_t File::get_int(std::string_view key) const {
    const Value &v = require(key);
    if (!v.is_integer()) wrong_type(path_, key, "an integer", v);
    int64_t out;
    if (!to_int64(v, out)) fail("{}: key '{}': expected an integer that fits in int64, found {}", path_, key, v.u);
    return out;
}

uint32_t File::get_u32(std::string_view key) const {
    const Value &v = require(key);
    if (!v.is_integer()) wrong_type(path_, key, "an integer", v);
    int64_t x;
    if (!to_int64(v, x) || x < 0 || x > (int64_t)std::numeric_limits<uint32_t>::max()) {
        fail("{}: key '{}': expected an integer in 0..4294967295, found {}", path_, key, v.to_string());
    }
    return (uint32_t)x;
}

double File::get_float(std::string_view key) const {
    const Value &v = require(key);
    if (!v.is_float() && !v.is_integer()) wrong_type(path_, key, "a number", v);
    return scalar_as_double(v);
}

bool File::get_bool(std::string_view key) const {
    const Value &v = require(key);
    if (v.type != ValueType::BOOL) wrong_type(path_, key, "a bool", v);
    return v.u != 0;
}

std::optional<std::string> File::opt_string(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_string(key);
}
std::optional<int64_t> File::opt_int(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_int(key);
}
std::optional<double> File::opt_float(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_float(key);
}
std::optional<bool> File::opt_bool(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    return get_bool(key);
}

const std::vector<std::string> &File::get_string_array(std::string_view key) const {
    const Value &v = require(key);
    if (v.type != ValueType::ARRAY || v.elem_type != ValueType::STRING) wrong_type(path_, key, "an array of strings", v);
    return v.strings;
}

std::vector<float> File::get_float_array(std::string_view key) const {
    const Value &v = require(key);
    if (v.type != ValueType::ARRAY || !(is_float_type(v.elem_type) || is_integer_type(v.elem_type))) {
        wrong_type(path_, key, "an array of numbers", v);
    }
    std::vector<float> out(v.n);
    for (uint64_t k = 0; k < v.n; ++k) out[k] = (float)v.number_at(k);
    return out;
}

std::vector<int64_t> File::get_int_array(std::string_view key) const {
    const Value &v = require(key);
    if (v.type != ValueType::ARRAY || !is_integer_type(v.elem_type)) wrong_type(path_, key, "an array of integers", v);
    std::vector<int64_t> out(v.n);
    size_t es = scalar_size(v.elem_type);
    for (uint64_t k = 0; k < v.n; ++k) {
        Value e;
        e.type = v.elem_type;
        decode_scalar(v.elem_type, v.raw.data() + k * es, e);
        if (!to_int64(e, out[k])) {
            fail("{}: key '{}': element {} is {}, which does not fit in int64", path_, key, k, e.u);
        }
    }
    return out;
}

// ------------------------------------------------------------- File tensors

void File::release(const void *p, size_t n) const {
    // p lies inside the mapping, whose base is page aligned: whole pages only
    advise_whole_blocks(p, n, (size_t)sysconf(_SC_PAGESIZE), MADV_DONTNEED);
}

void File::will_copy(const void *p, size_t n) const {
    // (SmolLM2-135M Q8_0, packed at load, right after `cat model.gguf`:
    // 268 -> 188 MB peak RSS for a one-token run; BENCHMARKS.md)
    constexpr uintptr_t kBlock = uintptr_t(2) << 20;
    const File &in = file(file_holding(p));
    const auto base = reinterpret_cast<uintptr_t>(in.base_), at = reinterpret_cast<uintptr_t>(p);
    const uintptr_t lo = std::max(base, at / kBlock * kBlock);
    const uintptr_t hi = std::min(base + in.size_, (at + n + kBlock - 1) / kBlock * kBlock);
    // advice only: a kernel without transparent huge pages refuses it, and maps small pages anyway
    if (hi > lo) madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_NOHUGEPAGE);
}

const TensorInfo *File::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(std::string(name));
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo &File::tensor(std::string_view name) const {
    const TensorInfo *t = find_tensor(name);
    if (!t) fail("{}: missing tensor '{}'", path_, name);
    return *t;
}

}  // namespace toy::gguf
