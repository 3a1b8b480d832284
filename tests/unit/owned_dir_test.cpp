// io/owned_dir: which directories ltrain may write into. Every node's launcher of a multi-node job
// claims the same run directory on a shared filesystem, so one may look while another is writing
// the marker: the marker's temporary file must not read as a stranger's file.
#include <catch2/catch.hpp>

#include <filesystem>

#include "ltrain/common/errors.h"
#include "ltrain/io/owned_dir.h"
#include "support/process.h"

using Catch::Matchers::Contains;
using ltrain::test::TempDir;
using ltrain::test::writeText;

TEST_CASE("a directory being claimed by another agent is ltrain's, a stranger's file is not",
          "[io]") {
  TempDir dir;
  const std::string run = dir / "run";
  std::filesystem::create_directories(run);
  writeText(run + "/.ltrain.tmp.4242", "{\"ltrain\": \"run\"");  // a marker half written
  CHECK_NOTHROW(ltrain::io::checkOwnable(run, ltrain::io::DirKind::kRun));
  ltrain::io::claimDir(run, ltrain::io::DirKind::kRun);
  CHECK(ltrain::io::hasMarker(run, ltrain::io::DirKind::kRun));

  const std::string other = dir / "other";
  std::filesystem::create_directories(other);
  writeText(other + "/.ltrain.tmp.4242", "");
  writeText(other + "/notes.txt", "mine");
  try {
    ltrain::io::checkOwnable(other, ltrain::io::DirKind::kRun);
    FAIL("a directory with a user's file was accepted");
  } catch (const ltrain::UsageError& e) {
    CHECK_THAT(e.what(), Contains("holds files that ltrain did not write ('notes.txt')"));
  }
  CHECK(ltrain::test::readText(other + "/notes.txt") == "mine");
}
