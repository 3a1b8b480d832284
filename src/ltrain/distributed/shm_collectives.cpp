#include "ltrain/distributed/shm_collectives.h"

#include <ATen/Dispatch.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iterator>
#include <mutex>
#include <random>
#include <thread>

#include "ltrain/common/memory_phase.h"

namespace ltrain::distributed {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMaxWorld = 64;
constexpr uint64_t kMagic = 0x6c747261696e5348;  // "ltrainSH"

// One cache line per counter: ranks spinning on one must not slow the writes to another.
struct alignas(64) Counter {
  std::atomic<uint32_t> v{0};
};

// The segment's first pages; the data slots follow at kHeaderBytes.
struct Header {
  uint64_t magic;
  uint64_t token;  // rank 0's random number: a rank that maps it knows it found the right one
  int64_t world;
  int64_t slot_bytes;
  int32_t pids[kMaxWorld];
  uint64_t pid_namespaces[kMaxWorld];  // inode of /proc/self/ns/pid: pids mean the same to all?
  // Per rank, what it reduces in the current chunk: the collective, elements of the tensor and
  // its dtype. A rank that issued something else is an error, not stale bytes summed in. Two
  // copies, as the data slots: a rank writes the next chunk's before the others read this one's.
  int64_t numel[2][kMaxWorld];
  int32_t dtype[2][kMaxWorld];
  int32_t op[2][kMaxWorld];
  Counter count;               // ranks arrived at the current barrier
  Counter generation;          // the last barrier every rank reached (the futex word)
  Counter arrived[kMaxWorld];  // the last barrier each rank reached (to name the late ones)
};
constexpr size_t kHeaderBytes = (sizeof(Header) + 4095) / 4096 * 4096;
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Per rank and per buffer: 8 MiB / world, at least 256 KiB (bigger tensors go in chunks).
int64_t slotBytesFor(int64_t world) {
  return std::max<int64_t>(256 << 10, ((8 << 20) / world) / 4096 * 4096);
}

void futexWait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::microseconds d) {
  timespec ts{static_cast<time_t>(d.count() / 1000000),
              static_cast<long>(d.count() % 1000000) * 1000};
  // Not FUTEX_PRIVATE: the word is shared between processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

[[noreturn]] void fail(const std::string& msg) {
  // c10::DistError, as Gloo's failures are: the process group's explainFailure recognises it.
  throw c10::DistError(msg);  // the message alone, no backtrace
}

// out[i] = sum over ranks of slot_j[i], in rank order, by blocks that stay in the L1 cache.
template <typename T>
void sumSlots(const std::vector<const T*>& in, T* out, int64_t n) {
  constexpr int64_t kBlock = 1024;
  T acc[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    const T* a = in[0] + b;
    for (int64_t i = 0; i < m; ++i) acc[i] = a[i];
    for (size_t j = 1; j < in.size(); ++j) {
      const T* x = in[j] + b;
      for (int64_t i = 0; i < m; ++i) acc[i] += x[i];
    }
    std::memcpy(out + b, acc, static_cast<size_t>(m) * sizeof(T));
  }
}

enum class Op : int32_t { kAllreduce, kAllgather, kReduceScatter };

// Each Op's name in messages and its c10d type, in the enum's order.
struct OpInfo {
  const char* name;
  c10d::OpType type;
};
constexpr OpInfo kOps[] = {{"all-reduce", c10d::OpType::ALLREDUCE},
                           {"all-gather", c10d::OpType::_ALLGATHER_BASE},
                           {"reduce-scatter", c10d::OpType::_REDUCE_SCATTER_BASE}};

const char* nameOf(Op op) {
  const auto i = static_cast<size_t>(op);
  return i < std::size(kOps) ? kOps[i].name : "unknown collective";
}

class ShmWork final : public c10d::Work {
 public:
  explicit ShmWork(Op op) : c10d::Work(-1, kOps[static_cast<size_t>(op)].type) {}
  void complete(std::exception_ptr e) { finish(std::move(e)); }
  // The worker thread ends every collective itself, by its own deadline and with a message that
  // names the late rank: the caller's timeout would only say "Operation timed out!".
  bool wait(std::chrono::milliseconds /*timeout*/) override { return c10d::Work::wait(); }
};

}  // namespace

struct SharedMemoryCollectives::State {
  int64_t rank = 0, world = 1;
  std::chrono::milliseconds timeout{0};
  void* map = MAP_FAILED;
  size_t map_bytes = 0;
  Header* h = nullptr;
  char* data = nullptr;
  bool pids_visible = false;  // peers' pids can be probed (same pid namespace)
  uint32_t barriers = 0;      // barriers this rank has passed
  uint64_t chunks = 0;        // chunks reduced: which of the two buffers is next
  uint64_t collectives = 0;
  std::string broken;  // after a failure, every later collective fails with it

