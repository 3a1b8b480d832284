#include "ltrain/distributed/job_record.h"

#include <fmt/format.h>
#include <unistd.h>

#include <sstream>

namespace ltrain::distributed {
namespace {

constexpr const char* kKey = "/agents/job";  // "<id> <nodes> <world size>"

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

}  // namespace

void writeJobRecord(c10d::Store& store, const JobRecord& job) {
  store.set(kKey, bytes(fmt::format("{} {} {}", job.id, job.nodes, job.world_size)));
}

std::optional<JobRecord> readJobRecord(c10d::Store& store, bool wait) {
  if (!wait && !store.check({kKey})) return std::nullopt;
  const auto v = store.get(kKey);
  std::istringstream in(std::string(v.begin(), v.end()));
  JobRecord job;
  in >> job.id >> job.nodes >> job.world_size;
  return job;
}

std::string claim(c10d::Store& store, const std::string& key) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const auto me = bytes(fmt::format("{} (pid {})", host, ::getpid()));
  const auto holder = store.compareSet(key, {}, me);
  return holder == me ? "" : std::string(holder.begin(), holder.end());
}

}  // namespace ltrain::distributed
