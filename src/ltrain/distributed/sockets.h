// The few socket calls the rendezvous needs beyond c10d: a listening socket bound to exactly the
// address the job names (loopback for a single node: nothing binds wider than it must), and the
// local address through which a peer is reached (for Gloo's device on a multi-node job).
#pragma once
#include <string>

namespace ltrain::distributed {

bool isLoopback(const std::string& addr);

// A TCP socket listening on `addr`:`port` (0: a free port), ready for c10d's masterListenFd.
// UsageError for a port in use or an address that is not this machine's.
// A multi-node job whose master name resolves to loopback here listens on every interface.
int listenOn(const std::string& addr, int port, bool multi_node);
int boundPort(int fd);

// This machine's address on the route to `host` (no packet is sent). UsageError when `host`
// does not resolve.
std::string localAddressToward(const std::string& host, int port);

}  // namespace ltrain::distributed
