// Batches for one epoch, built ahead of the training step by worker threads: each batch is a
// gather by index into one tensor, converted and normalised there, never stacked per example.
#pragma once
#include <torch/types.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ltrain/data/augment.h"
#include "ltrain/data/dataset.h"

namespace ltrain::data {

struct Batch {
  torch::Tensor inputs;   // float32, normalised
  torch::Tensor targets;  // int64
};

// Gathers the examples at `indices` into a normalised float batch, augmented as `augment` says
// (batch `batch_index` of the epoch); with `pin`, in page-locked memory so that the copy to the
// GPU can be asynchronous.
Batch makeBatch(const Dataset& ds, const int64_t* indices, int64_t count, bool pin = false,
                const Augment& augment = {}, int64_t batch_index = 0);

class Loader {
 public:
  // Yields batches [first_batch, numBatches()) of `indices` in order. num_workers == 0 builds each
  // batch on the calling thread; otherwise batch b is built by worker b % num_workers.
  // `epoch_batch_offset`: the epoch's batches this rank took before `indices` begin (a resumed
  // epoch dealt out anew), so that batch b is augmented as the epoch's batch offset + b.
  Loader(const Dataset& ds, std::vector<int64_t> indices, int64_t batch_size, bool drop_last,
         int64_t num_workers, int64_t prefetch, int64_t first_batch = 0, bool pin_memory = false,
         Augment augment = {}, int64_t epoch_batch_offset = 0);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t numBatches() const { return num_batches_; }
  bool next(Batch& out);  // false at the end of the epoch

 private:
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Batch> ready;
    std::exception_ptr error;  // the batch after `ready` failed (an image that does not decode)
    std::thread thread;
  };
  void work(size_t w);
  Batch build(int64_t b) const;

  const Dataset& ds_;
  std::vector<int64_t> indices_;
  int64_t batch_size_, num_batches_, prefetch_, next_batch_, epoch_batch_offset_;
  bool pin_;
  Augment augment_;
  std::vector<std::unique_ptr<Worker>> workers_;
  bool stop_ = false;  // guarded by each worker's mutex when read there
};

// Number of batches an epoch of `n` examples gives.
inline int64_t batchesPerEpoch(int64_t n, int64_t batch_size, bool drop_last) {
  return drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
}

}  // namespace ltrain::data
