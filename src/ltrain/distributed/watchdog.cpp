#include "ltrain/distributed/watchdog.h"

#include <fmt/format.h>

#include <sstream>

#include "ltrain/common/stop_signal.h"

namespace ltrain::distributed {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::string key(int64_t rank) {
  return fmt::format("heartbeat/{}", rank);
}

struct Beat {
  int64_t counter = -1, step = 0;
  int phase = 0, leaving = 0;
};
Beat parse(const std::string& s) {
  Beat b;
  std::istringstream in(s);
  in >> b.counter >> b.step >> b.phase >> b.leaving;
  return b;
}

std::string rankList(const std::vector<int64_t>& ranks) {
  std::string out;
  for (auto r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

const char* phaseName(Phase p) {
  switch (p) {
    case Phase::kStartup:
      return "starting up";
    case Phase::kCompute:
      return "computing";
    case Phase::kCommunicate:
      return "communicating";
    case Phase::kEvaluate:
      return "evaluating";
    case Phase::kCheckpoint:
      return "writing a checkpoint";
  }
  return "?";
}

Watchdog::Watchdog(Connect connect, std::string store_where, int64_t rank, int64_t world_size,
                   Ms timeout, std::function<void(const std::string&)> on_hang)
    : connect_(std::move(connect)),
      store_where_(std::move(store_where)),
      store_(connect_()),
      rank_(rank),
      world_size_(world_size),
      timeout_(timeout),
      // Ten looks per timeout, within [100 ms, 2 s]; the verdict comes two periods before the
      // collectives' own timeout.
      period_(periodFor(timeout)),
      limit_(std::max<Ms>(timeout - 2 * period_, period_)),
      on_hang_(std::move(on_hang)),
      peers_(static_cast<size_t>(world_size), Peer{"", Clock::now()}) {
  beat();  // the key exists before any peer can look for it
  store_ok_ns_.store(nowNs());
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // Its last word: the peers that see this rank go quiet now do not report it as lost.
  try {
    if (store_) beat(true);
  } catch (const std::exception&) {
  }
}

Watchdog::Waiting::Waiting(Watchdog* w) : w_(w) {
  if (!w_) return;
  before_ = w_->phase();
  w_->setPhase(Phase::kCommunicate);
  w_->wait_since_ns_.store(nowNs(), std::memory_order_relaxed);
}

Watchdog::Waiting::~Waiting() {
  if (!w_) return;
  w_->wait_since_ns_.store(0, std::memory_order_relaxed);
  w_->setPhase(before_);
}

void Watchdog::beat(bool leaving) {
  const std::string v =
      fmt::format("{} {} {} {}", ++counter_, step_.load(), phase_.load(), leaving ? 1 : 0);
  store_->set(key(rank_), std::vector<uint8_t>(v.begin(), v.end()));
}

void Watchdog::run() {
  std::vector<std::string> keys;
  for (int64_t r = 0; r < world_size_; ++r) keys.push_back(key(r));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    const auto now = Clock::now();
    try {
      if (!store_) store_ = connect_();
      beat(StopSignal::pending() != 0);
      // Until every rank has published once, a read would block on the missing keys.
      if (!all_published_) all_published_ = store_->check(keys);
      auto values = all_published_ ? store_->multiGet(keys) : std::vector<std::vector<uint8_t>>{};
      std::lock_guard<std::mutex> peers_lock(peers_mutex_);
      for (size_t r = 0; r < values.size(); ++r) {
        std::string v(values[r].begin(), values[r].end());
        if (v != peers_[r].beat) peers_[r].beat = v, peers_[r].changed = now;
        peers_[r].leaving = parse(v).leaving != 0;
      }
      store_ok_ns_.store(nowNs());
    } catch (const std::exception&) {
      store_.reset();  // out of step with the server after a timeout: connect again next time
      // The call itself may have waited its whole deadline.
      const double quiet_s = (nowNs() - store_ok_ns_.load()) / 1e9;
      if (quiet_s > std::chrono::duration<double>(limit_).count())
        on_hang_(storeLostMessage(quiet_s));
    }
    const int64_t since = wait_since_ns_.load(std::memory_order_relaxed);
    if (since != 0) {
      const double waited_s = (nowNs() - since) / 1e9;
      if (waited_s > std::chrono::duration<double>(limit_).count()) {
        // Every peer looks silent from a host that lost the store: name what it lost.
        const std::string lost = lostStore();
        on_hang_(lost.empty() ? diagnose(waited_s) : lost);
      }
    }
    lock.lock();
  }
}

std::string Watchdog::storeLostMessage(double quiet_s) const {
  return fmt::format(
      "rank {} lost the rendezvous store at {}: no answer for {:.0f} s. The process serving it "
      "(rank 0, or node 0's launcher) stopped or died, or the network to its host is down (check "
      "the link between this host and {})",
      rank_, store_where_, quiet_s, store_where_.substr(0, store_where_.rfind(':')));
}

std::string Watchdog::lostStore() {
  const double quiet_s = (nowNs() - store_ok_ns_.load()) / 1e9;
  return quiet_s > 2 * std::chrono::duration<double>(period_).count() ? storeLostMessage(quiet_s)
                                                                      : "";
}

std::vector<int64_t> Watchdog::silentRanks() {
  const auto start = Clock::now();
  std::this_thread::sleep_for(3 * period_);
  std::lock_guard<std::mutex> lock(peers_mutex_);
  std::vector<int64_t> out;
  // A live peer's beat is seen to change within two periods; the first period may still show the
  // last beat of one that died just before the failure.
  for (int64_t r = 0; r < world_size_; ++r)
    if (r != rank_ && peers_[static_cast<size_t>(r)].changed < start + period_ &&
        !peers_[static_cast<size_t>(r)].leaving)
      out.push_back(r);
  return out;
}

std::string Watchdog::diagnose(double waited_s) {
  std::lock_guard<std::mutex> lock(peers_mutex_);
  const auto now = Clock::now();
  const int64_t my_step = step_.load();
  std::vector<int64_t> silent, busy;
  std::string busy_what;
  double silent_s = 0;
  for (int64_t r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    const auto& p = peers_[static_cast<size_t>(r)];
    const double quiet = std::chrono::duration<double>(now - p.changed).count();
    const Beat b = parse(p.beat);
    // A live peer's beat changes every period; three quiet periods mean it has stopped (the
    // wait's own limit would miss one that stopped just as this rank began to wait).
    if (quiet > 3 * std::chrono::duration<double>(period_).count()) {
      silent.push_back(r);
      silent_s = std::max(silent_s, quiet);
    } else if (static_cast<Phase>(b.phase) != Phase::kCommunicate) {
      busy.push_back(r);
      if (busy_what.empty())
        busy_what = fmt::format("rank {} is {} at step {}", r,
                                phaseName(static_cast<Phase>(b.phase)), b.step + 1);
    }
  }
  if (!silent.empty())
    return fmt::format(
        "rank(s) {} stopped responding: no heartbeat for {:.0f} s (stopped, hung or dead), while "
        "rank {} waited {:.0f} s for them at step {} (dist.timeout_s={})",
        rankList(silent), silent_s, rank_, waited_s, my_step + 1, timeout_.count() / 1000);
  if (!busy.empty())
    return fmt::format(
        "rank(s) {} are alive but not communicating ({}), while rank {} waited {:.0f} s for them "
        "at step {} (dist.timeout_s={})",
        rankList(busy), busy_what, rank_, waited_s, my_step + 1, timeout_.count() / 1000);
  return fmt::format(
      "rank {} waited {:.0f} s at step {} in a collective that never completed, though every rank "
      "is alive and communicating (a network problem, or ranks out of step) (dist.timeout_s={})",
      rank_, waited_s, my_step + 1, timeout_.count() / 1000);
}

}  // namespace ltrain::distributed
