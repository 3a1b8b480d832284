// The store connections' deadlines (distributed/store_sockets.h), against a real c10d store:
// PyTorch's own TCPStore server in a Python process, stopped with SIGSTOP as a host cut off from
// the network would look (its kernel still takes the bytes; nothing answers).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "ltrain/distributed/store_sockets.h"
#include "support/process.h"

#include "test_paths.h"

using Catch::Matchers::Contains;

TEST_CASE("a store call to a server that stopped answering fails at its deadline", "[dist]") {
  const int port = ltrain::test::freePort();
  ltrain::test::BackgroundProcess server(
      {LTRAIN_PYTHON, "-c",
       "import sys, time, torch.distributed as d\n"
       "s = d.TCPStore('127.0.0.1', " +
           std::to_string(port) +
           ", is_master=True, wait_for_workers=False)\n"
           "s.set('ready', '1'); print('listening', flush=True); time.sleep(120)\n"});
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = false;
  o.timeout = std::chrono::seconds(30);  // the connect waits for Python to start
  auto store =
      ltrain::distributed::connectWithDeadline("127.0.0.1", o, std::chrono::milliseconds(500));
  store->wait({"ready"});
  // The one connection c10d opened, and nothing else, carries the deadline.
  CHECK(ltrain::distributed::boundedSocketsTo(port) == 1);
  CHECK(store->check({"ready"}));

  server.signal(SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  auto answer = std::async(std::launch::async, [&]() -> std::string {
    try {
      store->check({"ready"});
      return "answered";
    } catch (const std::exception& e) {
      return e.what();
    }
  });
  const bool returned = answer.wait_for(std::chrono::seconds(15)) == std::future_status::ready;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  server.signal(SIGCONT);  // a call without a deadline returns now, so that the test can end
  REQUIRE(returned);
  CHECK_THAT(answer.get(), Contains("Timeout"));
  CHECK(secs < 3);
  server.signal(SIGKILL);
}

TEST_CASE("the launcher closes connections to its store that never say a word", "[dist]") {
  const int port = ltrain::test::freePort();
  ltrain::test::BackgroundProcess agent({LTRAIN_BINARY, "launch", "--nproc-per-node", "1",
                                         "--master-port", std::to_string(port), "--", "sleep",
                                         "40"});
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = false;
  o.timeout = std::chrono::seconds(30);
  auto client =
      ltrain::distributed::connectWithDeadline("127.0.0.1", o, std::chrono::milliseconds(2000));
  // Twenty connections that say nothing, as a port scanner or a stuck foreign client leaves.
  std::vector<int> silent;
  for (int i = 0; i < 20; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    silent.push_back(fd);
  }
  // Each is closed by the server: a read sees the end of the stream (10 s of silence, checked
  // every 2 s).
  int closed = 0;
  for (int fd : silent) {
    pollfd p{fd, POLLIN, 0};
    char c;
    if (poll(&p, 1, 20000) == 1 && recv(fd, &c, 1, 0) == 0) ++closed;
    close(fd);
  }
  CHECK(closed == 20);
  // The client that spoke at once is served as before.
  client->set("still", std::vector<uint8_t>{1});
  CHECK(client->check({"still"}));
  agent.signal(SIGTERM);
  auto r = agent.wait();
  CHECK_THAT(r.err, Contains("that said nothing for 10 s"));
}