  std::mutex mu;
  std::condition_variable cv;
  struct Job {
    Op op = Op::kAllreduce;
    std::vector<at::Tensor> io;  // all-reduce: in place; the others: output, input
    c10::intrusive_ptr<ShmWork> work;
  };
  Op current = Op::kAllreduce;  // the collective running now (for messages)
  std::deque<Job> queue;
  bool stop = false;
  std::atomic<bool> abort{false};
  std::thread worker;

  bool counted = false;  // in LTRAIN_MEMORY_LOG's libraries

  ~State() {
    if (counted) addLibraryBytes(-static_cast<int64_t>(map_bytes));
    if (map != MAP_FAILED) munmap(map, map_bytes);
  }

  char* slot(uint64_t buffer, int64_t r) const {
    return data + (static_cast<int64_t>(buffer % 2) * world + r) * h->slot_bytes;
  }

  std::string lateRanks(uint32_t b) const {
    std::string out;
    for (int64_t j = 0; j < world; ++j)
      if (static_cast<int32_t>(h->arrived[j].v.load() - b) < 0)
        out += (out.empty() ? "" : ", ") + std::to_string(j);
    return out;
  }

  // Returns once every rank has called barrier() as often as this one.
  void barrier() {
    const uint32_t b = ++barriers;
    h->arrived[rank].v.store(b);
    if (h->count.v.fetch_add(1) + 1 == static_cast<uint32_t>(world)) {
      h->count.v.store(0);  // before the release below: nobody counts into barrier b+1 earlier
      h->generation.v.store(b);
      futexWakeAll(&h->generation.v);
      return;
    }
    auto reached = [&] { return static_cast<int32_t>(h->generation.v.load() - b) >= 0; };
    // A short spin (20 us): peers that finish their part together meet within microseconds, and
    // a longer one would take a core from a peer still computing.
    const auto start = Clock::now();
    for (int i = 0;; ++i) {
      if (reached()) return;
      cpuRelax();
      if (i % 64 == 63 && Clock::now() - start > std::chrono::microseconds(20)) break;
    }
    const auto deadline = start + timeout;
    auto next_probe = start + std::chrono::milliseconds(200);
    for (;;) {
      const uint32_t seen = h->generation.v.load();
      if (static_cast<int32_t>(seen - b) >= 0) return;
      if (abort.load())
        fail(fmt::format("shared-memory {}: abandoned (the process group is closing)",
                         nameOf(current)));
      const auto now = Clock::now();
      if (now >= deadline)
        fail(
            fmt::format("rank {}: rank(s) {} did not reach shared-memory {} #{} within {} s "
                        "(dist.timeout_s)",
                        rank, lateRanks(b), nameOf(current), collectives, timeout.count() / 1000));
      if (pids_visible && now >= next_probe) {
        next_probe = now + std::chrono::milliseconds(200);
        for (int64_t j = 0; j < world; ++j)
          if (static_cast<int32_t>(h->arrived[j].v.load() - b) < 0 && kill(h->pids[j], 0) != 0 &&
              errno == ESRCH)
            fail(fmt::format("rank {}: rank {} (pid {}) exited during shared-memory {} #{}", rank,
                             j, h->pids[j], nameOf(current), collectives));
      }
      futexWait(&h->generation.v, seen, std::chrono::milliseconds(20));
    }
  }

  // After this rank wrote its slot of chunk `which`: every rank has written its own, and all of
  // them run the same collective on tensors of the same size and dtype (`n`: the whole
  // tensor's). What each publishes here is read before the next barrier, and rewritten two
  // chunks later, after it.
  void meet(uint64_t which, int64_t n, at::ScalarType type) {
    const auto* numel = h->numel[which % 2];
    const auto* dtype = h->dtype[which % 2];
    const auto* op = h->op[which % 2];
    h->numel[which % 2][rank] = n, h->dtype[which % 2][rank] = static_cast<int32_t>(type);
    h->op[which % 2][rank] = static_cast<int32_t>(current);
    barrier();
    for (int64_t j = 0; j < world; ++j) {
      if (op[j] != static_cast<int32_t>(current))
        fail(
            fmt::format("rank {}: shared-memory collective #{}: rank {} issued {} where this "
                        "rank issued {} (the ranks issued different collectives)",
                        rank, collectives, j, nameOf(static_cast<Op>(op[j])), nameOf(current)));
      if (numel[j] != n || dtype[j] != static_cast<int32_t>(type))
        fail(fmt::format(
            "rank {}: shared-memory {} #{}: rank {} {} {} elements of {} where this rank {} {} "
            "of {} (the ranks issued different collectives)",
            rank, nameOf(current), collectives, j,
            current == Op::kAllgather ? "gathers" : "reduces", numel[j],
            c10::toString(static_cast<at::ScalarType>(dtype[j])),
            current == Op::kAllgather ? "gathers" : "reduces", n, c10::toString(type)));
    }
  }

