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

TEST_CASE(
    "overwriting a run removes a sharded checkpoint's own files and keeps a user's beside them",
    "[io]") {
  TempDir dir;
  const std::string run = dir / "run";
  std::filesystem::create_directories(run);
  ltrain::io::claimDir(run, ltrain::io::DirKind::kRun);
  for (const char* step : {"step-00000010.shards", "step-00000020.shards.old"}) {
    const std::string ckpt = run + "/checkpoints/" + step;
    std::filesystem::create_directories(ckpt);
    // ltrain's: the index, the rank files and their atomic writes cut short.
    for (const char* f : {"index.json", "rank-00000-of-00002.safetensors", "index.json.tmp.77",
                          "rank-00001-of-00002.safetensors.tmp.78"})
      writeText(ckpt + "/" + f, "x");
    // the user's: any other name, a *.tmp.N one too
    writeText(ckpt + "/notes.txt", "mine");
    writeText(ckpt + "/data.tmp.123", "mine");
  }
  ltrain::io::removeOwned(run);
  for (const char* step : {"step-00000010.shards", "step-00000020.shards.old"}) {
    const std::string ckpt = run + "/checkpoints/" + step;
    INFO(ckpt);
    CHECK_FALSE(std::filesystem::exists(ckpt + "/index.json"));
    CHECK_FALSE(std::filesystem::exists(ckpt + "/rank-00000-of-00002.safetensors"));
    CHECK_FALSE(std::filesystem::exists(ckpt + "/index.json.tmp.77"));
    CHECK_FALSE(std::filesystem::exists(ckpt + "/rank-00001-of-00002.safetensors.tmp.78"));
    CHECK(ltrain::test::readText(ckpt + "/notes.txt") == "mine");
    CHECK(ltrain::test::readText(ckpt + "/data.tmp.123") == "mine");
  }
}
