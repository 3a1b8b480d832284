// Test support: the files a run leaves, read as a user's tools read them (summary.json and
// metrics.jsonl as JSON), and the command line of the small synthetic run that most integration
// tests start from.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ltrain/io/json.h"

namespace ltrain::test {

io::Json readJson(const std::string& path);
// A number from run directory `run`'s summary.json.
double summaryValue(const std::string& run, const char* key);
// The records of a metrics.jsonl, those of one split ("train", "test", "val") when given.
std::vector<io::Json> metricRecords(const std::string& path, const std::string& split = "");
// The training loss of each logged step of a metrics.jsonl (ltrain's or the Python reference's).
std::map<int, double> trainLosses(const std::string& path);

// `ltrain train CONFIG <a small synthetic MLP run> EXTRA... --output-dir OUT`: 256 training and
// 64 test examples of [1, 6, 6], batch 32, one hidden layer of 16, a report every 2 steps. Later
// overrides win, so EXTRA changes any of these.
std::vector<std::string> syntheticRun(const std::string& config, const std::string& out,
                                      const std::vector<std::string>& extra = {});

}  // namespace ltrain::test
