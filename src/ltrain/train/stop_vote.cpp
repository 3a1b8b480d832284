#include "ltrain/train/stop_vote.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <thread>

namespace ltrain::train {
namespace {

volatile sig_atomic_t g_pending = 0;
struct sigaction g_old_term, g_old_int;

void onStopSignal(int sig) {
  if (sig == SIGINT && g_pending == SIGINT) {
    // Ctrl-C twice: the user wants out now.
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  if (g_pending == 0) g_pending = sig;
}

}  // namespace

StopSignal::StopSignal() {
  struct sigaction sa {};
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a blocked read or wait goes on; the loop looks at the flag
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

int StopSignal::pending() {
  return g_pending;
}

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
