// Mutual HMAC challenge over a fresh TCP connection. Both sides prove they hold the per-job secret
// before either parses anything else the other sent: a peer without the secret is refused.
#pragma once
#include <cstdint>
#include <string>

#include "common/deadline.h"

namespace shvd {

// Each pair of ranks holds two connections: one for control frames, one for data.
enum class Channel : uint32_t { kControl = 0, kData = 1 };

// Run by the side that accepted. Returns the authenticated peer's rank and sets *channel, or returns -1
// if the peer failed the challenge (the caller then drops the connection and keeps accepting).
int authenticate_incoming(int fd, const std::string& secret, int my_rank, int world_size, const Deadline& deadline,
                          Channel* channel, std::string* why);

// Run by the side that connected. Throws kAuthentication when the acceptor refuses us or cannot prove
// it holds the secret, kPeerFailure/kTimeout on I/O problems.
void authenticate_outgoing(int fd, const std::string& secret, int my_rank, int expected_peer, int world_size,
                           Channel channel, const Deadline& deadline);

}  // namespace shvd
