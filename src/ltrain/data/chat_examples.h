// data.dataset chat: instruction and chat examples tokenised by scripts/prepare_chat.py with the
// model's own tokenizer and chat template (DIR/train.safetensors, DIR/val.safetensors: tokens,
// a loss mask, each example's offsets). An example is one block of model.block_size: its tokens
// (padded), and as targets the next tokens where the mask learns them and -100 elsewhere (the
// prompt, the padding), which cross-entropy ignores as PyTorch's ignore_index=-100 does: the loss
// is the mean over the learned tokens.
// data.dataset preference: the same files of prompt/chosen/rejected records, the sequences in
// pairs (the prompt and the chosen answer, the prompt and the rejected one), an example a pair.
#pragma once
#include <string>

#include "ltrain/data/dataset.h"

namespace ltrain::data {

// The -100 of PyTorch's and Hugging Face's labels: a target no loss counts.
constexpr int64_t kIgnoredTarget = -100;

// Train and validation splits from data.path (chat examples, or preference pairs for
// data.dataset preference). UsageError naming the file for a missing or
// malformed one, a token outside `vocab` (0: data.path's tokenizer.json's size), an example whose
// mask learns nothing, or one whose first learned token lies beyond `block_size`.
Splits loadChat(const config::DataConfig& cfg, int64_t block_size, int64_t vocab);

// model.init_from a Hugging Face directory: the examples must have been made with its tokenizer
// and chat template (prepare_chat.py copies both into data.path). UsageError naming both files.
void checkChatMatchesModel(const std::string& data_path, const std::string& model_dir);

}  // namespace ltrain::data
