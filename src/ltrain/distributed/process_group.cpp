#include "ltrain/distributed/process_group.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <thread>

#include "ltrain/common/errors.h"
#include "ltrain/common/stop_signal.h"
#include "ltrain/cuda/plugin.h"
#include "ltrain/distributed/job_record.h"
#include "ltrain/distributed/sockets.h"
#include "ltrain/distributed/store_sockets.h"
#include "ltrain/io/error_report.h"

namespace ltrain::distributed {
namespace {

using Ms = std::chrono::milliseconds;

std::string firstLine(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

// Where ltrain's launcher hosts the store, its agent wrote the job's record there (launcher.cpp:
// "<id> <nodes> <world size>"). Only its workers, started with that id and world size, belong to
// the job: a process started by hand on the job's port, with a copied environment or another
// job's, is refused here before it writes anything.
void checkJob(c10d::Store& store, const Runtime& rt, const std::string& where) {
  const auto job = readJobRecord(store);
  if (!job) return;  // another launcher's store, or rank 0's
  const char* id = rt.agent_store ? std::getenv("TORCHELASTIC_RUN_ID") : nullptr;
  if (!id || job->id != id || job->world_size != rt.world_size)
    throw UsageError(fmt::format(
        "this process (RANK={} WORLD_SIZE={}{}) is not a member of the job at {} (ltrain launch's "
        "job {}, world size {}): not joining it, and nothing written",
        rt.rank, rt.world_size, id ? fmt::format(", job {}", id) : "", where, job->id,
        job->world_size));
}

// Each rank of a job takes its rank in the store once, with the world size: a second process
// with the same RANK, or one with another WORLD_SIZE, is refused by name before it writes
// anything, and the job's own ranks do not notice it.
void claimRank(c10d::Store& store, const Runtime& rt, const std::string& where) {
  const std::string world = std::to_string(rt.world_size);
  const auto agreed =
      store.compareSet("world_size", {}, std::vector<uint8_t>(world.begin(), world.end()));
  if (std::string(agreed.begin(), agreed.end()) != world)
    throw UsageError(fmt::format(
        "WORLD_SIZE={} (rank {}) does not match the job at {}, whose world size is {}: not joining "
        "it, and nothing written",
        rt.world_size, rt.rank, where, std::string(agreed.begin(), agreed.end())));
  const std::string holder = claim(store, fmt::format("member/{}", rt.rank));
  if (!holder.empty())
    throw UsageError(fmt::format(
        "rank {} of the job at {} is already running on {}: this process is a second rank {}, "
        "not joining it, and nothing written",
        rt.rank, where, holder, rt.rank));
}

// A connection to the job's store; `timeout` bounds the connect and each wait, `io_deadline`
// every socket read and write (store_sockets.h): a host cut off from the store fails in time.
c10::intrusive_ptr<c10d::Store> openStore(const Runtime& rt, Ms timeout, Ms io_deadline,
                                          bool may_host) {
  const std::string where = fmt::format("{}:{}", rt.master_addr, rt.master_port);
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(rt.master_port);
  o.isServer = may_host && !rt.agent_store && rt.rank == 0;
  o.numWorkers = std::nullopt;  // our own barrier below names the ranks that never arrive
  o.waitWorkers = false;
  o.timeout = timeout;
  // Listening on the master address only (loopback unless the job spans nodes), not on every
  // interface as c10d would.
  if (o.isServer)
    o.masterListenFd =
        listenOn(rt.master_addr, rt.master_port, rt.world_size > rt.local_world_size);
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = connectWithDeadline(rt.master_addr, o, io_deadline);
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    if (o.isServer && (msg.find("EADDRINUSE") != std::string::npos ||
                       msg.find("already in use") != std::string::npos))
      throw UsageError(fmt::format(
          "{} is already in use: the rendezvous store cannot listen there (choose another "
          "--master-port or MASTER_PORT, or 0 for a free one)",
          where));
    throw std::runtime_error(
        fmt::format("rank {} cannot reach the rendezvous store at {} within {} s: {}", rt.rank,
                    where, timeout.count() / 1000, firstLine(msg)));
  }
  if (may_host) checkJob(*store, rt, where);
  // As torchrun's workers do with the agent's store: keys of each attempt stay apart.
  if (rt.agent_store)
    store = c10::make_intrusive<c10d::PrefixStore>(
        fmt::format("/worker/attempt_{}", rt.restart_count), store);
  return c10::make_intrusive<c10d::PrefixStore>("ltrain", store);
}

}  // namespace

std::string chooseBackend(config::Backend configured, c10::Device device) {
  if (configured == config::Backend::kNccl && !device.is_cuda())
    throw UsageError(
        "dist.backend=nccl needs CUDA devices and none is available here; use gloo or auto");
  if (configured == config::Backend::kAuto) return device.is_cuda() ? "nccl" : "gloo";
  return config::toString(configured);
}

std::shared_ptr<ProcessGroup> ProcessGroup::connect(const Runtime& rt,
                                                    const config::DistConfig& cfg,
                                                    c10::Device device) {
  auto c = std::make_shared<ProcessGroup>();
  c->rt_ = rt;
  c->device_ = device;
  c->timeout_ = Ms(cfg.timeout_s * 1000);
  c->backend_name_ = chooseBackend(cfg.backend, device);
  // Reads past dist.timeout_s (waits poll for at most that long first) mean a lost host.
  c->store_ = openStore(rt, c->timeout_, c->timeout_ + Ms(5000), true);
  claimRank(*c->store_, rt, fmt::format("{}:{}", rt.master_addr, rt.master_port));
  c->barrier("rendezvous");
  // The watchdog's own connection: its heartbeat must not queue behind a blocking wait.
  // A short store timeout for it: a stopped store host must not stall the heartbeat for the
  // whole dist.timeout_s.
  const Ms beat_timeout = std::max(Ms(1000), 2 * Watchdog::periodFor(c->timeout_));
  c->before_hang_exit_ = std::make_shared<std::function<void(const std::string&)>>();
  c->watchdog_ = std::make_shared<Watchdog>(
      [rt, beat_timeout] { return openStore(rt, beat_timeout, beat_timeout, false); },
      fmt::format("{}:{}", rt.master_addr, rt.master_port), rt.rank, rt.world_size, c->timeout_,
      [hook = c->before_hang_exit_](const std::string& m) {
        if (*hook) (*hook)(m);  // summary.json says failed, and why
        reportError(m);
        std::_Exit(1);  // the launcher ends the rest
      });

  c->backend_ = c->makeBackend("pg", device);
  if (cfg.shm_allreduce && c->backend_name_ == "gloo" && device.is_cpu() && rt.distributed() &&
      rt.local_world_size == rt.world_size) {
    Watchdog::Waiting waiting(c->watchdog_.get());
    std::string why_not;
    c->shm_ =
        SharedMemoryCollectives::join(*c->store_, rt.rank, rt.world_size, c->timeout_, &why_not);
    if (!c->shm_ && rt.isMain())
      spdlog::warn("dist.shm_allreduce: all-reduces go through Gloo: {}", why_not);
  }
  return c;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroup::makeBackend(const std::string& prefix,
                                                            c10::Device device) const {
  auto pg_store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
  try {
    if (backend_name_ == "gloo") {
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout_);
      // Loopback jobs talk over loopback; multi-node jobs over the interface that reaches the
      // master (or GLOO_SOCKET_IFNAME's), whatever this machine's hostname resolves to.
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      if (isLoopback(rt_.master_addr)) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else if (ifname && *ifname) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else {
        const std::string local = localAddressToward(rt_.master_addr, rt_.master_port);
        // On the master's own node the route may be loopback (its name resolving to 127.0.1.1):
        // then torch's default choice (hostname, else the default route's interface).
        opts->devices.push_back(isLoopback(local)
                                    ? c10d::ProcessGroupGloo::createDefaultDevice()
                                    : c10d::ProcessGroupGloo::createDeviceForHostname(local));
      }
      return c10::make_intrusive<c10d::ProcessGroupGloo>(pg_store, rt_.rank, rt_.world_size, opts);
    }
    // NCCL lives with LibTorch's CUDA libraries (cuda/plugin.h), loaded where a GPU driver is.
    const auto* cuda = cuda::plugin();
    if (!cuda)
      throw UsageError("dist.backend=nccl: the CUDA libraries are not loaded (no NVIDIA driver)");
    return cuda->make_nccl(pg_store, static_cast<int>(rt_.rank), static_cast<int>(rt_.world_size),
                           timeout_, device);
  } catch (const c10::Error& e) {
    throw std::runtime_error(fmt::format("rank {}: creating the {} process group failed: {}",
                                         rt_.rank, backend_name_,
                                         firstLine(e.what_without_backtrace())));
  }
}

std::shared_ptr<ProcessGroup> ProcessGroup::subgroup(const std::string& name,
                                                     c10::Device device) const {
  auto g = std::shared_ptr<ProcessGroup>(new ProcessGroup(*this));
  g->device_ = device;
  g->backend_ = makeBackend("sub/" + name, device);
  g->shm_.reset();  // one segment per job: a subgroup's collectives would interleave with it
  return g;
}

void ProcessGroup::barrier(const std::string& name, bool stopping) {
  Watchdog::Waiting waiting(watchdog_.get());
  const std::string key = "barrier/" + name;
  store_->set(fmt::format("{}/{}", key, rt_.rank), std::vector<uint8_t>{1});
  int64_t arrived = store_->add(key, 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto sleep = Ms(1);
  while (arrived < rt_.world_size) {
    if (!stopping)
      StopSignal::checkpoint(fmt::format("while waiting for the other ranks at '{}'", name));
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (int64_t r = 0; r < rt_.world_size; ++r)
        if (!store_->check({fmt::format("{}/{}", key, r)}))
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw std::runtime_error(
          fmt::format("rank(s) {} never arrived at '{}' within {} s (rendezvous {}:{})", missing,
                      name, timeout_.count() / 1000, rt_.master_addr, rt_.master_port));
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, Ms(100));
    arrived = store_->add(key, 0);
  }
}

std::string ProcessGroup::broadcastString(const std::string& key, const std::string& value) {
  Watchdog::Waiting waiting(watchdog_.get());
  const std::string k = "bcast/" + key;
  if (rt_.rank == 0) store_->set(k, std::vector<uint8_t>(value.begin(), value.end()));
  store_->wait({k}, timeout_);
  auto v = store_->get(k);
  return std::string(v.begin(), v.end());
}

std::string ProcessGroup::explainFailure(const std::exception& e, int64_t step) {
  const std::string what = e.what();
  const bool collective = dynamic_cast<const c10::DistError*>(&e) ||
                          what.find("gloo") != std::string::npos ||
                          what.find("NCCL") != std::string::npos;
  if (!collective) return "";
  const std::string first = firstLine(what);
  const auto silent = watchdog_->silentRanks();
  // Every peer looks silent from a host that lost the store: name what it lost instead.
  const std::string lost = watchdog_->lostStore();
  if (!lost.empty())
    return fmt::format("{}; a collective failed after step {}: {}", lost, step, first);
  if (silent.empty())
    return fmt::format("rank {}: a collective failed after step {}: {}", rt_.rank, step, first);
  return fmt::format(
      "rank {}: a collective failed after step {} because rank(s) {} went away (no heartbeat "
      "since: the process died or its node is gone): {}",
      rt_.rank, step, fmt::join(silent, ", "), first);
}

void ProcessGroup::wait(const c10::intrusive_ptr<c10d::Work>& work) {
  if (device_.is_cuda()) {
    work->wait();  // no timeout argument: with one, NCCL's wait blocks the host until done
    return;
  }
  Watchdog::Waiting waiting(watchdog_.get());
  work->wait(timeout_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce(std::vector<at::Tensor>& io) {
  if (shm_ && SharedMemoryCollectives::supports(io)) return shm_->allreduce(io);
  return backend_->allreduce(io);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::broadcast(std::vector<at::Tensor>& io) {
  return backend_->broadcast(io);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::broadcastFrom(std::vector<at::Tensor>& io,
                                                           int64_t root) {
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  return backend_->broadcast(io, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allToAll(at::Tensor& out, at::Tensor& in,
                                                      std::vector<int64_t> out_rows,
                                                      std::vector<int64_t> in_rows) {
  return backend_->alltoall_base(out, in, out_rows, in_rows);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allgatherInto(at::Tensor& out, at::Tensor& in) {
  if (shm_ && shm_->canGather(out, in)) return shm_->allgather(out, in);
  return backend_->_allgather_base(out, in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduceScatterInto(at::Tensor& out, at::Tensor& in) {
  if (shm_ && shm_->canReduceScatter(out, in)) return shm_->reduceScatter(out, in);
  return backend_->_reduce_scatter_base(out, in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::gatherToRankZero(
    std::vector<std::vector<at::Tensor>>& out, std::vector<at::Tensor>& in) {
  c10d::GatherOptions opts;
  opts.rootRank = 0;
  return backend_->gather(out, in, opts);
}

std::shared_ptr<ProcessGroup> ProcessGroup::subgroupOf(const std::string& name,
                                                       const std::vector<int64_t>& members) const {
  const auto at = std::find(members.begin(), members.end(), rt_.rank);
  if (at == members.end())
    throw std::logic_error(fmt::format("rank {} is not in group {}", rt_.rank, name));
  auto g = std::shared_ptr<ProcessGroup>(new ProcessGroup(*this));
  g->rt_.rank = at - members.begin();
  g->rt_.world_size = static_cast<int64_t>(members.size());
  g->store_ = c10::make_intrusive<c10d::PrefixStore>("group/" + name, store_);
  g->backend_ = g->makeBackend("pg", device_);
  g->shm_.reset();  // one segment per job: a subgroup's collectives would interleave with it
  return g;
}

std::vector<double> ProcessGroup::allreduceSum(const std::vector<double>& values) {
  auto t = torch::tensor(values, torch::kDouble).to(device_);
  std::vector<at::Tensor> ts{t};
  wait(allreduce(ts));
  Watchdog::Waiting waiting(watchdog_.get());  // the copy to the host waits for the reduction
  auto cpu = t.cpu();
  return std::vector<double>(cpu.data_ptr<double>(), cpu.data_ptr<double>() + cpu.numel());
}

}  // namespace ltrain::distributed
