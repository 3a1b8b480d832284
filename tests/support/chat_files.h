// Test support: chat examples written as scripts/prepare_chat.py writes them (tokens, a loss mask,
// offsets; format ltrain-chat), without a tokenizer: for runs that set model.vocab_size.
#pragma once
#include <cstdint>
#include <string>

namespace ltrain::test {

// `count` examples of 10 tokens in `file`: a prompt of 4 random tokens (1..49, from `seed`) the
// mask leaves out, then the same answer of 6 (7..12) to learn. A vocabulary of 50 holds them.
void writeChatExamples(const std::string& file, int64_t count, int64_t seed);

}  // namespace ltrain::test
