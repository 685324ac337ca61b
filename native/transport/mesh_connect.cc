// How pairs of the mesh connect: lazily, on first use.
//
// At formation a rank connects only its two neighbours in the host-ordered ring (every algorithm that
// walks the ranks in a line uses them, and together they keep the job connected, so an abort floods it).
// Any other pair connects inside the first Mesh::run that has an item between them. The higher rank of a
// pair dials the lower (as the handshake expects); its dials run on helper threads while this thread keeps
// servicing the listener and the connected peers' control frames, so a rank that is dialled while it dials
// answers at once (no chain of ranks waiting on each other), and an abort or a death is noticed while
// connecting. A same-host pair maps its shared-memory segment as it connects: the lower rank creates it
// and sends its name on the control connection; the higher rank opens it and acknowledges, and only then
// uses the pair.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

#include "common/error.h"
#include "crypto/hmac_sha256.h"
#include "transport/mesh.h"
#include "transport/mesh_internal.h"

namespace shvd {
namespace {

// Dials run on at most this many threads at once: enough to hide each handshake's round trip, few
// enough to cost nothing at formation, where a rank dials at most two neighbours.
constexpr size_t kMaxDialThreads = 8;

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

}  // namespace

// One helper thread's dials. It owns copies of all it uses, so a mesh that fails meanwhile can leave it
// behind: it ends by its deadline, and its connections close with it.
struct Mesh::DialJob {
  std::string secret;
  int me = 0, size = 0;
  double attempt_s = 2.0;
  Deadline deadline;
  bool refused_is_death = false;
  std::vector<int> ranks;
  std::vector<std::string> hosts;
  std::vector<int> ports;
  std::vector<Fd> control, data;
  std::exception_ptr error;
  Fd wake;  // eventfd, readable once done
  std::atomic<bool> done{false};

  void run() {
    try {
      const HandshakeKey key{&secret, me, size};
      for (size_t i = 0; i < ranks.size(); ++i) {
        control[i] = dial_peer(hosts[i], ports[i], ranks[i], Channel::kControl, key, attempt_s, deadline,
                               refused_is_death);
        data[i] = dial_peer(hosts[i], ports[i], ranks[i], Channel::kData, key, attempt_s, deadline, refused_is_death);
      }
    } catch (...) {
      error = std::current_exception();
    }
    done.store(true, std::memory_order_release);
    uint64_t one = 1;
    ssize_t ignored = ::write(wake.get(), &one, sizeof(one));
    (void)ignored;
  }
};

bool Mesh::uses_shm(int peer) const {
  return options_.enable_shm && peer != options_.rank && options_.host_keys[peer] == options_.host_keys[options_.rank];
}

void Mesh::form() {
  const int me = options_.rank;
  const int n = options_.size;
  for (int j = 0; j < n; ++j) {
    if (j != me) {
      peers_[j] = std::make_unique<Peer>();
      peers_[j]->rank = j;
    }
  }
  uint8_t tag[6];
  random_bytes(tag, sizeof(tag));
  char tag_hex[13];
  for (int i = 0; i < 6; ++i) std::snprintf(tag_hex + 2 * i, 3, "%02x", tag[i]);
  shm_tag_ = tag_hex;
  if (n == 1) {
    listener_.reset();
    return;
  }
  listener_state_ = std::make_unique<PeerListener>(
      listener_.get(),
      ListenerOptions{{&options_.secret, me, n}, options_.handshake_timeout_s, options_.max_pending_handshakes});
  const int at = layout_.ring_position[me];
  std::vector<int> neighbours{layout_.ring[(at + 1) % n], layout_.ring[(at + n - 1) % n]};
  std::sort(neighbours.begin(), neighbours.end());
  neighbours.erase(std::unique(neighbours.begin(), neighbours.end()), neighbours.end());
  try {
    connect_peers(neighbours, Deadline::after_seconds(options_.connect_timeout_s), true);
  } catch (const Error& e) {
    // Pass the failure on to the neighbours already connected, as a failing collective does.
    abort(e.peer_rank() >= 0 ? e.peer_rank() : me, e.what());
    throw;
  }
}

void Mesh::connect_for(const std::vector<SendItem>& sends, const std::vector<RecvItem>& recvs,
                       const Deadline& deadline) {
  if (connected_count_.load(std::memory_order_relaxed) == options_.size - 1) return;
  // Only items with bytes to move: an empty one needs no connection, and its peer may have no item at all
  // (and so never dial this rank).
  std::vector<int> wanted;
  for (const SendItem& s : sends) {
    if (s.done < s.len && !peers_[s.peer]->ready) wanted.push_back(s.peer);
  }
  for (const RecvItem& r : recvs) {
    const bool complete = r.done == r.len && (r.grow_into == nullptr || r.length_known);
    if (!complete && !peers_[r.peer]->ready) wanted.push_back(r.peer);
  }
  if (wanted.empty()) return;
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  connect_peers(wanted, deadline, false);
}

std::vector<std::shared_ptr<Mesh::DialJob>> Mesh::start_dials(const std::vector<int>& wanted,
                                                              const Deadline& deadline, bool forming) {
  std::vector<int> lower;
  for (int j : wanted) {
    const Peer& p = *peers_[j];
    if (j < options_.rank && !p.control.valid() && !p.data.valid()) lower.push_back(j);
  }
  std::vector<std::shared_ptr<DialJob>> jobs;
  const size_t threads = std::min(lower.size(), kMaxDialThreads);
  for (size_t t = 0; t < threads; ++t) {
    auto job = std::make_shared<DialJob>();
    job->secret = options_.secret;
    job->me = options_.rank;
    job->size = options_.size;
    job->attempt_s = options_.handshake_timeout_s;
    job->deadline = deadline;
    // Once the job has formed, every live rank listens until it leaves: a refusal is a death.
    job->refused_is_death = !forming;
    for (size_t i = t; i < lower.size(); i += threads) {
      job->ranks.push_back(lower[i]);
      job->hosts.push_back(options_.hosts[lower[i]]);
      job->ports.push_back(options_.ports[lower[i]]);
    }
    job->control.resize(job->ranks.size());
    job->data.resize(job->ranks.size());
    job->wake = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!job->wake.valid()) fail(ErrorKind::kGeneric, "eventfd() failed: " + errno_text(errno));
    std::thread([job] { job->run(); }).detach();
    jobs.push_back(std::move(job));
  }
  return jobs;
}

