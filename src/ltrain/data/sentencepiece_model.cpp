#include "ltrain/data/sentencepiece_model.h"

#include <fmt/format.h>

#include <string_view>

#include "ltrain/common/errors.h"
#include "ltrain/io/files.h"

namespace ltrain::data {
namespace {

// Protobuf's wire format: each field a varint key (number << 3 | wire type), then a varint (0),
// 8 bytes (1), a length and that many bytes (2) or 4 bytes (5).
class Wire {
 public:
  Wire(std::string_view bytes, const std::string& path) : s_(bytes), path_(path) {}
  bool done() const { return at_ >= s_.size(); }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const auto b = static_cast<uint8_t>(s_[at_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw bad("a varint longer than 10 bytes");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    need(n);
    const auto out = s_.substr(at_, n);
    at_ += n;
    return out;
  }
  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0:
        varint();
        return;
      case 1:
        need(8), at_ += 8;
        return;
      case 2:
        bytes();
        return;
      case 5:
        need(4), at_ += 4;
        return;
      default:
        throw bad(fmt::format("wire type {}", wire_type));
    }
  }
  UsageError bad(const std::string& what) const {
    return UsageError(
        fmt::format("'{}' is not a SentencePiece model: its protobuf is malformed at byte {} ({})",
                    path_, at_, what));
  }

 private:
  void need(uint64_t n) const {
    if (n > s_.size() - at_) throw bad("it ends inside a field");
  }
  std::string_view s_;
  size_t at_ = 0;
  const std::string& path_;
};

// Calls f(field, wire_type, wire) for each field of the message in `bytes`; f reads or skips it.
template <class F>
void fields(std::string_view bytes, const std::string& path, const F& f) {
  Wire w(bytes, path);
  while (!w.done()) {
    const uint64_t key = w.varint();
    f(static_cast<uint32_t>(key >> 3), static_cast<uint32_t>(key & 7), w);
  }
}

}  // namespace

SentencePieceModel readSentencePieceModel(const std::string& path) {
  const std::string data = io::readFile(path);
  SentencePieceModel m;
  bool has_normalizer = false;
  fields(data, path, [&](uint32_t field, uint32_t type, Wire& w) {
    if (field == 1 && type == 2) {  // pieces
      SentencePieceModel::Piece p;
      fields(w.bytes(), path, [&](uint32_t f, uint32_t t, Wire& pw) {
        if (f == 1 && t == 2)
          p.text = std::string(pw.bytes());
        else if (f == 3 && t == 0)
          p.type = static_cast<int>(pw.varint());
        else
          pw.skip(t);
      });
      m.pieces.push_back(std::move(p));
    } else if (field == 2 && type == 2) {  // trainer_spec
      fields(w.bytes(), path, [&](uint32_t f, uint32_t t, Wire& tw) {
        if (t != 0) return tw.skip(t);
        const auto v = tw.varint();
        const auto i32 = static_cast<int64_t>(static_cast<int32_t>(v));  // -1: none
        switch (f) {
          case 3:
            m.model_type = static_cast<int>(v);
            break;
          case 24:
            m.treat_whitespace_as_suffix = v != 0;
            break;
          case 35:
            m.byte_fallback = v != 0;
            break;
          case 40:
            m.unk_id = i32;
            break;
          case 41:
            m.bos_id = i32;
            break;
          default:
            break;
        }
      });
    } else if (field == 3 && type == 2) {  // normalizer_spec
      has_normalizer = true;
      fields(w.bytes(), path, [&](uint32_t f, uint32_t t, Wire& nw) {
        if (f == 1 && t == 2)
          m.normalizer = std::string(nw.bytes());
        else if (f == 2 && t == 2)
          m.has_charsmap = !nw.bytes().empty();
        else if (f == 3 && t == 0)
          m.add_dummy_prefix = nw.varint() != 0;
        else if (f == 4 && t == 0)
          m.remove_extra_whitespaces = nw.varint() != 0;
        else if (f == 5 && t == 0)
          m.escape_whitespaces = nw.varint() != 0;
        else
          nw.skip(t);
      });
    } else {
      w.skip(type);
    }
  });
  if (m.pieces.empty() || !has_normalizer)
    throw UsageError(fmt::format(
        "'{}' is not a SentencePiece model: it holds no pieces or no normalizer spec", path));
  return m;
}

}  // namespace ltrain::data
