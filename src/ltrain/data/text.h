// Language-modelling data from any text file: tokens are its characters (UTF-8 code points, the
// vocabulary being the characters the file holds, in code-point order) or its bytes; the file's
// end (data.val_fraction) is the validation split. Each example is a block of block_size tokens
// and its targets the same block shifted by one token. Training blocks start every block_size
// tokens from an offset drawn per epoch (so that an epoch's blocks cut the text in other places
// than the last one's), and the distributed sampler deals them out per rank and epoch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ltrain/data/dataset.h"

namespace ltrain::data {

struct Vocabulary {
  bool bytes = false;           // byte-level: token = byte value
  std::vector<char32_t> chars;  // char-level: token i is chars[i]
  int64_t size() const { return bytes ? 256 : static_cast<int64_t>(chars.size()); }
};

// The file's tokens under `tokenizer`, and the vocabulary that maps them.
// UsageError naming the file and byte offset for invalid UTF-8 under "char".
std::vector<int64_t> tokenize(const std::string& text, config::Tokenizer tokenizer,
                              Vocabulary& vocab, const std::string& path);

// Train and validation splits of `path`: inputs and targets [N, block_size] int64 (views of one
// token stream), num_classes the vocabulary size (`vocab_size` when larger: padding, as nanoGPT
// pads GPT-2's). UsageError for a missing or unreadable file, or one too short to give each split
// a block.
Splits loadText(const std::string& path, config::Tokenizer tokenizer, double val_fraction,
                int64_t block_size, int64_t vocab_size = 0);

// The offset in [0, block_size) of epoch `epoch`'s training blocks: the same on every rank.
int64_t blockOffset(uint64_t seed, int64_t epoch, int64_t block_size);
// Re-cuts `ds` (a text split) into blocks starting at `offset`. The number of blocks does not
// depend on the offset, so an epoch has the same number of steps whatever it is.
void shiftBlocks(Dataset& ds, int64_t offset);

}  // namespace ltrain::data
