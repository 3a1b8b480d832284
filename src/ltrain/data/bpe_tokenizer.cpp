// BPE as Hugging Face tokenizers runs it from a tokenizer.json, in its two kinds:
//   - byte-level (GPT-2's, Llama 3's): added tokens split out first, then the pre-tokenizer's
//     regex (GPT-2's, or a Split pattern as Llama 3's) cuts words, each word's UTF-8 bytes become
//     the printable characters of GPT-2's byte map, and merges apply by rank;
//   - SentencePiece's (Llama 2's, Mistral's, Gemma's): spaces become U+2581 (a Metaspace
//     pre-tokenizer, or the older Prepend and Replace normalizers), merges apply to characters,
//     and a character the vocabulary lacks becomes its UTF-8 bytes as <0xXX> tokens
//     (byte_fallback); decoding turns them back and strips the prepended space.
// A template post-processor may add special tokens (Llama 3's <|begin_of_text|>, Llama 2's <s>).
// Written here because no C++ library for tokenizer.json is packaged for Debian; the regex engine
// is PCRE2's, with Unicode properties, as the patterns need.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "ltrain/common/errors.h"
#include "ltrain/data/codec.h"
#include "ltrain/data/sentencepiece_model.h"
#include "ltrain/data/utf8.h"
#include "ltrain/io/json.h"

namespace ltrain::data {
namespace {

// GPT-2's pre-tokenization pattern, which ByteLevel(use_regex: true) applies.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256 + n.
struct ByteMap {
  std::string to_char[256];                    // byte -> UTF-8 of its character
  std::unordered_map<uint32_t, uint8_t> back;  // character -> byte
  ByteMap() {
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const uint32_t cp = printable ? b : 256 + extra++;
      appendUtf8(to_char[b], cp);
      back[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& byteMap() {
  static const ByteMap m;
  return m;
}

// The code points of a token's UTF-8 text; an invalid sequence stands for its first byte (as a
// byte-level vocabulary's unmapped code point, decode passes it through).
std::vector<uint32_t> codePoints(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const int64_t cp = decodeUtf8(s, i);
    if (cp >= 0) {
      out.push_back(static_cast<uint32_t>(cp));
    } else {
      out.push_back(static_cast<unsigned char>(s[i]));
      ++i;
    }
  }
  return out;
}

class Regex {
 public:
  Regex(const std::string& pattern, const std::string& file) {
    int err = 0;
    PCRE2_SIZE at = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw UsageError(
          fmt::format("tokenizer file '{}': its pre-tokenizer pattern does not "
                      "compile at offset {}: {}",
                      file, at, reinterpret_cast<const char*>(msg)));
    }
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // HF's "Isolated" split: each match is a piece, and so is each stretch between matches.
  std::vector<std::string> split(const std::string& text) const {
    std::vector<std::string> out;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t pos = 0, last = 0;
    while (pos <= text.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                                 0, md, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[0] == ov[1]) {  // an empty match: step over one character
        pos = ov[1] + 1;
        while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xc0) == 0x80) ++pos;
        continue;
      }
      if (ov[0] > last) out.push_back(text.substr(last, ov[0] - last));
      out.push_back(text.substr(ov[0], ov[1] - ov[0]));
      pos = last = ov[1];
    }
    if (last < text.size()) out.push_back(text.substr(last));
    pcre2_match_data_free(md);
    return out;
  }

 private:
  pcre2_code* code_ = nullptr;
};

class Bpe final : public TextCodec {
 public:
  explicit Bpe(const std::string& path) : Bpe(io::readJsonFile(path), path) {}

