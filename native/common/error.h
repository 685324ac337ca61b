// The one error type of the native core. Every failure is an shvd::Error with a kind;
// bindings.cc maps each kind to one Python exception class, in one place.
#pragma once
#include <stdexcept>
#include <string>

namespace shvd {

enum class ErrorKind {
  kGeneric,
  kTimeout,         // a deadline passed
  kPeerFailure,     // a peer died, closed its connection, or aborted
  kMismatch,        // ranks disagree on an operation's shape, dtype, op or root
  kAuthentication,  // a peer failed the HMAC challenge
  kInvalidArgument, // bad input from the caller
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, int peer_rank = -1)
      : std::runtime_error(message), kind_(kind), peer_rank_(peer_rank) {}
  ErrorKind kind() const { return kind_; }
  // The rank this error is about (the dead or mismatching peer), or -1.
  int peer_rank() const { return peer_rank_; }

 private:
  ErrorKind kind_;
  int peer_rank_;
};

[[noreturn]] inline void fail(ErrorKind kind, const std::string& message, int peer_rank = -1) {
  throw Error(kind, message, peer_rank);
}

// errno as text, for system-call failures.
std::string errno_text(int err);

}  // namespace shvd
