// JSON through nlohmann-json: every JSON file ltrain writes or reads back (metrics.jsonl,
// summary.json, the torchrun error file, safetensors headers, Hugging Face configs).
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace ltrain::io {

// Keys keep the order they were added in, so summary.json reads as it was written. NaN and
// infinities are written as null, as Python's json module cannot read them otherwise.
using Json = nlohmann::ordered_json;

// The document in `path`. UsageError naming the file when it is missing or not JSON.
Json readJsonFile(const std::string& path);
// `text` parsed, or a discarded value (is_discarded()) when it is not JSON.
Json parseJsonOrDiscard(const std::string& text);
// One line, no trailing newline; invalid UTF-8 is replaced rather than thrown on.
std::string dumpJsonLine(const Json& j);

}  // namespace ltrain::io
