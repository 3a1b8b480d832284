#include "ltrain/distributed/sockets.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "ltrain/common/errors.h"

namespace ltrain::distributed {
namespace {

// The first IPv4 or IPv6 address of `host` (numeric or a name).
std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> resolve(const std::string& host, int port,
                                                           int socktype) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || !res)
    throw UsageError(fmt::format("master address '{}' does not resolve: {}", host,
                                 rc ? gai_strerror(rc) : "no address"));
  return {res, freeaddrinfo};
}

std::string numeric(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

}  // namespace

bool isLoopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

int listenOn(const std::string& addr, int port, bool multi_node) {
  auto ai = resolve(addr, port, SOCK_STREAM);
  // A node's own name often resolves to 127.0.1.1 (Debian's /etc/hosts): listening there would
  // shut the other nodes out, so a multi-node job named that way listens on every interface.
  const bool widen =
      multi_node && !isLoopback(addr) && isLoopback(numeric(ai->ai_addr, ai->ai_addrlen));
  if (widen) {
    if (ai->ai_family == AF_INET)
      reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr.s_addr = htonl(INADDR_ANY);
    else
      reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr = in6addr_any;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    const int err = errno;
    close(fd);
    if (err == EADDRINUSE)
      throw UsageError(fmt::format(
          "{}:{} is already in use: the rendezvous store cannot listen there (choose another "
          "--master-port or MASTER_PORT, or 0 for a free one)",
          addr, port));
    if (err == EADDRNOTAVAIL)
      throw UsageError(fmt::format(
          "master address '{}' is not an address of this machine, so the rendezvous store cannot "
          "listen on it (node 0 must be the master)",
          addr));
    throw UsageError(fmt::format("cannot listen on {}:{}: {}", addr, port, std::strerror(err)));
  }
  if (listen(fd, 1024) != 0) {
    const int err = errno;
    close(fd);
    throw std::runtime_error(fmt::format("listen on {}:{}: {}", addr, port, std::strerror(err)));
  }
  return fd;
}

int boundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

std::string localAddressToward(const std::string& host, int port) {
  auto ai = resolve(host, port, SOCK_DGRAM);
  int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  // connect() on a datagram socket only picks the route and the source address.
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    const int err = errno;
    close(fd);
    throw std::runtime_error(
        fmt::format("no route to the master address {}: {}", host, std::strerror(err)));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  close(fd);
  return numeric(reinterpret_cast<sockaddr*>(&ss), len);
}

}  // namespace ltrain::distributed
