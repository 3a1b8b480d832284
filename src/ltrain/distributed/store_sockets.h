// What ltrain does to the c10d store's sockets that c10d does not: a deadline on every read and
// write of a client, and, on the server's side, closing connections that never said a word.
//
// Deadlines: c10d's TCPStore client has none: after a wait times out it blocks in recv() for the
// server's reply to its cancel, and check, add, get and multiGet block for their answers. A host
// whose link to the store is cut then waits until TCP gives up (about 15 minutes), and a thread
// blocked there cannot be joined or stopped. TCPStore keeps its socket private, so the sockets it
// opened are found by comparing this process's descriptors before and after it connects, and given
// SO_RCVTIMEO, SO_SNDTIMEO and TCP_USER_TIMEOUT: a call that waits longer throws c10d's
// DistNetworkError ("Socket Timeout"). A client that timed out is out of step with its server
// (a late reply would answer the next request): drop it and connect again.
#pragma once
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <string>

namespace ltrain::distributed {

// Connects (or, with opts.isServer, hosts and connects) like c10d::TCPStore(host, opts), then
// bounds every read and write on the client's connection by `io_deadline`.
c10::intrusive_ptr<c10d::TCPStore> connectWithDeadline(const std::string& host,
                                                       const c10d::TCPStoreOptions& opts,
                                                       std::chrono::milliseconds io_deadline);

// The sockets of this process connected to `port` whose reads and writes are bounded (for tests).
int boundedSocketsTo(int port);

// Silent connections: c10d's server keeps every accepted connection until its peer closes it, so
// anything that connects and says nothing (a port scanner, a stuck or foreign client) holds a
// descriptor and a slot of its loop for ever. Every c10d client sends its validation at once, so
// a connection to the server on `port` that has received no byte in `quiet` is shut down (c10d
// then drops it as closed). Returns how many were. The server must live in this process.
int closeSilentConnections(int port, std::chrono::milliseconds quiet);

}  // namespace ltrain::distributed
