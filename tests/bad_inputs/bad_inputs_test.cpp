// The bad-input promise, one case file per mistake (tests/bad_inputs/cases/*.yaml, format in
// tests/bad_inputs/README.md): every wrong config, missing or corrupt file, port in use or
// conflicting option exits 2 (1 only for failures during training) with exactly one line on stderr,
// `ltrain: error: <message>`, and leaves an existing run directory exactly as it was.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "support/process.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using ltrain::test::readText;
using ltrain::test::runLtrain;
using ltrain::test::TempDir;
using ltrain::test::writeText;

namespace {

using Fingerprint = std::map<std::string, std::string>;  // relative path -> size and content hash

Fingerprint fingerprint(const std::string& root) {
  Fingerprint out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string rel = fs::relative(e.path(), root).string();
    if (e.is_directory()) {
      out[rel + "/"] = "directory";  // an added or removed empty directory counts too
    } else {
      const std::string bytes = readText(e.path());
      out[rel] = std::to_string(bytes.size()) + " bytes, hash " +
                 std::to_string(std::hash<std::string>{}(bytes));
    }
  }
  return out;
}

// A finished run ({run}) that every case must leave untouched.
struct FinishedRun {
  TempDir dir;
  std::string path = dir / "run";
  Fingerprint print;
};

std::unique_ptr<FinishedRun> makeFinishedRun() {
  auto run = std::make_unique<FinishedRun>();
  writeText(run->dir / "tiny.yaml",
            "name: tiny\n"
            "data: {dataset: synthetic, synthetic_shape: [1, 6, 6], synthetic_train_samples: 64,\n"
            "       synthetic_test_samples: 32, batch_size: 16}\n"
            "model: {hidden: [8]}\n");
  auto r = runLtrain({"train", run->dir / "tiny.yaml", "--output-dir", run->path});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  REQUIRE(fs::exists(run->path + "/checkpoints/step-00000004.pt"));  // cases name this file
  run->print = fingerprint(run->path);
  return run;
}

// A loopback port that stays in use (bound and listening) while this object lives.
class HeldPort {
 public:
  HeldPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0);
    REQUIRE(listen(fd_, 4) == 0);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~HeldPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_, port_ = 0;
};

std::string substitute(std::string s, const std::map<std::string, std::string>& vars) {
  for (const auto& [key, value] : vars)
    for (size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + value.size()))
      s.replace(at, key.size(), value);
  return s;
}

// Binary files are written as {hex: "1f8b 0800 ..."}: YAML strings cannot hold bytes >= 0x80.
std::string fileContent(const YAML::Node& n, const std::map<std::string, std::string>& vars) {
  if (n.IsScalar()) return substitute(n.as<std::string>(), vars);
  std::string hex, bytes;
  for (char c : n["hex"].as<std::string>())
    if (!std::isspace(static_cast<unsigned char>(c))) hex += c;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return bytes;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// `train CONFIG OVERRIDES... [--flags]` as `config CONFIG OVERRIDES...`.
std::vector<std::string> asConfigCommand(const std::vector<std::string>& train) {
  std::vector<std::string> out{"config"};
  for (size_t i = 1; i < train.size(); ++i) {
    if (train[i] == "--output-dir" || train[i] == "--nproc-per-node") {
      ++i;
      continue;
    }
    if (train[i].rfind("--", 0) == 0) continue;
    out.push_back(train[i]);
  }
  return out;
}

std::vector<fs::path> caseFiles() {
  std::vector<fs::path> out;
  for (const auto& e :
       fs::directory_iterator(std::string(LTRAIN_SOURCE_DIR) + "/tests/bad_inputs/cases"))
    if (e.path().extension() == ".yaml") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("every bad input exits 2 with one error line and leaves existing runs alone") {
  static std::unique_ptr<FinishedRun> run = makeFinishedRun();
  const auto files = caseFiles();
  REQUIRE(files.size() >= 40);
  for (const auto& file : files) {
    DYNAMIC_SECTION(file.filename().string()) {
      const YAML::Node c = YAML::LoadFile(file.string());
      INFO(file.filename().string() << ": " << c["what"].as<std::string>(""));
      REQUIRE(c["args"].IsSequence());
      TempDir dir;
      std::optional<HeldPort> port;
      std::map<std::string, std::string> vars{
          {"{dir}", dir.path()}, {"{run}", run->path}, {"{src}", LTRAIN_SOURCE_DIR}};
      if (YAML::Dump(c).find("{port}") != std::string::npos) {
        port.emplace();
        vars["{port}"] = std::to_string(port->port());
      }
      std::map<std::string, std::string> written;  // the user's files: none may change
      for (const auto& f : c["files"]) {
        const fs::path path = dir / f.first.as<std::string>();
        fs::create_directories(path.parent_path());
        written[path.string()] = fileContent(f.second, vars);
        writeText(path, written[path.string()]);
      }
      std::vector<std::string> args;
      for (const auto& a : c["args"]) args.push_back(substitute(a.as<std::string>(), vars));
      std::map<std::string, std::string> env;
      for (const auto& e : c["env"])
        env[e.first.as<std::string>()] = substitute(e.second.as<std::string>(), vars);

      const auto r = runLtrain(args, env);
      INFO("exit code " << r.exit_code << "\nstderr:\n" << r.err << "stdout:\n" << r.out);
      if (fingerprint(run->path) != run->print) {
        FAIL_CHECK("the finished run " << run->path << " was modified");
        run = makeFinishedRun();  // so that the cases after this one are judged on their own
      }
      CHECK(r.exit_code == c["exit"].as<int>());
      for (const auto& [path, content] : written) {
        INFO("the case's own file " << path);
        REQUIRE(fs::exists(path));
        CHECK(ltrain::test::readText(path) == content);
      }
      // Exactly one line on stderr (log lines go to stdout), and it is the error: no launcher
      // report around it, no backtrace, no "terminate called".
      const auto err = lines(r.err);
      REQUIRE(err.size() == 1);
      REQUIRE(err[0].rfind("ltrain: error: ", 0) == 0);
      CHECK_THAT(err[0], Contains(substitute(c["message"].as<std::string>(), vars)));
      for (const auto& also : c["also"])
        CHECK_THAT(err[0], Contains(substitute(also.as<std::string>(), vars)));
      // A cross-option rule: `ltrain config` on the same config and overrides says the same.
      if (c["config_too"] && c["config_too"].as<bool>()) {
        const auto cr = runLtrain(asConfigCommand(args), env);
        INFO("ltrain config: exit code " << cr.exit_code << "\nstderr:\n" << cr.err);
        CHECK(cr.exit_code == 2);
        CHECK(lines(cr.err) == err);
      }
    }
  }
}
