#include "transport/handshake.h"

#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "crypto/hmac_sha256.h"
#include "transport/socket.h"

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

}  // namespace

int authenticate_incoming(int fd, const std::string& secret, int my_rank, int world_size, const Deadline& deadline,
                          Channel* channel, std::string* why) {
  Challenge challenge;
  std::memcpy(challenge.greeting, kGreeting, sizeof(kGreeting));
  random_bytes(challenge.nonce, kNonceBytes);
  if (!write_all(fd, &challenge, sizeof(challenge), deadline, why)) return -1;

  Response response;
  if (!read_all(fd, &response, sizeof(response), deadline, why)) return -1;
  Digest expected = response_mac(secret, challenge.nonce, response);
  Digest received;
  std::memcpy(received.data(), response.mac, received.size());
  if (!digests_equal(expected, received)) {
    *why = "peer failed the HMAC challenge (wrong or missing job secret)";
    return -1;
  }
  // Authenticated: from here on the peer's fields can be trusted to be what a job member sent.
  if (response.world_size != uint32_t(world_size) || response.rank >= uint32_t(world_size) ||
      int(response.rank) <= my_rank || response.channel > uint32_t(Channel::kData)) {
    *why = "authenticated peer claims rank " + std::to_string(response.rank) + " of " +
           std::to_string(response.world_size) + ", which this rank does not expect";
    return -1;
  }
  Proof proof;
  proof.rank = uint32_t(my_rank);
  Digest mac = proof_mac(secret, challenge.nonce, response.nonce, proof.rank);
  std::memcpy(proof.mac, mac.data(), mac.size());
  if (!write_all(fd, &proof, sizeof(proof), deadline, why)) return -1;
  *channel = Channel(response.channel);
  return int(response.rank);
}

void authenticate_outgoing(int fd, const std::string& secret, int my_rank, int expected_peer, int world_size,
                           Channel channel, const Deadline& deadline) {
  std::string why;
  Challenge challenge;
  if (!read_all(fd, &challenge, sizeof(challenge), deadline, &why)) {
    fail(ErrorKind::kPeerFailure, "rank " + std::to_string(expected_peer) + " did not send its challenge: " + why,
         expected_peer);
  }
  if (std::memcmp(challenge.greeting, kGreeting, sizeof(kGreeting)) != 0) {
    fail(ErrorKind::kAuthentication,
         "the process listening for rank " + std::to_string(expected_peer) + " is not a spark-hvd rank",
         expected_peer);
  }
  Response response;
  random_bytes(response.nonce, kNonceBytes);
  response.rank = uint32_t(my_rank);
  response.world_size = uint32_t(world_size);
  response.channel = uint32_t(channel);
  response.reserved = 0;
  Digest mac = response_mac(secret, challenge.nonce, response);
  std::memcpy(response.mac, mac.data(), mac.size());
  if (!write_all(fd, &response, sizeof(response), deadline, &why)) {
    fail(ErrorKind::kPeerFailure, "sending the challenge response to rank " + std::to_string(expected_peer) +
                                      " failed: " + why, expected_peer);
  }
  Proof proof;
  if (!read_all(fd, &proof, sizeof(proof), deadline, &why)) {
    fail(ErrorKind::kAuthentication,
         "rank " + std::to_string(expected_peer) + " refused this rank's authentication (" + why +
             "); do all ranks share the same job secret?",
         expected_peer);
  }
  Digest expected = proof_mac(secret, challenge.nonce, response.nonce, proof.rank);
  Digest received;
  std::memcpy(received.data(), proof.mac, received.size());
  if (!digests_equal(expected, received) || proof.rank != uint32_t(expected_peer)) {
    fail(ErrorKind::kAuthentication,
         "the peer at rank " + std::to_string(expected_peer) + "'s address could not prove it holds the job secret",
         expected_peer);
  }
}

}  // namespace shvd
