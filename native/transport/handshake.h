// Mutual HMAC challenge over a fresh TCP connection. Both sides prove they hold the per-job secret
// before either believes anything else the other sent: a peer without the secret is refused.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/deadline.h"
#include "transport/socket.h"

namespace shvd {

// Each pair of ranks holds two connections: one for control frames, one for data.
enum class Channel : uint32_t { kControl = 0, kData = 1 };

// Who is speaking, on both sides of a handshake.
struct HandshakeKey {
  const std::string* secret = nullptr;
  int my_rank = 0;
  int world_size = 1;
};

// The accepting side of one handshake. It never blocks: advance() moves it as far as its non-blocking
// socket allows, so a listener can drive many at once and a silent stranger holds up nobody. It reads
// exactly one fixed-size answer, and believes none of it before the MAC checks out.
class IncomingHandshake {
 public:
  enum class State { kRunning, kAuthenticated, kRefused };

  IncomingHandshake(Fd fd, HandshakeKey key);
  State advance();
  short poll_events() const;  // what advance() waits for
  int fd() const { return fd_.get(); }

  // Once authenticated.
  Fd take_fd() { return std::move(fd_); }
  int peer_rank() const { return peer_rank_; }
  Channel channel() const { return channel_; }
  // Once refused: why, and the rank the answer claimed when it was shaped like a rank's (rank, world
  // size and channel plausible) but failed the MAC; -1 otherwise. The claim is unproven: it only
  // decides how a failed start-up is reported.
  const std::string& why() const { return why_; }
  int claimed_rank() const { return claimed_rank_; }

 private:
  State refuse(std::string why);
  bool send_pending();
  void check_answer();

  Fd fd_;
  HandshakeKey key_;
  uint8_t out_[40] = {};  // the challenge, then the proof
  size_t out_len_ = 0, out_sent_ = 0;
  uint8_t nonce_[32] = {};
  uint8_t answer_[80] = {};
  size_t answer_read_ = 0;
  bool proving_ = false;
  State state_ = State::kRunning;
  int peer_rank_ = -1;
  Channel channel_ = Channel::kControl;
  std::string why_;
  int claimed_rank_ = -1;
};

// The connecting side: dials host:port and authenticates as `channel` to rank `peer`, retrying a refused,
// reset or dropped attempt (the peer is not listening yet, or dropped us while busy) with back-off until
// `deadline`. Each attempt waits at most `attempt_s` for the peer's challenge. Throws kAuthentication
// when the last attempts were refused after our answer or the peer could not prove it holds the secret,
// kTimeout otherwise; either names `peer`. With `refused_is_death`, a refused connection is final: once a
// job has formed, every rank's listener stays open until it leaves, so nobody listening means it is gone
// (kPeerFailure naming `peer`).
Fd dial_peer(const std::string& host, int port, int peer, Channel channel, HandshakeKey key, double attempt_s,
             const Deadline& deadline, bool refused_is_death = false);

}  // namespace shvd
