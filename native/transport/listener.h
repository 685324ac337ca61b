// The mesh listener's accepting side. Every connection it accepts is a stranger until it passes the HMAC
// challenge, and strangers cost nothing: all their handshakes run at once from one poll() loop, each under
// its own short deadline; at most `max_pending` wait, the oldest dropped first; and an exhausted
// descriptor table drops the oldest stranger or backs the listener off instead of spinning.
#pragma once
#include <poll.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "transport/handshake.h"
#include "transport/socket.h"

namespace shvd {

struct ListenerOptions {
  HandshakeKey key;
  double handshake_timeout_s = 2.0;
  int max_pending = 64;
};

// A connection that passed the challenge.
struct AuthenticatedPeer {
  int rank = -1;
  Channel channel = Channel::kControl;
  Fd fd;
};

// What strangers did, for the error when the mesh fails to form.
struct StrangerCounts {
  int silent = 0;   // past their handshake deadline
  int refused = 0;  // failed the challenge or hung up during it
  int evicted = 0;  // dropped as the oldest, to make room
  int pending = 0;  // still handshaking when counted
  std::vector<int> claimed;  // per rank: refused answers shaped like that rank's
  std::string last_refusal;
  std::string fd_exhaustion;  // how accept() failed when the descriptor table was full, if it ever was

  int dropped() const { return silent + refused + evicted; }
  std::string describe(double handshake_timeout_s, int max_pending) const;
};

class PeerListener {
 public:
  // Borrows listen_fd (non-blocking); the caller closes it.
  PeerListener(int listen_fd, ListenerOptions options);

  // Waits for the next peer to pass the challenge; false when `deadline` passes first.
  bool next(const Deadline& deadline, AuthenticatedPeer* out);
  // For a caller that multiplexes the listener with its own sockets (the mesh, for its whole life): the
  // descriptors to poll, then one step of every ready handshake (`timeout_ms` 0: no waiting), then take()
  // what passed the challenge.
  void add_pollfds(std::vector<pollfd>* fds) const;
  void service(int timeout_ms);
  bool take(AuthenticatedPeer* out);
  bool has_pending() const { return !pending_.empty(); }
  // How long the caller may sleep before a handshake's deadline needs this listener.
  int poll_timeout_ms(int at_most_ms) const;
  StrangerCounts strangers() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    IncomingHandshake handshake;
    Clock::time_point deadline;
  };

  void accept_ready(Clock::time_point now);
  bool fd_table_full(int err, Clock::time_point now);
  void drop_oldest();
  // Advances one handshake; false once it is over (its peer then queued in ready_, or refused).
  bool step(Pending& p);

  int listen_fd_;
  ListenerOptions options_;
  std::vector<std::unique_ptr<Pending>> pending_;  // oldest first
  std::vector<AuthenticatedPeer> ready_;
  StrangerCounts counts_;
  Clock::time_point paused_until_{};  // accept() stays off until then, after the descriptor table filled
  int pause_ms_ = 0;
  Clock::time_point logged_at_{};
  bool logged_ = false;
};

}  // namespace shvd
