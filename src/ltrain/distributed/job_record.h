// The job's identity in its rendezvous store, one format for its writer and its readers: node 0's
// agent (launch/launcher.cpp) records the job's --rdzv-id, node count and world size; the other
// agents check theirs against it, and every worker its TORCHELASTIC_RUN_ID and WORLD_SIZE
// (process_group.cpp). Agents and ranks take their node rank or rank by a claim, which names the
// process that already holds it.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace ltrain::distributed {

struct JobRecord {
  std::string id;
  int64_t nodes = 0, world_size = 0;
};

void writeJobRecord(c10d::Store& store, const JobRecord& job);
// The record, or none where no ltrain agent wrote one (torchrun's store, rank 0's own). With
// `wait`, waits for it (the store's timeout): node 0's agent writes it as it starts.
std::optional<JobRecord> readJobRecord(c10d::Store& store, bool wait = false);

// Takes `key` for this process ("host (pid N)", compare-and-set): "" when it holds it now, else
// the name of the process that does.
std::string claim(c10d::Store& store, const std::string& key);

}  // namespace ltrain::distributed
