#include "transport/listener.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "common/error.h"

namespace shvd {
namespace {

// Accepted per wake-up, so that answers already waiting are read before newcomers can push them out.
constexpr int kAcceptBatch = 16;
// accept() is paused this long (doubling up to the longest) while the descriptor table stays full.
constexpr int kFirstPauseMs = 10;
constexpr int kLongestPauseMs = 500;
constexpr double kLogEverySeconds = 30.0;

// accept(2) reports the new connection's pending network errors; it says to retry as for EAGAIN.
bool connection_error(int err) {
  switch (err) {
    case EINTR: case ECONNABORTED: case EPROTO: case ENETDOWN: case ENOPROTOOPT: case EHOSTDOWN:
    case ENONET: case EHOSTUNREACH: case EOPNOTSUPP: case ENETUNREACH: case EPERM:
      return true;
    default:
      return false;
  }
}

bool out_of_descriptors(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

int ms_until(std::chrono::steady_clock::time_point t, std::chrono::steady_clock::time_point now) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t - now).count();
  return us <= 0 ? 0 : int((us + 999) / 1000);
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

}  // namespace

std::string StrangerCounts::describe(double handshake_timeout_s, int max_pending) const {
  std::string text = "dropped " + std::to_string(dropped()) + " stranger connection(s)";
  std::vector<std::string> parts;
  if (silent > 0) {
    parts.push_back(std::to_string(silent) + " silent past the " + seconds_text(handshake_timeout_s) +
                    " s handshake deadline");
  }
  if (refused > 0) parts.push_back(std::to_string(refused) + " that failed the challenge (last: " + last_refusal + ")");
  if (evicted > 0) {
    parts.push_back(std::to_string(evicted) + " dropped as the oldest of " + std::to_string(max_pending) +
                    " waiting or to free a file descriptor");
  }
  for (size_t i = 0; i < parts.size(); ++i) text += (i == 0 ? ": " : ", ") + parts[i];
  if (pending > 0) text += "; " + std::to_string(pending) + " more still handshaking";
  if (!fd_exhaustion.empty()) text += "; accept() ran out of file descriptors (" + fd_exhaustion + ")";
  return text;
}

PeerListener::PeerListener(int listen_fd, ListenerOptions options)
    : listen_fd_(listen_fd), options_(std::move(options)) {
  options_.max_pending = std::max(options_.max_pending, 1);
  counts_.claimed.assign(size_t(std::max(options_.key.world_size, 0)), 0);
}

StrangerCounts PeerListener::strangers() const {
  StrangerCounts counts = counts_;
  counts.pending = int(pending_.size());
  return counts;
}

bool PeerListener::step(Pending& p) {
  IncomingHandshake& h = p.handshake;
  switch (h.advance()) {
    case IncomingHandshake::State::kRunning:
      return true;
    case IncomingHandshake::State::kAuthenticated:
      ready_.push_back({h.peer_rank(), h.channel(), h.take_fd()});
      return false;
    case IncomingHandshake::State::kRefused:
      ++counts_.refused;
      counts_.last_refusal = h.why();
      if (h.claimed_rank() >= 0) ++counts_.claimed[size_t(h.claimed_rank())];
      return false;
  }
  return false;
}

void PeerListener::drop_oldest() {
  ++counts_.evicted;
  pending_.erase(pending_.begin());
}

bool PeerListener::fd_table_full(int err, Clock::time_point now) {
  counts_.fd_exhaustion = errno_text(err);
  if (!logged_ || std::chrono::duration<double>(now - logged_at_).count() >= kLogEverySeconds) {
    logged_ = true;
    logged_at_ = now;
    std::fprintf(stderr,
                 "[collective] rank %d: the mesh listener hit the open-file limit (%s); dropping the oldest "
                 "unauthenticated connection, or pausing accept() when there is none\n",
                 options_.key.my_rank, counts_.fd_exhaustion.c_str());
    std::fflush(stderr);
  }
  if (!pending_.empty()) {
    drop_oldest();  // frees a descriptor for the connection waiting to be accepted
    return true;
  }
  pause_ms_ = pause_ms_ == 0 ? kFirstPauseMs : std::min(pause_ms_ * 2, kLongestPauseMs);
  paused_until_ = now + std::chrono::milliseconds(pause_ms_);
  return false;
}

void PeerListener::accept_ready(Clock::time_point now) {
  const auto handshake_time = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.handshake_timeout_s));
  for (int i = 0; i < kAcceptBatch; ++i) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (connection_error(err)) continue;
      if (out_of_descriptors(err)) {
        if (fd_table_full(err, now)) continue;
        return;
      }
      fail(ErrorKind::kGeneric, "accept() on the mesh listener failed: " + errno_text(err));
    }
    pause_ms_ = 0;
    if (int(pending_.size()) >= options_.max_pending) drop_oldest();
    auto p = std::make_unique<Pending>(Pending{IncomingHandshake(Fd(fd), options_.key), now + handshake_time});
    if (step(*p)) pending_.push_back(std::move(p));
  }
}

int PeerListener::poll_timeout_ms(int at_most_ms) const {
  auto now = Clock::now();
  int ms = at_most_ms;
  for (const auto& p : pending_) ms = std::min(ms, ms_until(p->deadline, now));
  if (now < paused_until_) ms = std::min(ms, ms_until(paused_until_, now));
  return ms;
}

void PeerListener::add_pollfds(std::vector<pollfd>* fds) const {
  if (Clock::now() >= paused_until_) fds->push_back({listen_fd_, POLLIN, 0});
  for (const auto& p : pending_) fds->push_back({p->handshake.fd(), p->handshake.poll_events(), 0});
}

void PeerListener::service(int timeout_ms) {
  auto now = Clock::now();
  auto expired = [&](const std::unique_ptr<Pending>& p) { return p->deadline <= now; };
  counts_.silent += int(std::count_if(pending_.begin(), pending_.end(), expired));
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), expired), pending_.end());
  const bool listening = now >= paused_until_;
  std::vector<pollfd> fds;
  add_pollfds(&fds);
  if (fds.empty()) return;
  if (::poll(fds.data(), fds.size(), std::min(timeout_ms, poll_timeout_ms(timeout_ms))) < 0) {
    if (errno == EINTR) return;
    fail(ErrorKind::kGeneric, "poll() on the mesh listener failed: " + errno_text(errno));
  }
  // Handshakes first: an answer that has arrived is never dropped to make room for a newcomer.
  const size_t first = listening ? 1 : 0;
  std::vector<bool> over(pending_.size(), false);
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (fds[first + i].revents != 0) over[i] = !step(*pending_[i]);
  }
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (!over[i]) pending_[kept++] = std::move(pending_[i]);
  }
  pending_.resize(kept);
  if (listening && (fds[0].revents & POLLIN)) accept_ready(Clock::now());
}

bool PeerListener::take(AuthenticatedPeer* out) {
  if (ready_.empty()) return false;
  *out = std::move(ready_.front());
  ready_.erase(ready_.begin());
  return true;
}

bool PeerListener::next(const Deadline& deadline, AuthenticatedPeer* out) {
  while (ready_.empty()) {
    if (deadline.expired()) return false;
    service(deadline.remaining_ms(100));
  }
  return take(out);
}

}  // namespace shvd
