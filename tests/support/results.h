// Test support: read the "result key=value ..." lines that ddp_worker prints under the launcher,
// and compare the weights two runs ended with.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace ltrain::test {

// rank -> {key -> value} from lines "[rank R] result key=value key=value ...".
std::map<int, std::map<std::string, std::string>> workerResults(const std::string& launcher_out);

// The largest absolute difference between two safetensors files' tensors of the same names (for
// runs that must reach the same weights); throws when their names differ.
double maxWeightDiff(const std::string& a, const std::string& b);

}  // namespace ltrain::test