void Mesh::finish_dial(DialJob& job) {
  if (job.error) std::rethrow_exception(job.error);
  for (size_t i = 0; i < job.ranks.size(); ++i) {
    install(job.ranks[i], Channel::kControl, std::move(job.control[i]));
    install(job.ranks[i], Channel::kData, std::move(job.data[i]));
  }
}

void Mesh::connect_peers(const std::vector<int>& wanted, const Deadline& deadline, bool forming) {
  std::vector<std::shared_ptr<DialJob>> jobs = start_dials(wanted, deadline, forming);
  std::vector<pollfd> fds;
  std::vector<Peer*> control_of;
  while (true) {
    for (auto& job : jobs) {
      if (job && job->done.load(std::memory_order_acquire)) {
        finish_dial(*job);  // rethrows its failure
        job.reset();
      }
    }
    jobs.erase(std::remove(jobs.begin(), jobs.end(), nullptr), jobs.end());
    if (jobs.empty() && std::all_of(wanted.begin(), wanted.end(), [&](int j) { return peers_[j]->ready; })) return;
    // A dial ends by the deadline on its own, with the better error (it knows why it failed).
    if (jobs.empty() && deadline.expired()) {
      std::vector<int> absent;
      for (int j : wanted) {
        if (!peers_[j]->ready) absent.push_back(j);
      }
      connect_timed_out(absent, forming);
    }
    fds.clear();
    control_of.clear();
    for (auto& job : jobs) {
      fds.push_back({job->wake.get(), POLLIN, 0});
      control_of.push_back(nullptr);
    }
    for (auto& p : peers_) {
      if (!p || !p->control.valid() || p->said_bye) continue;
      fds.push_back({p->control.get(), POLLIN, 0});
      control_of.push_back(p.get());
    }
    const size_t listener_from = fds.size();
    listener_state_->add_pollfds(&fds);
    if (::poll(fds.data(), fds.size(), listener_state_->poll_timeout_ms(deadline.remaining_ms(100))) < 0) continue;
    // Control frames first: an abort, a death, or the shared-memory setup of a pair being connected.
    for (size_t i = 0; i < listener_from; ++i) {
      if (control_of[i] == nullptr || fds[i].revents == 0) continue;
      try {
        read_control_frame(*control_of[i]);
      } catch (const Error& e) {
        // At formation, a peer gave up on a rank this rank waits for too: fail as this rank's own wait
        // would, naming that rank with what this listener saw of strangers (and its claims of a wrong
        // secret). Later, a rank that fails to connect has died, and the peer failure says so.
        std::vector<int> absent;
        for (int j : wanted) {
          if (!peers_[j]->ready) absent.push_back(j);
        }
        if (forming && e.peer_rank() != control_of[i]->rank &&
            std::find(absent.begin(), absent.end(), e.peer_rank()) != absent.end()) {
          connect_timed_out({e.peer_rank()}, forming, e.what());
        }
        throw;
      }
    }
    service_listener();
  }
}