  // A SentencePiece model, laid out as transformers' LlamaConverter lays it out in a
  // tokenizer.json, then run as SentencePiece runs it: the space prefix always (a tokenizer.json's
  // Metaspace skips it before a leading space), no special token read out of the text, and the
  // control tokens (<s>, </s>) left out of decoded text.
  static std::unique_ptr<Bpe> fromSentencePiece(const SentencePieceModel& m,
                                                const std::string& path) {
    auto refuse = [&](const std::string& what) {
      return UsageError(fmt::format(
          "'{}': {}; ltrain reads SentencePiece BPE models with the identity normalizer, as "
          "Llama 2's and Mistral's tokenizer.model",
          path, what));
    };
    static const char* kinds[] = {"?", "unigram", "BPE", "word", "char"};
    if (m.model_type != 2)
      throw refuse(fmt::format("a SentencePiece {} model",
                               kinds[m.model_type >= 1 && m.model_type <= 4 ? m.model_type : 0]));
    if ((m.normalizer != "identity" && !m.normalizer.empty()) || m.has_charsmap)
      throw refuse(fmt::format("normalizer '{}' (Unicode normalization ltrain does not apply)",
                               m.normalizer));
    if (m.remove_extra_whitespaces) throw refuse("remove_extra_whitespaces (spaces collapsed)");
    if (!m.escape_whitespaces || m.treat_whitespace_as_suffix)
      throw refuse("spaces not escaped as U+2581 prefixes");
    io::Json vocab = io::Json::object(), merges = io::Json::array(), added = io::Json::array();
    for (size_t i = 0; i < m.pieces.size(); ++i) vocab[m.pieces[i].text] = i;
    // The merges as transformers' SentencePieceExtractor reads them off the pieces: each piece in
    // id order (SentencePiece's BPE scores fall with the id), split every way into two pieces.
    for (const auto& p : m.pieces) {
      if (p.type != SentencePieceModel::kNormal) continue;
      std::vector<std::tuple<int64_t, int64_t, std::string, std::string>> splits;
      for (size_t k = 1; k < p.text.size(); ++k) {
        if ((static_cast<unsigned char>(p.text[k]) & 0xc0) == 0x80) continue;  // mid-character
        const auto a = vocab.find(p.text.substr(0, k)), b = vocab.find(p.text.substr(k));
        if (a != vocab.end() && b != vocab.end())
          splits.emplace_back(a->get<int64_t>(), b->get<int64_t>(), a.key(), b.key());
      }
      std::sort(splits.begin(), splits.end());
      for (const auto& s : splits) merges.push_back({std::get<2>(s), std::get<3>(s)});
    }
    for (size_t i = 0; i < m.pieces.size(); ++i)
      if (m.pieces[i].type == SentencePieceModel::kUserDefined)  // matched whole, as added tokens
        added.push_back({{"id", i}, {"content", m.pieces[i].text}});
    const auto piece = [&](int64_t id) {
      return id >= 0 && id < static_cast<int64_t>(m.pieces.size()) ? m.pieces[id].text : "";
    };
    io::Json j = {{"model",
                   {{"type", "BPE"},
                    {"vocab", vocab},
                    {"merges", merges},
                    {"byte_fallback", m.byte_fallback},
                    {"fuse_unk", true},
                    {"unk_token", piece(m.unk_id)}}},
                  {"added_tokens", added},
                  {"pre_tokenizer",
                   {{"type", "Metaspace"},
                    {"replacement", kMeta},
                    {"prepend_scheme", m.add_dummy_prefix ? "first" : "never"},
                    {"split", false}}},
                  {"decoder",
                   {{"type", "Sequence"},
                    {"decoders", io::Json::array({{{"type", "Strip"},
                                                   {"content", " "},
                                                   {"start", m.add_dummy_prefix ? 1 : 0},
                                                   {"stop", 0}}})}}}};
    auto bpe = std::make_unique<Bpe>(j, path);
    if (m.add_dummy_prefix) bpe->prepend_ = Prepend::kAlwaysFirst;
    if (m.bos_id >= 0 && !piece(m.bos_id).empty())  // Llama's <s> first, as transformers adds it
      bpe->template_ = {{piece(m.bos_id), {m.bos_id}}, {"", {}}};
    for (size_t i = 0; i < m.pieces.size(); ++i)
      if (m.pieces[i].type == SentencePieceModel::kControl ||
          m.pieces[i].type == SentencePieceModel::kUnknown)
        bpe->silent_ids_.insert(static_cast<int64_t>(i));
    return bpe;
  }

