#include "ltrain/distributed/store_sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/tcp.h>  // struct tcp_info with tcpi_bytes_received, TCP_USER_TIMEOUT
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <utility>

namespace ltrain::distributed {
namespace {

// (descriptor, "socket:[inode]") of every open socket: a descriptor closed and reused during the
// connect shows as new by its inode.
std::set<std::pair<int, std::string>> openSockets() {
  std::set<std::pair<int, std::string>> out;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return out;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    char link[64];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    if (std::string(link).rfind("socket:[", 0) == 0) out.emplace(static_cast<int>(fd), link);
  }
  closedir(dir);
  return out;
}

int portOf(int fd, bool peer) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return -1;
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
  return -1;
}
int peerPort(int fd) {
  return portOf(fd, true);
}

void bound(int fd, std::chrono::milliseconds d) {
  const auto ms = std::max<int64_t>(d.count(), 1);
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  // Sent data left unacknowledged this long fails the connection (a peer gone without a reset).
  const unsigned user_timeout = static_cast<unsigned>(ms);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

}  // namespace

c10::intrusive_ptr<c10d::TCPStore> connectWithDeadline(const std::string& host,
                                                       const c10d::TCPStoreOptions& opts,
                                                       std::chrono::milliseconds io_deadline) {
  const auto before = openSockets();
  auto store = c10::make_intrusive<c10d::TCPStore>(host, opts);
  const int port = store->getPort();
  for (const auto& s : openSockets())
    if (!before.count(s) && peerPort(s.first) == port) bound(s.first, io_deadline);
  return store;
}

int boundedSocketsTo(int port) {
  int n = 0;
  for (const auto& s : openSockets()) {
    if (peerPort(s.first) != port) continue;
    timeval tv{};
    socklen_t len = sizeof tv;
    if (getsockopt(s.first, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) == 0 &&
        (tv.tv_sec != 0 || tv.tv_usec != 0))
      ++n;
  }
  return n;
}

int closeSilentConnections(int port, std::chrono::milliseconds quiet) {
  int closed = 0;
  for (const auto& s : openSockets()) {
    // Accepted by the server: our port on this side, a peer on the other.
    if (portOf(s.first, false) != port || peerPort(s.first) < 0) continue;
    tcp_info info{};
    socklen_t len = sizeof info;
    if (getsockopt(s.first, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    // For a connection that never received data, the time since the last is its age.
    if (info.tcpi_bytes_received == 0 && info.tcpi_last_data_recv >= quiet.count()) {
      shutdown(s.first, SHUT_RDWR);  // not close(): the descriptor is c10d's
      ++closed;
    }
  }
  return closed;
}

}  // namespace ltrain::distributed
