// Mutual HMAC challenge over a fresh TCP connection. Both sides prove they hold the per-job secret
// before either parses anything else the other sent: a peer without the secret is refused.
#pragma once
#include <string>

#include "common/deadline.h"

namespace shvd {

// Run by the side that accepted. Returns the authenticated peer's rank, or -1 if the peer failed
// the challenge (the caller then drops the connection and keeps accepting).
int authenticate_incoming(int fd, const std::string& secret, int my_rank, int world_size, const Deadline& deadline,
                          std::string* why);

// Run by the side that connected. Throws kAuthentication when the acceptor refuses us or cannot prove
// it holds the secret, kPeerFailure/kTimeout on I/O problems.
void authenticate_outgoing(int fd, const std::string& secret, int my_rank, int expected_peer, int world_size,
                           const Deadline& deadline);

}  // namespace shvd
