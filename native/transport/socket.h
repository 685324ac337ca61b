// Thin, deadline-aware helpers over POSIX TCP sockets. Blocking helpers here are only used while
// building the mesh; the data path uses non-blocking I/O driven by the Mesh progress loop.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/deadline.h"

namespace shvd {

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { int fd = fd_; fd_ = -1; return fd; }
  void reset();

 private:
  int fd_ = -1;
};

// Listens on host:port (port 0 picks a free one). Returns the bound port through *bound_port.
Fd listen_tcp(const std::string& host, int port, int* bound_port);
// One attempt to connect before the deadline; an invalid Fd, and the reason in *why (and the errno in
// *error, when given) if it failed.
Fd connect_tcp(const std::string& host, int port, const Deadline& deadline, std::string* why, int* error = nullptr);

void set_nonblocking(int fd, bool on);
void tune_data_socket(int fd, int buffer_bytes);

// Blocking exact reads and writes with a deadline (the socket may be non-blocking).
// They return false on timeout or when the peer closed; errno-style details go to *why.
bool write_all(int fd, const void* data, size_t len, const Deadline& deadline, std::string* why);
bool read_all(int fd, void* data, size_t len, const Deadline& deadline, std::string* why);

}  // namespace shvd