  template <typename T>
  void reduce(T* buf, int64_t n) {
    constexpr at::ScalarType type = c10::CppTypeToScalarType<T>::value;
    const int64_t per_slot = h->slot_bytes / static_cast<int64_t>(sizeof(T));
    for (int64_t off = 0; off < n; off += per_slot) {
      const int64_t m = std::min(per_slot, n - off);
      const uint64_t which = chunks++;
      std::memcpy(slot(which, rank), buf + off, static_cast<size_t>(m) * sizeof(T));
      meet(which, n, type);
      // Rank j sums elements [j*part, (j+1)*part) of the chunk into its own slot; 64-byte parts
      // so that no two ranks write one cache line.
      const int64_t align = 64 / static_cast<int64_t>(sizeof(T));
      const int64_t part = ((m + world - 1) / world + align - 1) / align * align;
      auto range = [&](int64_t j) {
        const int64_t lo = std::min(m, j * part);
        return std::make_pair(lo, std::min(m, lo + part));
      };
      const auto [lo, hi] = range(rank);
      if (hi > lo) {
        std::vector<const T*> in;
        for (int64_t j = 0; j < world; ++j)
          in.push_back(reinterpret_cast<const T*>(slot(which, j)) + lo);
        sumSlots(in, reinterpret_cast<T*>(slot(which, rank)) + lo, hi - lo);
      }
      barrier();
      for (int64_t j = 0; j < world; ++j) {
        const auto [l, r] = range(j);
        if (r > l)
          std::memcpy(buf + off + l, reinterpret_cast<const T*>(slot(which, j)) + l,
                      static_cast<size_t>(r - l) * sizeof(T));
      }
      // No third barrier: the next chunk writes the other buffer, and the one after writes this
      // one again only once every rank has passed the next chunk's first barrier, that is, has
      // finished reading this one.
    }
  }

  // `out` (world x n bytes) gets every rank's n bytes of `in`, a slot's worth at a time: one
  // barrier per chunk, as for reduce-scatter.
  void gather(char* out, const char* in, int64_t n) {
    for (int64_t off = 0; off < n; off += h->slot_bytes) {
      const int64_t m = std::min(h->slot_bytes, n - off);
      const uint64_t which = chunks++;
      std::memcpy(slot(which, rank), in + off, static_cast<size_t>(m));
      meet(which, n, at::kByte);
      for (int64_t j = 0; j < world; ++j)
        std::memcpy(out + j * n + off, slot(which, j), static_cast<size_t>(m));
    }
  }

  // `out` (n / world elements) gets the sum over ranks of this rank's part of `in` (n). Each
  // chunk carries the same stretch of every rank's part: rank r sums part r of every slot, in
  // rank order, straight into its output. One barrier per chunk: a slot is written again two
  // chunks later, after the next chunk's barrier, which every rank reaches only once it has
  // read this chunk.
  template <typename T>
  void reduceScatter(T* out, const T* in, int64_t n) {
    const int64_t part = n / world;
    const int64_t per_rank =
        std::max<int64_t>(1, h->slot_bytes / static_cast<int64_t>(sizeof(T)) / world);
    for (int64_t off = 0; off < part; off += per_rank) {
      const int64_t m = std::min(per_rank, part - off);
      const uint64_t which = chunks++;
      T* mine = reinterpret_cast<T*>(slot(which, rank));
      for (int64_t j = 0; j < world; ++j)
        std::memcpy(mine + j * m, in + j * part + off, static_cast<size_t>(m) * sizeof(T));
      meet(which, n, c10::CppTypeToScalarType<T>::value);
      std::vector<const T*> parts;
      for (int64_t j = 0; j < world; ++j)
        parts.push_back(reinterpret_cast<const T*>(slot(which, j)) + rank * m);
      sumSlots(parts, out + off, m);
    }
  }

