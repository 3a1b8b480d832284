// A flat JSON object writer for metrics.jsonl and summary.json. Written here because none of the
// project's libraries emits JSON (yaml-cpp's flow style is not JSON for NaN or infinities).
#pragma once
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace ltrain::io {

class JsonObject {
 public:
  JsonObject& add(const std::string& key, const std::string& v) { return raw(key, quote(v)); }
  JsonObject& add(const std::string& key, const char* v) { return raw(key, quote(v)); }
  JsonObject& add(const std::string& key, double v) {
    return raw(key, std::isfinite(v) ? fmt::format("{}", v) : "null");  // shortest round-trip form
  }
  JsonObject& add(const std::string& key, int64_t v) { return raw(key, std::to_string(v)); }
  JsonObject& add(const std::string& key, int v) { return raw(key, std::to_string(v)); }
  JsonObject& add(const std::string& key, bool v) { return raw(key, v ? "true" : "false"); }
  std::string str() const { return "{" + body_ + "}"; }

  static std::string quote(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
      if (c == '"' || c == '\\')
        out += '\\', out += static_cast<char>(c);
      else if (c == '\n')
        out += "\\n";
      else if (c < 0x20)
        out += fmt::format("\\u{:04x}", c);
      else
        out += static_cast<char>(c);
    }
    return out + "\"";
  }

 private:
  JsonObject& raw(const std::string& key, const std::string& value) {
    if (!body_.empty()) body_ += ", ";
    body_ += quote(key) + ": " + value;
    return *this;
  }
  std::string body_;
};

}  // namespace ltrain::io