  Bpe(const io::Json& j, const std::string& path) : path_(path) {
    auto refuse = [&](const std::string& what) {
      return UsageError(fmt::format(
          "tokenizer file '{}': {} (ltrain reads byte-level BPE tokenizers, as GPT-2's, Llama "
          "3's and scripts/prepare_tokens.py's)",
          path, what));
    };
    if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
      throw refuse("no \"model\" object: not a Hugging Face tokenizer.json");
    const auto& model = j["model"];
    if (model.value("type", "") != "BPE")
      throw refuse(fmt::format("model type '{}'", model.value("type", "?")));
    byte_fallback_ = model.value("byte_fallback", false);
    fuse_unk_ = model.value("fuse_unk", false);
    if (!model.value("continuing_subword_prefix", io::Json()).is_null() &&
        !model["continuing_subword_prefix"].get<std::string>().empty())
      throw refuse("a continuing_subword_prefix");
    readNormalizer(j.value("normalizer", io::Json()), refuse);
    ignore_merges_ = model.value("ignore_merges", false);
    if (!model.contains("vocab") || !model["vocab"].is_object()) throw refuse("no model.vocab");
    for (const auto& [token, id] : model["vocab"].items()) {
      vocab_[token] = tokenId(id, token, refuse);
      size_ = std::max(size_, vocab_[token] + 1);
    }
    int rank = 0;
    for (const auto& m : model.value("merges", io::Json::array())) {
      std::string a, b;
      if (m.is_string()) {  // "a b", the older form
        const auto s = m.get<std::string>();
        const auto sp = s.find(' ');
        if (sp == std::string::npos) throw refuse(fmt::format("merge '{}' is not 'a b'", s));
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2) {
        a = m[0].get<std::string>(), b = m[1].get<std::string>();
      } else {
        throw refuse("a merge that is neither \"a b\" nor [a, b]");
      }
      ranks_.emplace(a + '\0' + b, rank++);
    }
    for (const auto& t : j.value("added_tokens", io::Json::array())) {
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string())
        throw refuse("an added token without a \"content\" string");
      const auto id = tokenId(t.value("id", io::Json()), t["content"].get<std::string>(), refuse);
      added_.emplace_back(t["content"].get<std::string>(), id);
      added_by_id_[id] = added_.back().first;
      size_ = std::max(size_, id + 1);
    }
    // Longest first, so that a token that begins another does not cut it.
    std::sort(added_.begin(), added_.end(),
              [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
    readPreTokenizer(j.value("pre_tokenizer", io::Json()), refuse);
    if (metaspace_) readDecoder(j.value("decoder", io::Json()));
    if (byte_fallback_ && !metaspace_) throw refuse("byte_fallback without a Metaspace");
    readPostProcessor(j.value("post_processor", io::Json()), refuse);
    for (const auto& [token, id] : vocab_) by_id_[id] = token;
    if (const auto& unk = model.value("unk_token", io::Json()); unk.is_string())
      if (auto it = vocab_.find(unk.get<std::string>()); it != vocab_.end()) unk_id_ = it->second;
  }

  int64_t vocabSize() const override { return size_; }

  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids;
    for (const auto& part : template_) {
      if (part.first.empty()) {
        encodeText(text, ids);
      } else {
        ids.insert(ids.end(), part.second.begin(), part.second.end());
      }
    }
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    if (metaspace_) return decodeMetaspace(ids);
    std::string out;
    const auto& bm = byteMap();
    for (auto id : ids) {
      if (auto a = added_by_id_.find(id); a != added_by_id_.end()) {
        out += a->second;
        continue;
      }
      auto t = by_id_.find(id);
      if (t == by_id_.end()) continue;  // an id the model may emit but the tokenizer never made
      for (uint32_t cp : codePoints(t->second)) {
        auto b = bm.back.find(cp);
        if (b != bm.back.end())
          out += static_cast<char>(b->second);
        else
          appendUtf8(out, cp);
      }
    }
    return out;
  }

