// Peak resident memory by phase of a run (build, init_from, resume, first step, second step,
// save, evaluate), each process its own, and the phase an allocation failed in: what
// bench/zero_memory.sh measures sharding with, and what an out-of-memory error names.
// A phase resets the kernel's peak (VmHWM, through /proc/self/clear_refs) when it starts, so its
// peak is its own; processPeakRssMb() keeps the peak since the process started across resets.
// When it starts and when it ends, the heap's free pages go back to the system (allocator.h:
// giveBackFreedMemory), so that what a phase freed does not stay resident through the rest of the
// run, and what came before it (a step that was no phase) does not count in its peak.
// Each phase's end is kept in memoryPhases(); with LTRAIN_MEMORY_LOG=FILE it also appends one JSON
// line to FILE:
//   {"rank": R, "phase": "build", "start_rss_mb": ..., "peak_rss_mb": ..., "end_rss_mb": ...,
//    "categories_mb": {...}}
// categories_mb splits the phase's peak by what held it (CPU runs; tensor_memory.h counts):
//   libraries     resident before the first phase: LibTorch, threads, the data; the files'
//                 pages resident since, as at the phase's start (the libraries' code, paged in
//                 as kernels first run); and what a library holds for the whole run from when it
//                 starts (addLibraryBytes)
//   parameters, gradients, optimizer_state, buffers
//                 what the run keeps (ZeRO: this rank's slices), as at the phase's end; ZeRO's
//                 reduced gradient slices, which exist only within a step, as at the tensors' peak
//   gathered_units, gradient_buckets
//                 ZeRO-3's units gathered and the buckets being reduced, at the tensors' peak
//   activations   the rest of the tensors at their peak: activations and operators' temporaries
//   allocator_slack
//                 the rest of the peak: freed memory the heap kept, or touched by no tensor
// They add up to peak_rss_mb (the tensors' and the resident peak may fall at different moments,
// so a category may read a little low and the slack a little high).
#pragma once
#include <cstdint>
#include <functional>
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
  double start_rss_mb_ = 0, start_file_mb_ = 0;
  int exceptions_ = 0;
};

// A phase as it ended: its resident memory at the start, its peak and at the end (MiB).
struct PhaseRecord {
  std::string phase;
  double start_rss_mb = 0, peak_rss_mb = 0, end_rss_mb = 0;
};
// What a run keeps from step to step, in bytes: the trainer's parallel plan says, once it exists.
struct KeptMemory {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, buffers = 0;
};
// `kept` (null: none) is asked at each phase's end, when LTRAIN_MEMORY_LOG is set; whoever sets it
// sets null before what it reads goes.
void setKeptMemory(std::function<KeptMemory()> kept);

// Memory a library keeps resident from now on, whatever the model (the shared-memory
// collectives' segment, populated when the process group starts): counted with libraries.
void addLibraryBytes(int64_t bytes);

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
