// A DDP worker for the multi-process tests, started by `ltrain launch`. It wraps a small model in
// the BucketReducer, runs one synchronised backward and prints one "result ..." line with
// what the test checks: the largest difference between DDP's gradients and the plain average of
// every rank's own gradients, bucket and allreduce counts, and launch/backward-end timestamps.
//   ddp_worker MODE   (MODE: basic | unused | unused_error | overlap | bf16 | accum | reversed
//                      | shm | shm_dead | shm_mismatch | shm_op_mismatch | shm_collide | shm_off)
// reversed: the layers run in the reverse of their registration order, and the reducer rebuilds
// its buckets after the first step; a second step follows, and the buckets' parameters before
// and after are printed.
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>

#include "ltrain/config/schema.h"
#include "ltrain/cuda/plugin.h"
#include "ltrain/distributed/bucket_reducer.h"
#include "ltrain/distributed/process_group.h"
#include "ltrain/distributed/runtime.h"

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl(int64_t width, int64_t depth, bool with_unused) {
    for (int64_t i = 0; i < depth; ++i)
      layers.push_back(register_module(fmt::format("fc{}", i), torch::nn::Linear(width, width)));
    head = register_module("head", torch::nn::Linear(width, 4));
    if (with_unused) extra = register_module("extra", torch::nn::Linear(width, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    if (reversed)
      for (auto it = layers.rbegin(); it != layers.rend(); ++it) x = torch::relu((*it)->forward(x));
    else
      for (auto& l : layers) x = torch::relu(l->forward(x));
    return head->forward(x);
  }
  std::vector<torch::nn::Linear> layers;
  torch::nn::Linear head{nullptr}, extra{nullptr};
  bool reversed = false;
};
TORCH_MODULE(Net);

// shm, shm_off: all-reduces, reduce-scatters and all-gathers of several sizes and dtypes through
// ProcessGroup (shared memory where it is on) against Gloo's of the same tensors. The values are
// small integers, so every order of summation gives the same floats: the difference must be exactly
// 0. shm_dead: rank 1 leaves right after connecting; the others' all-reduce must fail naming it.
// shm_mismatch: rank 1 all-reduces a longer tensor; every rank must fail saying so.
// shm_op_mismatch: rank 0 all-gathers where rank 1 reduce-scatters; both must fail saying so.
// shm_collide: the segment's name is taken by a user's file, which must survive.
int shmCollectives(ltrain::distributed::ProcessGroup& comm, const std::string& mode) {
  const int64_t rank = comm.runtime().rank;
  if (mode == "shm_dead" && rank == 1) return 0;
  if (mode == "shm_collide") {
    // A user's file already holds the name rank 0 is told to use: joining must fail on every
    // rank, and the file must still be there, unchanged (only a name ltrain created is removed).
    const std::string name = fmt::format("/ltrain-user-{}", getpid());
    const std::string path = "/dev/shm" + name, text = "the user's notes\n";
    if (rank == 0) std::ofstream(path) << text;
    std::string why_not;
    auto shm = ltrain::distributed::SharedMemoryCollectives::join(
        *comm.store(), rank, comm.runtime().world_size, comm.timeout(), &why_not, name);
    std::string kept;
    if (rank == 0) {
      std::ifstream in(path);
      kept.assign(std::istreambuf_iterator<char>(in), {});
      std::remove(path.c_str());  // the test's own file
    }
    std::cout << fmt::format(
                     "result rank={} joined={} user_file_kept={} why_not={}", rank, shm ? 1 : 0,
                     rank == 0 ? (kept == text ? 1 : 0) : 1,
                     why_not.find("cannot create") != std::string::npos ? "create" : "other")
              << std::endl;
    return 0;
  }
  if (mode == "shm_mismatch" || mode == "shm_op_mismatch") {
    // shm_mismatch: rank 1 reduces one element more than the others; shm_op_mismatch: rank 0
    // all-gathers where rank 1 reduce-scatters (which proves that both go through the segment).
    std::vector<at::Tensor> io{torch::ones({1000 + (rank == 1 && mode == "shm_mismatch" ? 1 : 0)})};
    try {
      const int64_t world = comm.runtime().world_size;
      if (mode == "shm_op_mismatch" && rank == 0) {
        auto out = torch::empty({1000 * world});
        comm.wait(comm.allgatherInto(out, io[0]));
      } else if (mode == "shm_op_mismatch") {
        auto in = torch::ones({1000 * world});
        comm.wait(comm.reduceScatterInto(io[0], in));
      } else {
        comm.wait(comm.allreduce(io));
      }
    } catch (const std::exception& e) {
      std::cerr << "ddp_worker: error: " << e.what() << "\n";
      return 1;
    }
    return 0;
  }
  double max_diff = 0;
  try {
    for (auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong}) {
      // 1 element, one chunk split unevenly, and more than one chunk (2.5 M floats = 10 MB).
      for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{2'500'003}}) {
        auto t = (torch::arange(n, torch::kLong).remainder(7) + 100 * (rank + 1)).to(dtype);
        std::vector<at::Tensor> ours{t.clone()}, gloos{t.clone()};
        comm.wait(comm.allreduce(ours));
        comm.wait(comm.backend()->allreduce(gloos));
        max_diff = std::max(
            max_diff,
            (ours[0].to(torch::kDouble) - gloos[0].to(torch::kDouble)).abs().max().item<double>());
      }
    }
    // Reduce-scatter and all-gather (ZeRO-3's), against Gloo's own: a part of 1 element, one
    // chunk's, and several chunks' (2.5 M elements a rank); all-gather of bf16 too.
    const int64_t world = comm.runtime().world_size;
    auto differ = [](const torch::Tensor& a, const torch::Tensor& b) {
      return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
    };
    for (auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong, torch::kBFloat16})
      for (int64_t part : {int64_t{1}, int64_t{1001}, int64_t{2'500'003}}) {
        auto in =
            (torch::arange(part * world, torch::kLong).remainder(5) + 10 * (rank + 1)).to(dtype);
        auto mine = in.narrow(0, rank * part, part).clone();
        auto ours = torch::empty({part * world}, dtype), gloos = torch::empty_like(ours);
        comm.wait(comm.allgatherInto(ours, mine));
        comm.wait(comm.backend()->_allgather_base(gloos, mine));
        max_diff = std::max(max_diff, differ(ours, gloos));
        if (dtype == torch::kBFloat16) continue;  // Gloo's reduce-scatter serves bf16
        auto summed = torch::empty({part}, dtype), gloo_summed = torch::empty_like(summed);
        auto in_gloo = in.clone();
        comm.wait(comm.reduceScatterInto(summed, in));
        comm.wait(comm.backend()->_reduce_scatter_base(gloo_summed, in_gloo));
        max_diff = std::max(max_diff, differ(summed, gloo_summed));
      }
  } catch (const std::exception& e) {
    std::cerr << "ddp_worker: error: " << e.what() << "\n";
    return 1;
  }
  std::cout << fmt::format("result rank={} shm={} max_diff={}", rank, comm.sharedMemory() ? 1 : 0,
                           max_diff)
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "basic";
  ltrain::cuda::loadIfPresent();
  if (mode == "cuda_hooks") {
    // Whether loading libltrain_cuda.so registered LibTorch's CUDA backend with its CPU library:
    // true on a machine without a GPU too, once the load worked
    // (tests/integration/cuda_plugin_test).
    std::printf("cuda_hooks cudart=%d guard=%d\n", at::detail::getCUDAHooks().hasCUDART() ? 1 : 0,
                c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA) ? 1 : 0);
    return 0;
  }
  auto rt = ltrain::distributed::runtimeFromEnv();
  auto dc = ltrain::config::defaults().dist;
  dc.timeout_s = 30;
  // LTRAIN_TEST_DEVICE=cuda: the model on cuda:<local rank>, reduced with NCCL.
  const char* dev = std::getenv("LTRAIN_TEST_DEVICE");
  const torch::Device device = dev && std::string(dev) == "cuda"
                                   ? torch::Device(torch::kCUDA, static_cast<int>(rt.local_rank))
                                   : torch::Device(torch::kCPU);
  dc.shm_allreduce = mode != "shm_off" && mode != "shm_collide";
  auto comm = ltrain::distributed::ProcessGroup::connect(rt, dc, device);
  if (mode.rfind("shm", 0) == 0) return shmCollectives(*comm, mode);

  const bool overlap = mode == "overlap";
  // overlap: 6 x 1024^2 floats = 24 MiB of gradients; otherwise small, with a small bucket cap.
  const int64_t width = overlap ? 1024 : 64, depth = overlap ? 6 : 4;
  torch::manual_seed(1000 + rt.rank);  // different on each rank: DDP must broadcast rank 0's
  Net net(width, depth, mode == "unused" || mode == "unused_error");
  net->to(device);
  net->reversed = mode == "reversed";

  ltrain::distributed::ReducerOptions o;
  o.bucket_cap_mb = overlap ? 4.0 : 0.01;
  o.first_bucket_mb = overlap ? 1.0 : 0.01;
  o.find_unused_parameters = mode == "unused";
  o.rebuild_buckets = mode == "reversed";
  if (mode == "bf16") o.collective = ltrain::distributed::allReduceBuckets(*comm, torch::kBFloat16);
  ltrain::distributed::BucketReducer ddp(ltrain::distributed::ReducedTensors::of(*net), *comm, o);

  // Parameters must now be rank 0's everywhere.
  double psum = 0;
  for (auto& p : net->parameters()) psum += p.sum().item<double>();
  const double psum_all = comm->allreduceSum({psum})[0];
  const bool broadcast_ok =
      std::abs(psum_all - rt.world_size * psum) < 1e-6 * std::max(1.0, std::abs(psum_all));

  torch::manual_seed(2000 + rt.rank);  // each rank its own data
  const int micro = mode == "accum" ? 2 : 1;
  std::vector<torch::Tensor> xs, ys;
  for (int i = 0; i < micro; ++i)
    xs.push_back(torch::randn({8, width}).to(device)),
        ys.push_back(torch::randint(4, {8}).to(device));

  // Expected: each rank's own gradient (summed over micro-batches), averaged over ranks by a plain
  // allreduce.
  std::vector<torch::Tensor> local;
  for (auto& p : net->parameters()) local.push_back(torch::zeros_like(p));
  for (int i = 0; i < micro; ++i) {
    auto loss = torch::nn::functional::cross_entropy(net->forward(xs[i]), ys[i]);
    auto grads =
        torch::autograd::grad({loss}, net->parameters(), {}, false, false, /*allow_unused=*/true);
    for (size_t j = 0; j < grads.size(); ++j)
      if (grads[j].defined()) local[j] += grads[j];
  }
  std::vector<torch::Tensor> flat;
  for (auto& g : local) flat.push_back(g.reshape(-1));
  std::vector<at::Tensor> io{torch::cat(flat)};
  comm->backend()->allreduce(io)->wait();
  auto expected = io[0] / rt.world_size;

  auto bucketOrder = [&] {  // every bucket's parameters in order, buckets separated by '|'
    std::string out;
    for (const auto& names : ddp.bucketParameterNames()) {
      if (!out.empty()) out += "|";
      for (size_t i = 0; i < names.size(); ++i) out += (i ? "," : "") + names[i];
    }
    return out;
  };
  const std::string order_before = bucketOrder();
  double max_diff = 0;
  // reversed: a second step over the rebuilt buckets (no optimizer step, so the same gradients).
  for (int step = 0; step < (mode == "reversed" ? 2 : 1); ++step) {
    try {
      for (auto& p : net->parameters()) p.mutable_grad().reset();
      for (int i = 0; i < micro; ++i) {
        ddp.prepareBackward(i == micro - 1);
        torch::nn::functional::cross_entropy(net->forward(xs[i]), ys[i]).backward();
      }
      ddp.finishBackward();
    } catch (const std::exception& e) {
      std::cerr << "ddp_worker: error: " << e.what() << "\n";
      return 1;
    }
    std::vector<torch::Tensor> got;
    for (auto& p : net->parameters())
      got.push_back(p.grad().defined() ? p.grad().reshape(-1)
                                       : torch::zeros({p.numel()}, p.options()));
    max_diff = std::max(max_diff, (torch::cat(got) - expected).abs().max().item<double>());
  }
  double unused_norm = 0;
  if (net->extra)
    unused_norm =
        net->extra->weight.grad().defined() ? net->extra->weight.grad().norm().item<double>() : -1;
  const auto& st = ddp.lastStep();
  std::cout << fmt::format(
                   "result rank={} device={} backend={} broadcast_ok={} max_diff={:.3g} buckets={} "
                   "allreduce_calls={} "
                   "first_launch_s={:.6f} "
                   "backward_end_s={:.6f} unused_grad_norm={} order_before={} order_after={}",
                   rt.rank, device.str(), comm->backendName(), broadcast_ok, max_diff,
                   ddp.bucketCount(), st.collectives, st.first_launch_s, st.backward_end_s,
                   unused_norm, order_before, bucketOrder())
            << std::endl;
  return 0;
}
