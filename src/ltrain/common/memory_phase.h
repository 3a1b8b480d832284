// Peak resident memory by phase of a run (build, init_from, resume, first step, second step,
// save, evaluate), each process its own, and the phase an allocation failed in: what
// bench/zero_memory.sh measures sharding with, and what an out-of-memory error names.
// A phase resets the kernel's peak (VmHWM, through /proc/self/clear_refs) when it starts, so its
// peak is its own; processPeakRssMb() keeps the peak since the process started across resets.
// When it ends, the heap's free pages go back to the system (allocator.h: giveBackFreedMemory),
// so that what a phase freed does not stay resident through the rest of the run.
// Each phase's end is kept in memoryPhases(); with LTRAIN_MEMORY_LOG=FILE it also appends one JSON
// line to FILE:
//   {"rank": R, "phase": "build", "start_rss_mb": ..., "peak_rss_mb": ..., "end_rss_mb": ...}
#pragma once
#include <string>
#include <vector>

namespace ltrain {

class MemoryPhase {
 public:
  explicit MemoryPhase(std::string name);
  ~MemoryPhase();
  MemoryPhase(const MemoryPhase&) = delete;
  MemoryPhase& operator=(const MemoryPhase&) = delete;

 private:
  std::string name_, outer_;
  double start_rss_mb_ = 0;
  int exceptions_ = 0;
};

// A phase as it ended: its resident memory at the start, its peak and at the end (MiB).
struct PhaseRecord {
  std::string phase;
  double start_rss_mb = 0, peak_rss_mb = 0, end_rss_mb = 0;
};
// This process's phases so far, in the order they ended (summary.json's memory_phases).
std::vector<PhaseRecord> memoryPhases();

// Resident memory now, and the peak since the process started (MiB).
double currentRssMb();
double processPeakRssMb();

// For the message of an exception: where it says that an allocation failed (LibTorch's CPU or
// CUDA allocator, std::bad_alloc), one line naming the phase it failed in, the bytes asked for,
// what was resident and the process's memory limit; empty for any other message.
std::string describeOutOfMemory(const std::string& what);

}  // namespace ltrain
