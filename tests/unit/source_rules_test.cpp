// Rules on the source tree that review would otherwise have to remember: JSON is read through
// nlohmann-json only, never by a regular expression or by the YAML parser (which mis-reads
// NaN, escapes and numbers that JSON writes); test names CTest can run; which folders may include
// which.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "support/process.h"
#include "test_paths.h"

namespace fs = std::filesystem;

TEST_CASE("no JSON is read by a regex or by the YAML parser") {
  // A YAML::Load of something named like JSON (a metrics line, summary.json, a header), and a
  // regex that matches a JSON key ("key": ...).
  const std::regex yaml_on_json(R"(YAML::Load(File)?\([^)]*(json|line|header))", std::regex::icase);
  const std::regex json_key_regex(R"(std::regex[^;]*\\?"[a-z_]+\\?"\s*:)");
  std::vector<std::string> offenders;
  int files = 0;
  for (const char* top : {"src", "apps", "tests"}) {
    for (const auto& e :
         fs::recursive_directory_iterator(std::string(LTRAIN_SOURCE_DIR) + "/" + top)) {
      const auto ext = e.path().extension();
      if (ext != ".cpp" && ext != ".h") continue;
      if (e.path().filename() == "source_rules_test.cpp") continue;
      ++files;
      const std::string text = ltrain::test::readText(e.path().string());
      if (std::regex_search(text, yaml_on_json) || std::regex_search(text, json_key_regex))
        offenders.push_back(e.path().string());
    }
  }
  CHECK(files > 100);
  INFO("files reading JSON otherwise than through nlohmann-json:");
  for (const auto& o : offenders) INFO(o);
  CHECK(offenders.empty());
}

TEST_CASE("test names survive CTest: no semicolon (a CMake list separator) and no leading '~'") {
  // catch_discover_tests cuts a name at ';' into specs that match nothing (the test then never
  // runs), and Catch reads a leading '~' as "every test but this one" and a leading '-' as an
  // option.
  const std::regex bad(R"(TEST_CASE\(\s*"(~|-|[^"]*;))");
  std::vector<std::string> offenders;
  for (const auto& e :
       fs::recursive_directory_iterator(std::string(LTRAIN_SOURCE_DIR) + "/tests")) {
    if (e.path().extension() != ".cpp") continue;
    if (std::regex_search(ltrain::test::readText(e.path().string()), bad))
      offenders.push_back(e.path().string());
  }
  for (const auto& o : offenders) INFO(o);
  CHECK(offenders.empty());
}

TEST_CASE("each source folder includes only the folders it is built on") {
  // Lower folders never reach up: common/ is the bottom, models/ does not know how it is
  // distributed or trained, inference/ runs models without the trainer (compute/ holds the
  // devices and mixed precision both use).
  const std::map<std::string, std::set<std::string>> allowed{
      {"common", {}},
      {"io", {"common"}},
      {"optim", {"common", "config"}},
      {"config", {"common", "io", "models"}},  // models: the families' torch-free specs
      {"models", {"common", "io", "config"}},
      {"data", {"common", "io", "config"}},
      {"compute", {"common", "config", "cuda", "distributed", "models"}},
      {"inference", {"common", "io", "config", "models", "data", "checkpoint", "compute"}},
  };
  const std::regex include(R"(#include "ltrain/([a-z_]+)/)");
  std::vector<std::string> offenders;
  for (const auto& [folder, below] : allowed) {
    const fs::path dir = fs::path(LTRAIN_SOURCE_DIR) / "src/ltrain" / folder;
    REQUIRE(fs::is_directory(dir));
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (e.path().extension() != ".cpp" && e.path().extension() != ".h") continue;
      const std::string text = ltrain::test::readText(e.path().string());
      for (std::sregex_iterator it(text.begin(), text.end(), include), end; it != end; ++it) {
        const std::string to = (*it)[1];
        if (to != folder && !below.count(to))
          offenders.push_back(e.path().string() + " includes ltrain/" + to + "/");
      }
    }
  }
  for (const auto& o : offenders) INFO(o);
  CHECK(offenders.empty());
}