 private:
  // A token's id: an integer in [0, 2^31), so that a corrupt file cannot ask for an embedding
  // table of 2^60 rows.
  template <class Refuse>
  static int64_t tokenId(const io::Json& id, const std::string& token, const Refuse& refuse) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1LL << 31))
      throw refuse(
          fmt::format("token '{}' has id {}, expected an integer in [0, 2^31)", token, id.dump()));
    return id.get<int64_t>();
  }

  // A pipeline step of tokenizer.json: a Sequence's items (under `list`), or the one step; none
  // for null.
  static std::vector<io::Json> steps(const io::Json& j, const char* list) {
    if (j.is_null()) return {};
    if (j.value("type", "") != "Sequence") return {j};
    return j.value(list, io::Json::array()).get<std::vector<io::Json>>();
  }

  // SentencePiece's older form: Prepend(U+2581) then Replace(" ", U+2581), each text piece between
  // added tokens; any other normalizer is refused.
  template <class Refuse>
  void readNormalizer(const io::Json& n, const Refuse& refuse) {
    for (const auto& s : steps(n, "normalizers")) {
      const std::string type = s.value("type", "");
      if (type == "Prepend" && s.value("prepend", "") == kMeta) {
        prepend_ = Prepend::kEachPiece;
      } else if (type == "Replace" &&
                 s.value("pattern", io::Json::object()).value("String", "") == " " &&
                 s.value("content", "") == kMeta) {
        metaspace_ = true;
      } else {
        throw refuse(fmt::format("normalizer '{}'", type));
      }
    }
    if (prepend_ == Prepend::kEachPiece && !metaspace_)
      throw refuse("a Prepend normalizer without Replace(' ', U+2581)");
  }

  // The decoder's Strip: how many leading spaces go (SentencePiece's prepended one).
  void readDecoder(const io::Json& d) {
    for (const auto& s : steps(d, "decoders"))
      if (s.value("type", "") == "Strip" && s.value("content", "") == " ")
        strip_start_ = s.value("start", 0);
  }

  template <class Refuse>
  void readPreTokenizer(const io::Json& pt, const Refuse& refuse) {
    if (pt.is_null() && metaspace_) return;  // the normalizers did it
    if (pt.is_null()) throw refuse("no pre_tokenizer");
    bool byte_level = false;
    for (const auto& s : steps(pt, "pretokenizers")) {
      const std::string type = s.value("type", "");
      if (type == "ByteLevel") {
        byte_level = true;
        add_prefix_space_ = s.value("add_prefix_space", false);
        if (s.value("use_regex", true))
          patterns_.push_back(std::make_unique<Regex>(kGpt2Pattern, path_));
      } else if (type == "Split") {
        const auto& pat = s.value("pattern", io::Json::object());
        if (!pat.contains("Regex") && !pat.contains("String"))
          throw refuse("a Split pre-tokenizer without a pattern");
        if (s.value("behavior", "") != "Isolated" || s.value("invert", false))
          throw refuse("a Split pre-tokenizer whose behavior is not Isolated");
        std::string re = pat.contains("Regex") ? pat["Regex"].get<std::string>() : "";
        if (pat.contains("String")) {  // a literal: quoted for the regex engine
          re = "\\Q" + pat["String"].get<std::string>() + "\\E";
        }
        patterns_.push_back(std::make_unique<Regex>(re, path_));
      } else if (type == "Metaspace" && s.value("replacement", "") == kMeta) {
        metaspace_ = true;
        const std::string scheme = s.value("prepend_scheme", "always");
        prepend_ = scheme == "first"   ? Prepend::kFirst
                   : scheme == "never" ? Prepend::kNever
                                       : Prepend::kAlways;
        split_metaspace_ = s.value("split", true);
      } else {
        throw refuse(fmt::format("pre-tokenizer '{}'", type));
      }
    }
    if (byte_level && metaspace_) throw refuse("both ByteLevel and Metaspace pre-tokenizers");
    if (!byte_level && !metaspace_) throw refuse("no ByteLevel or Metaspace pre-tokenizer");
  }

  template <class Refuse>
  void readPostProcessor(const io::Json& pp, const Refuse& refuse) {
    template_ = {{"", {}}};  // the text alone
    for (const auto& s : steps(pp, "processors")) {
      const std::string type = s.value("type", "");
      if (type == "ByteLevel") continue;  // offsets only
      if (type != "TemplateProcessing") throw refuse(fmt::format("post-processor '{}'", type));
      template_.clear();
      for (const auto& item : s.value("single", io::Json::array())) {
        if (item.contains("Sequence")) {
          template_.push_back({"", {}});
        } else if (item.contains("SpecialToken")) {
          const std::string name = item["SpecialToken"].value("id", "");
          const auto& special = s.value("special_tokens", io::Json::object());
          if (!special.contains(name))
            throw refuse(fmt::format("template token '{}' undefined", name));
          template_.push_back({name, special[name].value("ids", std::vector<int64_t>{})});
        }
      }
    }
  }

  void encodeText(const std::string& text, std::vector<int64_t>& ids) const {
    // Added tokens first: the text between them is encoded as words.
    size_t pos = 0, from = 0;
    while (pos < text.size()) {
      const std::pair<std::string, int64_t>* hit = nullptr;
      for (const auto& a : added_)
        if (!a.first.empty() && text.compare(pos, a.first.size(), a.first) == 0) {
          hit = &a;
          break;
        }
      if (!hit) {
        ++pos;
        continue;
      }
      encodeWords(text.substr(from, pos - from), ids, from == 0);
      ids.push_back(hit->second);
      pos += hit->first.size();
      from = pos;
    }
    encodeWords(text.substr(from), ids, from == 0);
  }

  void encodeWords(std::string text, std::vector<int64_t>& ids, bool at_start) const {
    if (text.empty()) return;
    if (metaspace_) return encodeMetaspace(text, ids, at_start);
    if (add_prefix_space_ && at_start && text[0] != ' ') text.insert(0, " ");
    std::vector<std::string> words{text};
    for (const auto& re : patterns_) {
      std::vector<std::string> next;
      for (const auto& w : words)
        for (auto& piece : re->split(w)) next.push_back(std::move(piece));
      words = std::move(next);
    }
    for (const auto& w : words) encodeWord(w, ids);
  }

  void encodeWord(const std::string& word, std::vector<int64_t>& ids) const {
    std::string mapped;
    std::vector<std::string> parts;
    for (unsigned char b : word) {
      parts.push_back(byteMap().to_char[b]);
      mapped += parts.back();
    }
    if (ignore_merges_)
      if (auto it = vocab_.find(mapped); it != vocab_.end()) return ids.push_back(it->second);
    mergeParts(parts);
    for (const auto& p : parts) {
      auto it = vocab_.find(p);
      if (it == vocab_.end())
        throw UsageError(fmt::format(
            "tokenizer file '{}' has no token for '{}' (the vocabulary lacks a byte)", path_, p));
      ids.push_back(it->second);
    }
  }

  // Merges the adjacent pair of lowest rank until none is in the table (GPT-2's loop; tokenizers'
  // merges the same pairs in the same order).
  void mergeParts(std::vector<std::string>& parts) const {
    while (parts.size() > 1) {
      int best = INT_MAX;
      size_t at = 0;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        auto r = ranks_.find(parts[i] + '\0' + parts[i + 1]);
        if (r != ranks_.end() && r->second < best) best = r->second, at = i;
      }
      if (best == INT_MAX) break;
      const std::string a = parts[at], b = parts[at + 1];
      std::vector<std::string> merged;
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i + 1 < parts.size() && parts[i] == a && parts[i + 1] == b) {
          merged.push_back(a + b);
          ++i;
        } else {
          merged.push_back(parts[i]);
        }
      }
      parts = std::move(merged);
    }
  }

  // SentencePiece's kind: spaces as U+2581, the prefix as the Metaspace pre-tokenizer (or the
  // Prepend normalizer) adds it, words split before each U+2581 where it splits, and BPE over each
  // word's characters.
  void encodeMetaspace(const std::string& piece, std::vector<int64_t>& ids, bool at_start) const {
    std::string text;
    for (char c : piece) c == ' ' ? text += kMeta : text += c;
    const bool starts = text.rfind(kMeta, 0) == 0;
    if (prepend_ == Prepend::kEachPiece || (prepend_ == Prepend::kAlways && !starts) ||
        (prepend_ == Prepend::kFirst && at_start && !starts) ||
        (prepend_ == Prepend::kAlwaysFirst && at_start))
      text.insert(0, kMeta);
    if (!split_metaspace_) return encodeCharacters(text, ids);
    // Each U+2581 starts a word (MergedWithNext).
    size_t from = 0;
    for (size_t at = text.find(kMeta, 1); at != std::string::npos; at = text.find(kMeta, at + 1)) {
      encodeCharacters(text.substr(from, at - from), ids);
      from = at;
    }
    encodeCharacters(text.substr(from), ids);
  }

  // BPE over a word's characters; a character the vocabulary lacks becomes its bytes' <0xXX>
  // tokens (byte_fallback), else the unknown token (consecutive ones fused where fuse_unk).
  void encodeCharacters(const std::string& word, std::vector<int64_t>& ids) const {
    if (word.empty()) return;
    std::vector<std::string> parts;
    for (size_t i = 0; i < word.size();) {
      const size_t start = i;
      if (decodeUtf8(word, i) < 0) ++i;  // an invalid byte stands alone
      std::string ch = word.substr(start, i - start);
      if (vocab_.count(ch)) {
        parts.push_back(std::move(ch));
        continue;
      }
      bool bytes = byte_fallback_;
      for (unsigned char b : ch) bytes = bytes && vocab_.count(byteToken(b));
      if (bytes) {
        for (unsigned char b : ch) parts.push_back(byteToken(b));
      } else {
        parts.push_back(std::string(1, '\0') + ch);  // unknown: no merge or token matches it
      }
    }
    mergeParts(parts);
    bool last_unknown = false;
    for (const auto& p : parts) {
      auto it = vocab_.find(p);
      if (it != vocab_.end()) {
        ids.push_back(it->second), last_unknown = false;
        continue;
      }
      if (unk_id_ < 0)
        throw UsageError(fmt::format("tokenizer file '{}' has no token for '{}' and no unk_token",
                                     path_, p[0] == '\0' ? p.substr(1) : p));
      if (!(fuse_unk_ && last_unknown)) ids.push_back(unk_id_);
      last_unknown = true;
    }
  }

  static std::string byteToken(unsigned char b) { return fmt::format("<0x{:02X}>", b); }

  std::string decodeMetaspace(const std::vector<int64_t>& ids) const {
    std::string out, bytes;
    auto flush = [&] {  // ByteFallback: a run of <0xXX> tokens is UTF-8, else U+FFFD per byte
      for (size_t i = 0; i < bytes.size();) {
        const size_t start = i;
        if (decodeUtf8(bytes, i) >= 0) {
          out += bytes.substr(start, i - start);
        } else {
          out += "\xef\xbf\xbd";
          ++i;
        }
      }
      bytes.clear();
    };
    for (auto id : ids) {
      if (auto a = added_by_id_.find(id); a != added_by_id_.end()) {
        flush();
        out += a->second;
        continue;
      }
      auto t = by_id_.find(id);
      if (t == by_id_.end() || silent_ids_.count(id)) continue;
      const std::string& tok = t->second;
      if (tok.size() == 6 && tok.rfind("<0x", 0) == 0 && tok[5] == '>') {
        bytes += static_cast<char>(std::stoi(tok.substr(3, 2), nullptr, 16));
        continue;
      }
      flush();
      for (size_t at = 0; at < tok.size();) {
        if (tok.compare(at, kMeta.size(), kMeta) == 0) {
          out += ' ', at += kMeta.size();
        } else {
          out += tok[at++];
        }
      }
    }
    flush();
    for (int64_t k = 0; k < strip_start_ && !out.empty() && out[0] == ' '; ++k) out.erase(0, 1);
    return out;
  }

  static inline const std::string kMeta = "\xe2\x96\x81";  // U+2581, SentencePiece's space
  // kAlwaysFirst: SentencePiece's own add_dummy_prefix, before the text even where it starts with
  // a space.
  enum class Prepend { kNever, kFirst, kAlways, kEachPiece, kAlwaysFirst };

  std::string path_;
  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<int64_t, std::string> by_id_, added_by_id_;
  std::unordered_map<std::string, int> ranks_;
  std::set<int64_t> silent_ids_;  // left out of decoded text (SentencePiece's control tokens)
  std::vector<std::pair<std::string, int64_t>> added_;
  std::vector<std::unique_ptr<Regex>> patterns_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> template_;  // "" = the text
  bool add_prefix_space_ = false, ignore_merges_ = false;
  bool metaspace_ = false, split_metaspace_ = true, byte_fallback_ = false, fuse_unk_ = false;
  Prepend prepend_ = Prepend::kNever;
  int64_t strip_start_ = 0, unk_id_ = -1;
  int64_t size_ = 0;
};

}  // namespace