  void run(const Job& job) {
    ++collectives;
    current = job.op;
    switch (job.op) {
      case Op::kAllreduce:
        for (const auto& t : job.io) {
          // supports() let through only the dtypes this dispatches.
          AT_DISPATCH_ALL_TYPES(t.scalar_type(), "shared-memory all-reduce",
                                [&] { reduce(t.data_ptr<scalar_t>(), t.numel()); });
        }
        break;
      case Op::kAllgather: {
        const auto& in = job.io[1];
        gather(static_cast<char*>(job.io[0].data_ptr()), static_cast<const char*>(in.data_ptr()),
               static_cast<int64_t>(in.nbytes()));
        break;
      }
      case Op::kReduceScatter: {
        const auto& in = job.io[1];
        AT_DISPATCH_ALL_TYPES(in.scalar_type(), "shared-memory reduce-scatter", [&] {
          reduceScatter(job.io[0].data_ptr<scalar_t>(), in.const_data_ptr<scalar_t>(), in.numel());
        });
        break;
      }
    }
  }

  void loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        job = std::move(queue.front());
        queue.pop_front();
      }
      std::exception_ptr error;
      if (!broken.empty()) {
        error = std::make_exception_ptr(c10::DistError(broken));
      } else {
        try {
          run(job);
        } catch (const std::exception& e) {
          broken = e.what();
          error = std::current_exception();
        }
      }
      job.io.clear();
      job.work->complete(error);
    }
  }
};

SharedMemoryCollectives::SharedMemoryCollectives(std::unique_ptr<State> s) : s_(std::move(s)) {
  s_->worker = std::thread([st = s_.get()] { st->loop(); });
}

SharedMemoryCollectives::~SharedMemoryCollectives() {
  {
    std::lock_guard<std::mutex> lk(s_->mu);
    s_->stop = true;
  }
  s_->abort = true;  // a collective still waiting for a dead peer gives up at once
  s_->cv.notify_all();
  if (s_->worker.joinable()) s_->worker.join();
}

bool SharedMemoryCollectives::supports(const std::vector<at::Tensor>& io) {
  for (const auto& t : io) {
    const auto d = t.scalar_type();
    if (!t.device().is_cpu() || !t.is_contiguous() ||
        (d != at::kFloat && d != at::kDouble && d != at::kInt && d != at::kLong))
      return false;
  }
  return !io.empty();
}

bool SharedMemoryCollectives::canGather(const at::Tensor& out, const at::Tensor& in) const {
  return out.device().is_cpu() && in.device().is_cpu() && out.is_contiguous() &&
         in.is_contiguous() && out.scalar_type() == in.scalar_type() &&
         out.numel() == in.numel() * s_->world;
}

