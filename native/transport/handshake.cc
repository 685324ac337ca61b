#include "transport/handshake.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "crypto/hmac_sha256.h"

namespace shvd {
namespace {

constexpr char kGreeting[8] = {'S', 'H', 'V', 'D', 'A', 'U', 'T', '1'};
constexpr size_t kNonceBytes = 32;

// The challenge the acceptor sends first: a fixed tag and a fresh nonce.
struct Challenge {
  char greeting[8];
  uint8_t nonce[kNonceBytes];
};

// The connector's answer. Only its MAC is checked before any other field is believed.
struct Response {
  uint8_t nonce[kNonceBytes];
  uint32_t rank;
  uint32_t world_size;
  uint32_t channel;
  uint32_t reserved;
  uint8_t mac[32];
};

// The acceptor's proof, so the connector also knows it reached a member of the job.
struct Proof {
  uint32_t rank;
  uint8_t mac[32];
};

static_assert(sizeof(Challenge) == 40 && sizeof(Response) == 80 && sizeof(Proof) == 36, "sent raw");

Digest response_mac(const std::string& secret, const uint8_t* acceptor_nonce, const Response& r) {
  uint8_t message[16 + kNonceBytes * 2 + 12];
  std::memcpy(message, "shvd-connector--", 16);
  std::memcpy(message + 16, acceptor_nonce, kNonceBytes);
  std::memcpy(message + 16 + kNonceBytes, r.nonce, kNonceBytes);
  std::memcpy(message + 16 + 2 * kNonceBytes, &r.rank, 4);
  std::memcpy(message + 20 + 2 * kNonceBytes, &r.world_size, 4);
  std::memcpy(message + 24 + 2 * kNonceBytes, &r.channel, 4);
  return hmac_sha256(secret, message, sizeof(message));
}

Digest proof_mac(const std::string& secret, const uint8_t* acceptor_nonce, const uint8_t* connector_nonce,
                 uint32_t rank) {
  uint8_t message[16 + kNonceBytes * 2 + 4];
  std::memcpy(message, "shvd-acceptor---", 16);
  std::memcpy(message + 16, connector_nonce, kNonceBytes);
  std::memcpy(message + 16 + kNonceBytes, acceptor_nonce, kNonceBytes);
  std::memcpy(message + 16 + 2 * kNonceBytes, &rank, 4);
  return hmac_sha256(secret, message, sizeof(message));
}

bool io_would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

// How one dialled attempt ended.
struct Attempt {
  bool ok = false;
  bool refused = false;  // the peer hung up on our answer, or failed to prove itself: a secret problem
  std::string why;
};

Attempt authenticate_outgoing(int fd, int peer, Channel channel, const HandshakeKey& key, double attempt_s,
                              const Deadline& deadline) {
  Attempt out;
  const std::string who = "rank " + std::to_string(peer);
  Challenge challenge;
  // A peer still busy connecting to lower ranks accepts later: a fresh attempt then finds it sooner than
  // waiting here in a queue it may have given up on.
  Deadline challenge_deadline = Deadline::after_seconds(attempt_s);
  if (challenge_deadline.at() > deadline.at()) challenge_deadline = deadline;
  if (!read_all(fd, &challenge, sizeof(challenge), challenge_deadline, &out.why)) {
    out.why = who + " did not send its challenge (" + out.why + ")";
    return out;
  }
  if (std::memcmp(challenge.greeting, kGreeting, sizeof(kGreeting)) != 0) {
    out.refused = true;
    out.why = "the process listening for " + who + " is not a spark-hvd rank";
    return out;
  }
  Response response;
  random_bytes(response.nonce, kNonceBytes);
  response.rank = uint32_t(key.my_rank);
  response.world_size = uint32_t(key.world_size);
  response.channel = uint32_t(channel);
  response.reserved = 0;
  Digest mac = response_mac(*key.secret, challenge.nonce, response);
  std::memcpy(response.mac, mac.data(), mac.size());
  if (!write_all(fd, &response, sizeof(response), deadline, &out.why)) {
    out.why = "sending the challenge response to " + who + " failed: " + out.why;
    return out;
  }
  Proof proof;
  if (!read_all(fd, &proof, sizeof(proof), deadline, &out.why)) {
    out.refused = true;
    out.why = who + " refused this rank's authentication (" + out.why + "); do all ranks share the same job secret?";
    return out;
  }
  Digest expected = proof_mac(*key.secret, challenge.nonce, response.nonce, proof.rank);
  Digest received;
  std::memcpy(received.data(), proof.mac, received.size());
  if (!digests_equal(expected, received) || proof.rank != uint32_t(peer)) {
    out.refused = true;
    out.why = "the peer at " + who + "'s address could not prove it holds the job secret";
    return out;
  }
  out.ok = true;
  return out;
}

}  // namespace

IncomingHandshake::IncomingHandshake(Fd fd, HandshakeKey key) : fd_(std::move(fd)), key_(key) {
  Challenge challenge;
  std::memcpy(challenge.greeting, kGreeting, sizeof(kGreeting));
  random_bytes(challenge.nonce, kNonceBytes);
  std::memcpy(nonce_, challenge.nonce, kNonceBytes);
  std::memcpy(out_, &challenge, sizeof(challenge));
  out_len_ = sizeof(challenge);
}

short IncomingHandshake::poll_events() const {
  if (state_ != State::kRunning) return 0;
  return out_sent_ < out_len_ ? POLLOUT : POLLIN;
}

IncomingHandshake::State IncomingHandshake::refuse(std::string why) {
  why_ = std::move(why);
  fd_.reset();
  return state_ = State::kRefused;
}

bool IncomingHandshake::send_pending() {
  while (out_sent_ < out_len_) {
    ssize_t n = ::send(fd_.get(), out_ + out_sent_, out_len_ - out_sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      out_sent_ += size_t(n);
      continue;
    }
    if (n < 0 && io_would_block(errno)) return false;
    refuse("write failed: " + errno_text(errno));
    return false;
  }
  return true;
}

IncomingHandshake::State IncomingHandshake::advance() {
  if (state_ != State::kRunning) return state_;
  if (!send_pending()) return state_;
  if (proving_) return state_ = State::kAuthenticated;
  while (answer_read_ < sizeof(answer_)) {
    // Never more than the fixed-size answer: whatever else a stranger sends stays unread.
    ssize_t n = ::recv(fd_.get(), answer_ + answer_read_, sizeof(answer_) - answer_read_, MSG_DONTWAIT);
    if (n > 0) {
      answer_read_ += size_t(n);
      continue;
    }
    if (n == 0) return refuse("closed the connection during the handshake");
    if (io_would_block(errno)) return state_;
    return refuse("read failed: " + errno_text(errno));
  }
  check_answer();
  if (state_ != State::kRunning) return state_;
  proving_ = true;
  return advance();
}

void IncomingHandshake::check_answer() {
  Response response;
  std::memcpy(&response, answer_, sizeof(response));
  Digest expected = response_mac(*key_.secret, nonce_, response);
  Digest received;
  std::memcpy(received.data(), response.mac, received.size());
  const uint32_t n = uint32_t(key_.world_size);
  const bool plausible = response.world_size == n && response.rank < n && int(response.rank) > key_.my_rank &&
                         response.channel <= uint32_t(Channel::kData);
  if (!digests_equal(expected, received)) {
    if (plausible && response.reserved == 0) claimed_rank_ = int(response.rank);
    refuse("peer failed the HMAC challenge (wrong or missing job secret)");
    return;
  }
  // Authenticated: from here on the peer's fields can be trusted to be what a job member sent.
  if (!plausible) {
    refuse("authenticated peer claims rank " + std::to_string(response.rank) + " of " +
           std::to_string(response.world_size) + ", which this rank does not expect");
    return;
  }
  Proof proof;
  proof.rank = uint32_t(key_.my_rank);
  Digest mac = proof_mac(*key_.secret, nonce_, response.nonce, proof.rank);
  std::memcpy(proof.mac, mac.data(), mac.size());
  std::memcpy(out_, &proof, sizeof(proof));
  out_len_ = sizeof(proof);
  out_sent_ = 0;
  peer_rank_ = int(response.rank);
  channel_ = Channel(response.channel);
}

Fd dial_peer(const std::string& host, int port, int peer, Channel channel, HandshakeKey key, double attempt_s,
             const Deadline& deadline, bool refused_is_death) {
  std::string last = "no attempt made";
  std::string refusal;  // the latest refusal: it outweighs a later plain failure in the final error
  int backoff_ms = 5;
  while (!deadline.expired()) {
    std::string why;
    int error = 0;
    Fd fd = connect_tcp(host, port, deadline, &why, &error);
    if (refused_is_death && error == ECONNREFUSED) {
      fail(ErrorKind::kPeerFailure, "rank " + std::to_string(peer) + " no longer listens at " + host + ":" +
                                        std::to_string(port) + " (connection refused): it died or shut down", peer);
    }
    if (fd.valid()) {
      Attempt attempt = authenticate_outgoing(fd.get(), peer, channel, key, attempt_s, deadline);
      if (attempt.ok) return fd;
      last = attempt.why;
      if (attempt.refused) refusal = attempt.why;
    } else {
      last = why;
    }
    // Back off so that a peer still starting up is not hammered; the deadline bounds the total.
    std::this_thread::sleep_for(std::chrono::milliseconds(deadline.remaining_ms(backoff_ms)));
    backoff_ms = std::min(backoff_ms * 2, 200);
  }
  const std::string where = " at " + host + ":" + std::to_string(port);
  if (!refusal.empty()) {
    fail(ErrorKind::kAuthentication, "rank " + std::to_string(key.my_rank) + " could not authenticate to rank " +
                                         std::to_string(peer) + where + ": " + refusal, peer);
  }
  fail(ErrorKind::kTimeout, "rank " + std::to_string(key.my_rank) + " could not connect to rank " +
                                std::to_string(peer) + where + " before the deadline: " + last, peer);
}

}  // namespace shvd
