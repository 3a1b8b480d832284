#include "ltrain/train/stop_vote.h"

#include "ltrain/common/stop_signal.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <thread>

namespace ltrain::train {

void StopVote::fill(float* slots) {
  const int sig = StopSignal::pending();
  slots[0] = sig == SIGTERM ? 1.f : 0.f;
  slots[1] = sig == SIGINT ? 1.f : 0.f;
}

namespace {
int decideFrom(const float* sums) {
  return sums[0] > 0 ? SIGTERM : sums[1] > 0 ? SIGINT : 0;
}
}  // namespace

int StopVote::afterStep(const torch::Tensor& sums) {
  if (!sums.defined() || sums.numel() < static_cast<int64_t>(kScalars)) return 0;
  if (!sums.is_cuda()) {
    const auto v = sums.to(torch::kFloat).contiguous();
    return decideFrom(v.data_ptr<float>());
  }
  // Last step's copy: recorded a whole step ago, so polling it costs nothing in practice.
  int vote = 0;
  if (pending_copy_) {
    while (!copied_->query()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    vote = decideFrom(host_.data_ptr<float>());
  }
  if (!host_.defined()) {
    host_ = torch::empty({static_cast<int64_t>(kScalars)},
                         torch::TensorOptions().dtype(torch::kFloat).pinned_memory(true));
    copied_ = std::make_unique<c10::Event>(c10::DeviceType::CUDA);
  }
  host_.copy_(sums.narrow(0, 0, kScalars).to(torch::kFloat), /*non_blocking=*/true);
  const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
  copied_->record(cuda.getStream(sums.device()));
  pending_copy_ = true;
  return vote;
}

}  // namespace ltrain::train
