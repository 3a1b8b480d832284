#include "support/chat_models.h"

#include <catch2/catch.hpp>

#include "support/process.h"
#include "test_paths.h"

namespace ltrain::test {

const std::string kHfTools = std::string(LTRAIN_SOURCE_DIR) + "/tests/parity/hf_tools.py";
const std::string kPrepareChat = std::string(LTRAIN_SOURCE_DIR) + "/scripts/prepare_chat.py";
const std::string kFortunes = "/usr/share/games/fortunes/cookie";

void requireRun(const std::vector<std::string>& argv) {
  auto r = runProcess(argv);
  INFO(argv[0] << " " << (argv.size() > 1 ? argv[1] : "") << ":\n" << r.out << r.err);
  REQUIRE(r.exit_code == 0);
}

void makeChatModel(const std::string& dir, const std::string& vocab) {
  requireRun({LTRAIN_PYTHON, kHfTools, "make-llama", dir, "--vocab", "384"});
  requireRun({LTRAIN_PYTHON, kHfTools, "add-chat-tokenizer", dir, vocab, kFortunes});
}

}  // namespace ltrain::test
