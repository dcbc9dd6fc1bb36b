// GGUF writing: header, key-values and tensor infos are serialized into memory
// (they are small), tensor data is streamed one tensor at a time. Everything
// goes to `<path>.tmp.XXXXXX` next to the target, which is fsync'd and renamed
// over it; on any failure the temporary file is removed and the target is left
// untouched.
#include "gguf/gguf_writer.h"

#include "core/atomic_file.h"
#include "core/progress.h"

#include <cstring>

namespace toy::gguf {

namespace {

constexpr uint64_t kDefaultAlignment = 32;

uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

class Buffer {
public:
    std::vector<uint8_t> bytes;
    template <class T>
    void put(T v) {
        uint8_t b[sizeof(T)];
        std::memcpy(b, &v, sizeof(T));
        bytes.insert(bytes.end(), b, b + sizeof(T));
    }
    void put_string(const std::string &s) {
        put<uint64_t>(s.size());
        bytes.insert(bytes.end(), s.begin(), s.end());
    }
    void put_scalar(ValueType t, const Value &v) {
        switch (t) {
            case ValueType::UINT8: put<uint8_t>((uint8_t)v.u); break;
            case ValueType::BOOL: put<uint8_t>(v.u ? 1 : 0); break;
            case ValueType::INT8: put<int8_t>((int8_t)v.i); break;
            case ValueType::UINT16: put<uint16_t>((uint16_t)v.u); break;
            case ValueType::INT16: put<int16_t>((int16_t)v.i); break;
            case ValueType::UINT32: put<uint32_t>((uint32_t)v.u); break;
            case ValueType::INT32: put<int32_t>((int32_t)v.i); break;
            case ValueType::UINT64: put<uint64_t>(v.u); break;
            case ValueType::INT64: put<int64_t>(v.i); break;
            case ValueType::FLOAT32: put<float>((float)v.f); break;
            case ValueType::FLOAT64: put<double>(v.f); break;
            default: break;
        }
    }
    void put_value(const std::string &key, const Value &v) {
        put<uint32_t>((uint32_t)v.type);
        if (v.type == ValueType::STRING) {
            put_string(v.s);
        } else if (v.type == ValueType::ARRAY) {
            if (v.elem_type == ValueType::ARRAY) fail("key '{}': nested arrays cannot be written to GGUF", key);
            put<uint32_t>((uint32_t)v.elem_type);
            put<uint64_t>(v.n);
            if (v.elem_type == ValueType::STRING) {
                if (v.strings.size() != v.n) {
                    fail("key '{}': array claims {} strings but holds {}", key, v.n, v.strings.size());
                }
                for (const auto &s : v.strings) put_string(s);
            } else {
                size_t es = scalar_size(v.elem_type);
                if (es == 0 || v.raw.size() != v.n * es) {
                    fail("key '{}': array of {} claims {} elements but holds {} bytes", key, type_name(v.elem_type),
                         v.n, v.raw.size());
                }
                bytes.insert(bytes.end(), v.raw.begin(), v.raw.end());
            }
        } else {
            if ((uint32_t)v.type > (uint32_t)ValueType::FLOAT64) {
                fail("key '{}': value type id {} is not a GGUF type", key, (uint32_t)v.type);
            }
            put_scalar(v.type, v);
        }
    }
};

}  // namespace

void Writer::set(const std::string &key, Value v) {
    if (key == "general.alignment") {
        if (v.type != ValueType::UINT32) fail("key 'general.alignment': expected uint32, found {}", type_name(v.type));
        if (v.u == 0 || (v.u & (v.u - 1)) != 0) fail("key 'general.alignment': expected a power of two, found {}", v.u);
        alignment_ = v.u;
    }
    if (v.type == ValueType::ARRAY && v.elem_type == ValueType::ARRAY) {
        fail("key '{}': nested arrays cannot be written to GGUF", key);
    }
    for (auto &kv : kv_) {
        if (kv.key == key) {
            kv.value = std::move(v);
            return;
        }
    }
    kv_.push_back({key, std::move(v)});
}

void Writer::copy_metadata(const File &src, const std::function<bool(const std::string &)> &skip) {
    for (const auto &kv : src.metadata()) {
        // a split model's keys describe its files, never the one written
        if (kv.key == kSplitNo || kv.key == kSplitCount || kv.key == kSplitTensorsCount) continue;
        if (skip && skip(kv.key)) continue;
        set(kv.key, kv.value);
    }
}

void write_split(const File &src, const std::vector<std::string> &paths, const std::vector<size_t> &per_file,
                 const std::function<void(size_t, Writer &)> &edit) {
    if (paths.empty() || paths.size() != per_file.size()) {
        fail("write_split: expected one tensor count per file, found {} files and {} counts", paths.size(), per_file.size());
    }
    const size_t n = src.tensors().size(), count = paths.size();
    size_t next = 0;
    for (size_t i = 0; i < count; ++i) {
        Writer w(src.alignment());
        if (i == 0) w.copy_metadata(src);
        w.set(kSplitNo, Value::u32((uint32_t)i));
        w.set(kSplitCount, Value::u32((uint32_t)count));
        w.set(kSplitTensorsCount, Value::i32((int32_t)n));
        const size_t end = i + 1 == count ? n : std::min(n, next + per_file[i]);
        for (; next < end; ++next) {
            const TensorInfo &t = src.tensors()[next];
            w.add_tensor(t.name, t.type, t.ne, t.n_dims, src.tensor_data(t));
        }
        if (edit) edit(i, w);
        w.write(paths[i]);
    }
}

void Writer::add_tensor(const std::string &name, ggml_type type, std::array<int64_t, 4> ne, int n_dims,
                        const void *data) {
    add_tensor(name, type, ne, n_dims, [data](uint8_t *out, uint64_t nbytes) { std::memcpy(out, data, nbytes); });
}

void Writer::add_tensor(const std::string &name, ggml_type type, std::array<int64_t, 4> ne, int n_dims, Fill fill) {
    if (name.empty() || name.size() >= GGML_MAX_NAME) {
        fail("tensor '{}': name must be 1..{} bytes long, found {}", name, GGML_MAX_NAME - 1, name.size());
    }
    for (const auto &p : tensors_) {
        if (p.info.name == name) fail("tensor '{}': added twice", name);
    }
    if (n_dims < 1 || n_dims > 4) fail("tensor '{}': expected 1..4 dimensions, found {}", name, n_dims);
    for (int d = 0; d < 4; ++d) {
        if (d >= n_dims && ne[d] != 1) {
            fail("tensor '{}': n_dims is {} but ne[{}] = {}, expected 1", name, n_dims, d, ne[d]);
        }
        if (ne[d] <= 0) fail("tensor '{}': dimension {} has size {}, expected a positive size", name, d, ne[d]);
    }
    if (!fill) fail("tensor '{}': no data", name);
    Pending p;
    p.info.name = name;
    p.info.type = type;
    p.info.ne = ne;
    p.info.n_dims = n_dims;
    p.info.nbytes = tensor_nbytes(type, ne, fmt::format("tensor '{}'", name));
    p.fill = std::move(fill);
    tensors_.push_back(std::move(p));
}

uint64_t Writer::write(const std::string &path) const {
    // Serialize the header first: every validation error surfaces before a file exists.
    std::vector<KeyValue> kv = kv_;
    bool has_alignment = false;
    for (const auto &e : kv) has_alignment |= e.key == "general.alignment";
    if (!has_alignment && alignment_ != kDefaultAlignment) {
        kv.push_back({"general.alignment", Value::u32((uint32_t)alignment_)});
    }

    Buffer h;
    h.bytes.insert(h.bytes.end(), {'G', 'G', 'U', 'F'});
    h.put<uint32_t>(3);
    h.put<uint64_t>(tensors_.size());
    h.put<uint64_t>(kv.size());
    try {
        for (const auto &e : kv) {
            h.put_string(e.key);
            h.put_value(e.key, e.value);
        }
    } catch (const Error &e) {
        fail("{}: {}", path, e.what());
    }
    uint64_t offset = 0;
    for (const auto &p : tensors_) {
        h.put_string(p.info.name);
        h.put<uint32_t>((uint32_t)p.info.n_dims);
        for (int d = 0; d < p.info.n_dims; ++d) h.put<int64_t>(p.info.ne[d]);
        h.put<uint32_t>((uint32_t)p.info.type);
        h.put<uint64_t>(offset);
        offset = pad_to(offset + p.info.nbytes, alignment_);
    }

    AtomicFile tmp(path);
    tmp.write(h.bytes.data(), h.bytes.size());
    if (!tensors_.empty()) tmp.pad_to(alignment_);
    std::vector<uint8_t> buf;
    uint64_t total = 0;
    for (const auto &p : tensors_) total += p.info.nbytes;
    Progress progress("writing " + path, total);
    for (const auto &p : tensors_) {
        try {
            buf.assign(p.info.nbytes, 0);
            p.fill(buf.data(), p.info.nbytes);
        } catch (const Error &e) {
            fail("{}: while producing tensor '{}': {}", path, p.info.name, e.what());
        } catch (const std::bad_alloc &) {
            fail("{}: out of memory while producing tensor '{}' ({} bytes)", path, p.info.name, p.info.nbytes);
        } catch (const std::exception &e) {
            fail("{}: while producing tensor '{}': {}", path, p.info.name, e.what());
        }
        tmp.write(buf.data(), p.info.nbytes);
        tmp.pad_to(alignment_);
        progress.add(p.info.nbytes);
    }
    tmp.commit();
    return tmp.written();
}

}  // namespace toy::gguf