bool SharedMemoryCollectives::canReduceScatter(const at::Tensor& out, const at::Tensor& in) const {
  return supports({out, in}) && out.scalar_type() == in.scalar_type() &&
         in.numel() == out.numel() * s_->world;
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::enqueue(int op,
                                                                std::vector<at::Tensor> io) {
  auto work = c10::make_intrusive<ShmWork>(static_cast<Op>(op));
  {
    std::lock_guard<std::mutex> lk(s_->mu);
    s_->queue.push_back({static_cast<Op>(op), std::move(io), work});
  }
  s_->cv.notify_one();
  return work;
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::allreduce(
    const std::vector<at::Tensor>& io) {
  return enqueue(static_cast<int>(Op::kAllreduce), io);
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::allgather(const at::Tensor& out,
                                                                  const at::Tensor& in) {
  return enqueue(static_cast<int>(Op::kAllgather), {out, in});
}

c10::intrusive_ptr<c10d::Work> SharedMemoryCollectives::reduceScatter(const at::Tensor& out,
                                                                      const at::Tensor& in) {
  return enqueue(static_cast<int>(Op::kReduceScatter), {out, in});
}

std::unique_ptr<SharedMemoryCollectives> SharedMemoryCollectives::join(
    c10d::Store& store, int64_t rank, int64_t world, std::chrono::milliseconds timeout,
    std::string* why_not, std::string name) {
  auto st = std::make_unique<State>();
  st->rank = rank, st->world = world, st->timeout = timeout;
  const int64_t slot_bytes = slotBytesFor(world);
  st->map_bytes = kHeaderBytes + static_cast<size_t>(2 * world * slot_bytes);
  std::string problem;  // this rank's reason for not joining, "" when it could
  uint64_t token = 0;
  // The name rank 0 created (O_EXCL: a file already there is never ours) leaves /dev/shm when
  // join returns: every rank has mapped it or given up by then, so nothing is left there
  // however the job ends. On every other way out too, a store error included.
  struct Unlink {
    std::string name;
    ~Unlink() {
      if (!name.empty()) shm_unlink(name.c_str());
    }
  } created;

  // Populated at once: every rank touches every slot in its first collectives anyway, and so the
  // segment is resident from the start, one fixed cost of the process group (LTRAIN_MEMORY_LOG's
  // "libraries") rather than a step's growth.
  auto mapFd = [&](int fd) {
    st->map =
        mmap(nullptr, st->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (st->map == MAP_FAILED) return fmt::format("mmap of {}: {}", name, std::strerror(errno));
    st->h = static_cast<Header*>(st->map);
    st->data = static_cast<char*>(st->map) + kHeaderBytes;
    return std::string();
  };

  if (world > kMaxWorld) problem = fmt::format("more than {} ranks", kMaxWorld);
  if (rank == 0) {
    std::random_device rd;
    token = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    if (name.empty()) name = fmt::format("/ltrain-{}-{:016x}", getpid(), token);
    if (problem.empty()) {
      const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0) {
        problem = fmt::format("cannot create {} in /dev/shm: {}", name, std::strerror(errno));
      } else {
        created.name = name;
        // Reserve the pages now: on a full /dev/shm a write would raise SIGBUS later.
        const int rc = posix_fallocate(fd, 0, static_cast<off_t>(st->map_bytes));
        if (rc != 0)
          problem = fmt::format("cannot reserve {} MiB in /dev/shm: {}", st->map_bytes >> 20,
                                std::strerror(rc));
        else
          problem = mapFd(fd);
        close(fd);
      }
      if (problem.empty()) {
        st->h->magic = kMagic, st->h->token = token, st->h->world = world;
        st->h->slot_bytes = slot_bytes;
      }
    }
    const std::string published = problem.empty() ? fmt::format("{} {:x}", name, token) : "";
    store.set("shm/segment", std::vector<uint8_t>(published.begin(), published.end()));
  } else {
    store.wait({"shm/segment"}, timeout);
    const auto v = store.get("shm/segment");
    const std::string published(v.begin(), v.end());
    if (published.empty()) {
      if (problem.empty()) problem = "rank 0 could not create the segment";
    } else if (problem.empty()) {
      name = published.substr(0, published.find(' '));
      token = std::stoull(published.substr(published.find(' ') + 1), nullptr, 16);
      const int fd = shm_open(name.c_str(), O_RDWR, 0);
      struct stat sb {};
      if (fd < 0)
        problem = fmt::format("cannot open {} (rank 0's /dev/shm is not this rank's)", name);
      else if (fstat(fd, &sb) != 0 || static_cast<size_t>(sb.st_size) < st->map_bytes)
        problem = fmt::format("{} is smaller than expected", name);
      else
        problem = mapFd(fd);
      if (fd >= 0) close(fd);
      if (problem.empty() &&
          (st->h->magic != kMagic || st->h->token != token || st->h->world != world))
        problem = fmt::format("{} is not this job's segment", name);
    }
  }
  if (problem.empty()) {
    struct stat ns {};
    st->h->pids[rank] = static_cast<int32_t>(getpid());
    st->h->pid_namespaces[rank] = stat("/proc/self/ns/pid", &ns) == 0 ? ns.st_ino : 0;
  }
  store.set(fmt::format("shm/ok/{}", rank),
            std::vector<uint8_t>{problem.empty() ? uint8_t{1} : uint8_t{0}});

  // Every rank learns whether all of them joined; the first refusal is the reason.
  std::string refused;
  for (int64_t j = 0; j < world; ++j) {
    const std::string key = fmt::format("shm/ok/{}", j);
    store.wait({key}, timeout);
    if (store.get(key).at(0) != 1 && refused.empty()) refused = fmt::format("rank {}", j);
  }
  if (!refused.empty()) {
    if (why_not)
      *why_not = problem.empty() ? fmt::format("{} could not map the segment", refused) : problem;
    return nullptr;
  }
  // Probing peers by pid needs one pid namespace (containers sharing /dev/shm may not share it);
  // otherwise a dead peer is found by the timeout alone.
  st->pids_visible = true;
  for (int64_t j = 0; j < world; ++j)
    if (st->h->pid_namespaces[j] == 0 || st->h->pid_namespaces[j] != st->h->pid_namespaces[rank] ||
        (kill(st->h->pids[j], 0) != 0 && errno == ESRCH))
      st->pids_visible = false;
  addLibraryBytes(static_cast<int64_t>(st->map_bytes));
  st->counted = true;
  return std::unique_ptr<SharedMemoryCollectives>(new SharedMemoryCollectives(std::move(st)));
}

}  // namespace ltrain::distributed