void Mesh::service_listener() {
  if (!listener_state_) return;
  listener_state_->service(0);
  AuthenticatedPeer peer;
  while (listener_state_->take(&peer)) install(peer.rank, peer.channel, std::move(peer.fd));
}

void Mesh::install(int rank, Channel channel, Fd fd) {
  Peer& peer = *peers_[rank];
  // Only a holder of the secret gets here: a second connection is the peer dialling again after its
  // first attempt failed on its side, so the newer one is the one it uses.
  (channel == Channel::kControl ? peer.control : peer.data) = std::move(fd);
  if (peer.control.valid() && peer.data.valid()) on_connected(peer);
}

void Mesh::on_connected(Peer& peer) {
  set_nonblocking(peer.control.get(), true);
  set_nonblocking(peer.data.get(), true);
  tune_data_socket(peer.control.get(), 0);
  tune_data_socket(peer.data.get(), options_.tcp_socket_buffer_bytes);
  if (!uses_shm(peer.rank)) {
    mark_ready(peer);
    return;
  }
  // The higher rank waits for the segment's name (open_shm); the lower creates it and waits for the
  // acknowledgement (read_control_frame): a creator that left before its peer opened the segment would take
  // the name with it.
  if (peer.rank < options_.rank) return;
  if (!peer.shm) {
    std::string name = "/shvd-" + std::to_string(getpid()) + "-" + shm_tag_ + "-" + std::to_string(options_.rank) +
                       "-" + std::to_string(peer.rank);
    peer.segment = ShmSegment::create(name, options_.shm_buffer_bytes);
    peer.out = peer.segment.outgoing(true);
    peer.in = peer.segment.incoming(true);
    peer.shm = true;
  }
  std::string payload(8, '\0');
  uint64_t capacity = options_.shm_buffer_bytes;
  std::memcpy(payload.data(), &capacity, 8);
  payload += peer.segment.name();
  send_frame_blocking(peer.control.get(), kShmSetup, payload.data(), payload.size(),
                      Deadline::after_seconds(options_.handshake_timeout_s), peer.rank);
}

void Mesh::open_shm(Peer& peer, const std::string& payload) {
  if (peer.rank > options_.rank || !uses_shm(peer.rank) || payload.size() < 9) {
    fail(ErrorKind::kPeerFailure, "unexpected shared-memory setup from " + peer_name(peer.rank), peer.rank);
  }
  if (!peer.shm) {
    uint64_t capacity = 0;
    std::memcpy(&capacity, payload.data(), 8);
    peer.segment = ShmSegment::open(payload.substr(8), capacity);
    peer.out = peer.segment.outgoing(false);
    peer.in = peer.segment.incoming(false);
    peer.shm = true;
  }
  send_frame_blocking(peer.control.get(), kShmAck, nullptr, 0, Deadline::after_seconds(options_.handshake_timeout_s),
                      peer.rank);
  mark_ready(peer);
}

void Mesh::mark_ready(Peer& peer) {
  if (peer.ready) return;
  peer.ready = true;
  connected_count_.fetch_add(1, std::memory_order_relaxed);
}

void Mesh::stop_listening() {
  listener_state_.reset();  // closes the handshakes in progress; it only borrows the listening socket
  listener_.reset();
}

void Mesh::connect_timed_out(const std::vector<int>& absent, bool forming, const std::string& reported) {
  const int me = options_.rank;
  StrangerCounts strangers = listener_state_->strangers();
  std::string ranks;
  for (int j : absent) ranks += (ranks.empty() ? "" : ", ") + std::to_string(j);
  const double seconds = forming ? options_.connect_timeout_s : options_.timeout_s;
  std::string msg = peer_name(me) + (reported.empty() ? " timed out after " + seconds_text(seconds) + " s waiting for"
                                                      : std::string(" gave up waiting for")) + " rank(s) ";
  msg += ranks + " to connect; " + strangers.describe(options_.handshake_timeout_s, options_.max_pending_handshakes);
  if (!reported.empty()) msg += "; a peer reported: " + reported;
  // An answer shaped like a missing rank's that failed the MAC is most likely that rank with another
  // secret; a stranger could forge one, but only to change how this failure reads.
  for (int j : absent) {
    if (strangers.claimed[j] > 0) {
      fail(ErrorKind::kAuthentication,
           msg + "; a connection claiming to be rank " + std::to_string(j) +
               " failed the HMAC challenge: do all ranks share the same job secret?",
           j);
    }
  }
  fail(ErrorKind::kTimeout, msg, absent.front());
}

}  // namespace shvd