std::unique_ptr<TextCodec> loadBpe(const std::string& path) {
  try {
    return std::make_unique<Bpe>(path);
  } catch (const io::Json::exception& e) {  // a field of the wrong type, found by fuzz_tokens
    throw UsageError(fmt::format("tokenizer file '{}' is malformed: {}", path, e.what()));
  }
}

std::unique_ptr<TextCodec> loadSentencePiece(const std::string& path) {
  return Bpe::fromSentencePiece(readSentencePieceModel(path), path);
}

int64_t tokenizerVocabSize(const std::string& path) {
  const io::Json j = io::readJsonFile(path);
  int64_t size = 0;
  if (j.is_object() && j.contains("model") && j["model"].contains("vocab") &&
      j["model"]["vocab"].is_object())
    for (const auto& [token, id] : j["model"]["vocab"].items())
      if (id.is_number_integer() && id.get<int64_t>() < (1LL << 31))
        size = std::max(size, id.get<int64_t>() + 1);
  if (j.is_object() && j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& t : j["added_tokens"])
      if (t.contains("id") && t["id"].is_number_integer() && t["id"].get<int64_t>() < (1LL << 31))
        size = std::max(size, t["id"].get<int64_t>() + 1);
  if (size == 0)
    throw UsageError(
        fmt::format("tokenizer file '{}' defines no vocabulary (expected model.vocab)", path));
  return size;
}

}  // namespace ltrain::data
