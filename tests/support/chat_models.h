// Test support for the fine-tuning tests: the small transformers models with a chat tokenizer
// that tests/parity/hf_tools.py makes locally, and the scripts they run.
#pragma once
#include <string>
#include <vector>

namespace ltrain::test {

extern const std::string kHfTools;      // tests/parity/hf_tools.py
extern const std::string kPrepareChat;  // scripts/prepare_chat.py
extern const std::string kFortunes;     // the texts the examples are made of

// Runs `argv` to its end: a failed REQUIRE, with the command's output, unless it exits 0.
void requireRun(const std::vector<std::string>& argv);

// A small transformers Llama (vocabulary 384) with a chat tokenizer of its own (`vocab` tokens and
// the template's special tokens) in `dir`.
void makeChatModel(const std::string& dir, const std::string& vocab = "380");

}  // namespace ltrain::test
