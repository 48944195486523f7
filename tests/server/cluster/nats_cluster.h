// Test helper: a JetStream cluster of nats-server processes on loopback, each with its own
// store directory under a temporary directory. Servers can be killed (SIGKILL) and restarted
// with their store; everything started is stopped by PID when the helper goes away.
#ifndef GRAPHBANDIT_TESTS_SERVER_CLUSTER_NATS_CLUSTER_H_
#define GRAPHBANDIT_TESTS_SERVER_CLUSTER_NATS_CLUSTER_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace graphbandit::testing {

// `count` distinct TCP ports on 127.0.0.1 that nothing listened on a moment ago (each socket is
// held until all are picked, so that the kernel cannot hand out one port twice).
inline std::vector<int> FreeLoopbackPorts(int count) {
  std::vector<int> ports, fds;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof(address);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      ports.push_back(ntohs(address.sin_port));
    }
    fds.push_back(fd);
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

inline bool AcceptsConnections(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  ::close(fd);
  return ok;
}

// The nats-server program: $NATS_SERVER_BINARY, else nats-server on PATH (Debian's package).
inline std::string NatsServerBinary() {
  if (const char* binary = std::getenv("NATS_SERVER_BINARY"); binary != nullptr && *binary) {
    return binary;
  }
  return "nats-server";
}

class NatsCluster {
 public:
  explicit NatsCluster(int servers) {
    char pattern[] = "/tmp/graphbandit-nats.XXXXXX";
    const char* dir = ::mkdtemp(pattern);
    dir_ = dir != nullptr ? dir : "/tmp";  // Start then fails to make its store: a clear failure
    pids_.assign(servers, -1);
    PickPorts();
  }
  ~NatsCluster() {
    for (size_t i = 0; i < pids_.size(); ++i) Stop(static_cast<int>(i), SIGKILL);
    std::error_code ignored;
    if (dir_ != "/tmp") std::filesystem::remove_all(dir_, ignored);
  }
  NatsCluster(const NatsCluster&) = delete;
  NatsCluster& operator=(const NatsCluster&) = delete;

  // Starts every server; true once each accepts connections (JetStream may still be electing
  // its leader: JetStreamLog::Open waits for that).
  bool StartAll() {
    // Another process may take a picked port before the server binds it: then try new ports.
    for (int attempt = 0; attempt < 3; ++attempt) {
      bool started = true;
      for (size_t i = 0; started && i < pids_.size(); ++i) started = Start(static_cast<int>(i));
      if (started) return true;
      for (size_t i = 0; i < pids_.size(); ++i) Stop(static_cast<int>(i), SIGKILL);
      PickPorts();
    }
    return false;
  }

  // Starts (or restarts, with its store) server `i`.
  bool Start(int i) {
    std::vector<std::string> routes;
    for (int port : cluster_ports_) routes.push_back(absl::StrCat("nats://127.0.0.1:", port));
    const std::string name = absl::StrCat("n", i);
    std::vector<std::string> args = {NatsServerBinary(),
                                     "-a",
                                     "127.0.0.1",
                                     "-p",
                                     std::to_string(client_ports_[i]),
                                     "-n",
                                     name,
                                     "-js",
                                     "-sd",
                                     absl::StrCat(dir_, "/", name),
                                     "--cluster_name",
                                     "graphbandit-test",
                                     "--cluster",
                                     absl::StrCat("nats://127.0.0.1:", cluster_ports_[i]),
                                     "--routes",
                                     absl::StrJoin(routes, ",")};
    const std::string log = absl::StrCat(dir_, "/", name, ".log");
    Stop(i, SIGKILL);  // a restart of a server still running replaces it
    // Everything the child needs is made before fork: the parent has other threads (libnats's),
    // so the child only duplicates descriptors and executes.
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Killed with the test process, however that ends.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) std::_Exit(127);
      if (log_fd >= 0) {
        ::dup2(log_fd, STDOUT_FILENO);
        ::dup2(log_fd, STDERR_FILENO);
      }
      ::execvp(argv[0], argv.data());
      std::_Exit(127);
    }
    if (log_fd >= 0) ::close(log_fd);
    pids_[i] = pid;
    for (int attempt = 0; attempt < 200; ++attempt) {  // up to 20 s
      if (AcceptsConnections(client_ports_[i])) return true;
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pids_[i] = -1;
        std::ifstream in(log);
        std::fprintf(stderr, "nats-server %s exited at start; its log:\n%s\n", name.c_str(),
                     std::string(std::istreambuf_iterator<char>(in), {}).c_str());
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // Stops server `i` with `signal` (SIGKILL: as a crash) and reaps it.
  void Stop(int i, int signal) {
    if (pids_[i] <= 0) return;
    ::kill(pids_[i], signal);
    int status = 0;
    ::waitpid(pids_[i], &status, 0);
    pids_[i] = -1;
  }

  std::vector<std::string> urls() const {
    std::vector<std::string> urls;
    for (int port : client_ports_) urls.push_back(absl::StrCat("nats://127.0.0.1:", port));
    return urls;
  }
  const std::string& dir() const { return dir_; }

 private:
  void PickPorts() {
    const int servers = static_cast<int>(pids_.size());
    std::vector<int> ports = FreeLoopbackPorts(2 * servers);
    ports.resize(2 * servers, 0);  // a port that could not be picked: that server fails to start
    client_ports_.assign(ports.begin(), ports.begin() + servers);
    cluster_ports_.assign(ports.begin() + servers, ports.end());
  }

  std::string dir_;
  std::vector<int> client_ports_;
  std::vector<int> cluster_ports_;
  std::vector<pid_t> pids_;
};

}  // namespace graphbandit::testing

#endif  // GRAPHBANDIT_TESTS_SERVER_CLUSTER_NATS_CLUSTER_H_
