#include "transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace shvd {

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

sockaddr_storage resolve(const std::string& host, int port, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* result = nullptr;
  std::string port_text = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) {
    fail(ErrorKind::kInvalidArgument, "cannot resolve address '" + host + "': " + gai_strerror(rc));
  }
  sockaddr_storage storage{};
  std::memcpy(&storage, result->ai_addr, result->ai_addrlen);
  *len = result->ai_addrlen;
  freeaddrinfo(result);
  return storage;
}

// Waits for fd to become readable/writable; false on deadline.
bool wait_fd(int fd, short events, const Deadline& deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms(100));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
    if (deadline.expired()) return false;
  }
}

}  // namespace

Fd listen_tcp(const std::string& host, int port, int* bound_port) {
  socklen_t len = 0;
  sockaddr_storage addr = resolve(host, port, &len);
  Fd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) fail(ErrorKind::kGeneric, "socket() failed: " + errno_text(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    fail(ErrorKind::kGeneric, "cannot listen on " + host + ":" + std::to_string(port) + ": " + errno_text(errno));
  }
  // The deepest queue the kernel allows (it caps the request at net.core.somaxconn): a flood of strangers
  // then waits there, not in SYN retransmits that would also delay the ranks behind it.
  if (::listen(fd.get(), 65535) != 0) fail(ErrorKind::kGeneric, "listen() failed: " + errno_text(errno));
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len);
  *bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  set_nonblocking(fd.get(), true);
  return fd;
}

Fd connect_tcp(const std::string& host, int port, const Deadline& deadline, std::string* why, int* error) {
  socklen_t len = 0;
  sockaddr_storage addr = resolve(host, port, &len);
  Fd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    *why = "socket() failed: " + errno_text(errno);
    return Fd();
  }
  int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len);
  if (rc != 0 && errno == EINPROGRESS) {
    if (!wait_fd(fd.get(), POLLOUT, deadline)) {
      *why = "connect timed out";
      return Fd();
    }
    int err = 0;
    socklen_t err_len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &err_len);
    rc = err == 0 ? 0 : -1;
    errno = err;
  }
  if (rc != 0) {
    if (error != nullptr) *error = errno;
    *why = "connect failed: " + errno_text(errno);
    return Fd();
  }
  return fd;
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void tune_data_socket(int fd, int buffer_bytes) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (buffer_bytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  }
}

bool write_all(int fd, const void* data, size_t len, const Deadline& deadline, std::string* why) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= size_t(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_fd(fd, POLLOUT, deadline)) {
        *why = "timed out writing";
        return false;
      }
      continue;
    }
    *why = "write failed: " + errno_text(errno);
    return false;
  }
  return true;
}

bool read_all(int fd, void* data, size_t len, const Deadline& deadline, std::string* why) {
  uint8_t* p = static_cast<uint8_t*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= size_t(n);
      continue;
    }
    if (n == 0) {
      *why = "connection closed by peer";
      return false;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_fd(fd, POLLIN, deadline)) {
        *why = "timed out reading";
        return false;
      }
      continue;
    }
    *why = "read failed: " + errno_text(errno);
    return false;
  }
  return true;
}

}  // namespace shvd
