// Test support: read the "result key=value ..." lines that ddp_worker prints under the launcher,
// and the final weights of a run from its newest checkpoint.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace ltrain::test {

// rank -> {key -> value} from lines "[rank R] result key=value key=value ...".
std::map<int, std::map<std::string, std::string>> workerResults(const std::string& launcher_out);

}  // namespace ltrain::test
