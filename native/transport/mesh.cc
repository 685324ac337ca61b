#include "transport/mesh.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "crypto/hmac_sha256.h"
#include "reduce/reduce.h"
#include "transport/handshake.h"
#include "transport/listener.h"
#include "transport/mesh_internal.h"

namespace shvd {
namespace {

// Largest piece moved per step, so receivers start (and gated sends follow) early.
constexpr size_t kPieceBytes = 256 << 10;
// TCP bytes are reduced in chunks of this size: large enough to amortise calls, small enough to stay in cache.
constexpr size_t kTcpReduceChunk = 256 << 10;
// A TCP receive of at least this many bytes streams: once its socket is empty it sleeps in poll() until
// this much (its last batch: the rest) is buffered (SO_RCVLOWAT), instead of spinning on recv() and
// taking each segment as it lands. The kernel keeps receiving meanwhile, so the link loses nothing, and
// one wake-up per batch costs far less CPU than a recv() (and the window update it sends) per segment.
constexpr size_t kTcpWakeBytes = 256 << 10;
// A self-describing block starts with 16 bytes whose second 8 hold the block's total length.
constexpr size_t kDescribeBytes = 16;
// How long a timed-out rank waits for its peers to answer a ping before it blames the silent ones.
constexpr double kProbeSeconds = 1.0;
// How long a timed-out rank whose peers all answer waits for one of them to report the rank it waits on:
// that peer's own deadline is within scheduling skew of this one's, plus its probe.
constexpr double kRelayGraceSeconds = 3 * kProbeSeconds;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void send_pong(int fd) {
  FrameHeader h{kFrameMagic, kPong, 0};
  std::string why;
  write_all(fd, &h, sizeof(h), Deadline::after_seconds(kAbortGraceSeconds), &why);  // unanswered reads as silent
}

bool item_complete(const SendItem& s) { return s.done == s.len; }
// A gated send that has sent all its gate allows waits on this rank's own receive, not on its peer.
bool waits_on_own_receive(const SendItem& s) { return s.gate && *s.gate <= s.done; }
bool item_complete(const RecvItem& r) { return r.done == r.len && (r.grow_into == nullptr || r.length_known); }
// Bytes of `r` not yet read from the peer; 0 while a self-describing receive's length is unknown.
size_t bytes_to_come(const RecvItem& r) {
  if (r.grow_into != nullptr && !r.length_known) return 0;
  return r.len - r.done - r.staged;
}
// A receive large enough to stream (see kTcpWakeBytes). A smaller one may be a round trip away and
// spins first.
bool streams(const RecvItem& r) { return bytes_to_come(r) > 0 && r.len >= kTcpWakeBytes; }

// Nothing moved for `rounds` passes in a row, since `since`.
struct IdleSpell {
  int rounds = 0;
  std::chrono::steady_clock::time_point since;
};

// Whether to pass again at once, after a pause instruction or a yield of the core; false once the
// spell has lasted the policy's spinning and yielding time, and the rank should sleep.
bool spin_or_yield(const WaitPolicy& wait, IdleSpell& idle) {
  if (idle.rounds++ == 0) idle.since = std::chrono::steady_clock::now();
  if ((idle.rounds & 15) != 0 && wait.spin_us != 0) {
    cpu_relax();
    return true;
  }
  auto idle_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - idle.since).count();
  if (idle_us < wait.spin_us) return true;
  if (idle_us < wait.spin_us + wait.yield_us) {
    sched_yield();
    return true;
  }
  return false;
}

}  // namespace

void send_frame_blocking(int fd, uint32_t type, const void* payload, size_t len, const Deadline& deadline,
                         int peer) {
  FrameHeader h{kFrameMagic, type, len};
  std::string why;
  if (!write_all(fd, &h, sizeof(h), deadline, &why) || (len > 0 && !write_all(fd, payload, len, deadline, &why))) {
    fail(ErrorKind::kPeerFailure, "sending to " + peer_name(peer) + " failed: " + why, peer);
  }
}

int Mesh::bind_listener(const std::string& host, Fd* listener) {
  int port = 0;
  *listener = listen_tcp(host, 0, &port);
  return port;
}

Mesh::Mesh(MeshOptions options, Fd listener) : options_(std::move(options)), listener_(std::move(listener)) {
  const int n = options_.size;
  if (options_.rank < 0 || options_.rank >= n) {
    fail(ErrorKind::kInvalidArgument,
         "rank " + std::to_string(options_.rank) + " is outside [0, " + std::to_string(n) + ")");
  }
  if (options_.secret.empty() && n > 1) fail(ErrorKind::kInvalidArgument, "a job secret is required");
  if (int(options_.hosts.size()) != n || int(options_.ports.size()) != n || int(options_.host_keys.size()) != n) {
    fail(ErrorKind::kInvalidArgument, "mesh needs one host, port and host key per rank");
  }
  peers_.resize(n);
  layout_ = layout_hosts(options_.host_keys);
  const int local_ranks = int(layout_.hosts[layout_.host_of[options_.rank]].size());
  default_wait_.spin_us = options_.spin_us;
  if (default_wait_.spin_us < 0) {
    // Busy-waiting only pays when every local rank has a core; otherwise it steals the peer's time slice.
    int cores = int(std::thread::hardware_concurrency());
    default_wait_.spin_us = local_ranks <= cores ? 20 : 0;
  }
  // Sleeping costs a scheduler wake-up (tens of microseconds on a busy core) when the data arrives;
  // yielding keeps this rank ready to run while still handing the core to anyone who needs it.
  default_wait_.yield_us = std::max(options_.yield_us, 0);
  form();
}

Mesh::~Mesh() {
  try {
    close();
  } catch (...) {
  }
}

void Mesh::read_control_frame(Peer& peer) {
  FrameHeader h{};
  ssize_t n = ::recv(peer.control.get(), &h, sizeof(h), MSG_DONTWAIT | MSG_PEEK);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {
    if (peer.said_bye) return;
    fail(ErrorKind::kPeerFailure, peer_name(peer.rank) + " died or lost its connection (closed without saying goodbye)",
         peer.rank);
  }
  if (size_t(n) < sizeof(h)) return;  // the rest of a header is on its way
  std::string why;
  Deadline deadline = Deadline::after_seconds(1.0);
  read_all(peer.control.get(), &h, sizeof(h), deadline, &why);
  if (h.magic != kFrameMagic || h.length > kMaxControlPayload) {
    fail(ErrorKind::kPeerFailure, "corrupt control stream from " + peer_name(peer.rank), peer.rank);
  }
  std::string payload(h.length, '\0');
  if (h.length > 0 && !read_all(peer.control.get(), payload.data(), h.length, deadline, &why)) {
    fail(ErrorKind::kPeerFailure, peer_name(peer.rank) + " died while reporting a failure: " + why, peer.rank);
  }
  if (h.type == kAbort && payload.size() >= 4) {
    int cause = peer.rank;
    std::memcpy(&cause, payload.data(), 4);
    if (cause < 0 || cause >= options_.size) cause = peer.rank;
    fail(ErrorKind::kPeerFailure, payload.substr(4) + " (reported by " + peer_name(peer.rank) + ")", cause);
  }
  if (h.type == kBye) {
    peer.said_bye = true;
    return;
  }
  if (h.type == kPing) {
    send_pong(peer.control.get());
    return;
  }
  if (h.type == kPong) {
    ++peer.pongs;
    return;
  }
  if (h.type == kShmSetup) {
    open_shm(peer, payload);
    return;
  }
  if (h.type == kShmAck) {
    peer.segment.unlink_name();  // both sides have it mapped: nothing outlives the pair now
    mark_ready(peer);
    return;
  }
  fail(ErrorKind::kPeerFailure, "unexpected control frame " + std::to_string(h.type) + " from " + peer_name(peer.rank),
       peer.rank);
}

void Mesh::peer_lost(Peer& peer, const std::string& context) {
  // A failing peer explains itself on its control connection before dropping the data connection:
  // give that explanation a moment to arrive, so the error names the real culprit.
  Deadline grace = Deadline::after_seconds(kAbortGraceSeconds);
  while (!peer.said_bye && peer.control.valid()) {
    pollfd p{peer.control.get(), POLLIN, 0};
    if (::poll(&p, 1, grace.remaining_ms(50)) > 0) {
      read_control_frame(peer);  // throws on abort or death
      continue;
    }
    if (grace.expired()) break;
  }
  if (peer.said_bye) {
    fail(ErrorKind::kPeerFailure,
         peer_name(peer.rank) + " has shut down while this rank still " + context +
             "; did the ranks call different numbers of collectives?",
         peer.rank);
  }
  fail(ErrorKind::kPeerFailure, "connection to " + peer_name(peer.rank) + " lost while this rank " + context +
                                    "; that rank probably died",
       peer.rank);
}

bool Mesh::progress_send(SendItem& item, Peer& peer) {
  size_t limit = item.gate ? std::min(*item.gate, item.len) : item.len;
  if (item.done >= limit) return false;
  if (peer.shm) {
    size_t n = peer.out.write_some(item.data + item.done, std::min(limit - item.done, kPieceBytes));
    item.done += n;
    traffic_.shm_bytes.fetch_add(n, std::memory_order_relaxed);
    return n > 0;
  }
  size_t want = std::min(limit - item.done, options_.tcp_chunk_bytes);
  ssize_t n = ::send(peer.data.get(), item.data + item.done, want, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    peer_lost(peer, "was sending to it (" + errno_text(errno) + ")");
  }
  item.done += size_t(n);
  traffic_.tcp_bytes.fetch_add(size_t(n), std::memory_order_relaxed);
  return n > 0;
}

size_t Mesh::read_available(Peer& peer, uint8_t* dst, size_t max) {
  if (peer.shm) {
    const uint8_t* region;
    size_t n = std::min(peer.in.peek(&region), max);
    if (n > 0) {
      std::memcpy(dst, region, n);
      peer.in.consume(n);
    }
    return n;
  }
  ssize_t n = ::recv(peer.data.get(), dst, max, MSG_DONTWAIT);
  // A stream socket hands over all it holds up to max: a short read leaves it empty.
  peer.drained = n < ssize_t(max);
  if (n > 0) return size_t(n);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  peer_lost(peer, "expected data from it");
}

bool Mesh::progress_recv(RecvItem& item, Peer& peer) {
  bool progressed = false;
  if (item.grow_into != nullptr && !item.length_known) {
    if (item.grow_into->size() < kDescribeBytes) item.grow_into->resize(kDescribeBytes);
    while (item.done < kDescribeBytes) {
      size_t n = read_available(peer, item.grow_into->data() + item.done, kDescribeBytes - item.done);
      if (n == 0) return progressed;
      item.done += n;
      progressed = true;
    }
    uint64_t total = 0;
    std::memcpy(&total, item.grow_into->data() + 8, 8);
    if (total > item.max_len || total < kDescribeBytes) {
      fail(ErrorKind::kMismatch, peer_name(peer.rank) + " sent a " + std::to_string(total) +
                                     "-byte block where at most " + std::to_string(item.max_len) + " fit",
           peer.rank);
    }
    item.grow_into->resize(total);
    item.dst = item.grow_into->data();
    item.len = total;
    item.length_known = true;
  }
  return (peer.shm ? progress_recv_shm(item, peer) : progress_recv_tcp(item, peer)) || progressed;
}

// The next `count` elements of `item`, reduced with the same elements arriving at `incoming`.
static void reduce_arrived(RecvItem& item, const uint8_t* incoming, size_t count) {
  if (item.reduce_from != nullptr) {
    reduce_into(item.dst + item.done, item.reduce_from + item.done, incoming, count, item.dtype, item.op);
  } else {
    reduce_inplace(item.dst + item.done, incoming, count, item.dtype, item.op);
  }
  if (item.finish.needed()) apply_finish(item.dst + item.done, count, item.dtype, item.finish);
}

bool Mesh::progress_recv_tcp(RecvItem& item, Peer& peer) {
  bool progressed = false;
  auto wait_for_batch = [&] { return peer.drained && streams(item); };
  if (!item.reduce) {
    while (item.done < item.len && !wait_for_batch()) {
      size_t n = read_available(peer, item.dst + item.done, std::min(item.len - item.done, options_.tcp_chunk_bytes));
      if (n == 0) return progressed;
      item.done += n;
      progressed = true;
    }
    return progressed;
  }
  // Reduce what arrived, whole elements at a time, straight from a staging chunk.
  const size_t elem = dtype_size(item.dtype);
  const size_t capacity = std::max(std::min(options_.tcp_chunk_bytes, kTcpReduceChunk), elem);
  if (peer.staging.size() < capacity) peer.staging.resize(capacity);
  uint8_t* staging = peer.staging.data();
  while (item.done < item.len && !wait_for_batch()) {
    size_t want = std::min(capacity - item.staged, item.len - item.done - item.staged);
    size_t n = read_available(peer, staging + item.staged, want);
    if (n == 0) return progressed;
    progressed = true;
    item.staged += n;
    size_t whole = item.staged / elem * elem;
    if (whole == 0) continue;
    reduce_arrived(item, staging, whole / elem);
    item.done += whole;
    item.staged -= whole;
    if (item.staged > 0) std::memmove(staging, staging + whole, item.staged);
  }
  return progressed;
}

bool Mesh::progress_recv_shm(RecvItem& item, Peer& peer) {
  bool progressed = false;
  const size_t elem = item.reduce ? dtype_size(item.dtype) : 1;
  if (item.reduce && peer.staging.size() < elem) peer.staging.resize(elem);
  while (item.done < item.len) {
    const uint8_t* region;
    size_t n = peer.in.peek(&region);
    if (n == 0) return progressed;
    progressed = true;
    size_t take = std::min({n, item.len - item.done - item.staged, kPieceBytes});
    if (!item.reduce) {
      std::memcpy(item.dst + item.done, region, take);
      peer.in.consume(take);
      item.done += take;
      continue;
    }
    if (item.staged > 0 || take < elem) {
      // An element split by the ring's wrap-around: assemble it before reducing.
      size_t part = std::min(take, elem - item.staged);
      std::memcpy(peer.staging.data() + item.staged, region, part);
      peer.in.consume(part);
      item.staged += part;
      if (item.staged == elem) {
        reduce_arrived(item, peer.staging.data(), 1);
        item.done += elem;
        item.staged = 0;
      }
      continue;
    }
    size_t whole = take / elem * elem;
    // Reduce straight out of the shared ring: no intermediate copy.
    reduce_arrived(item, region, whole / elem);
    peer.in.consume(whole);
    item.done += whole;
  }
  return progressed;
}

// Sleeps until a data connection is ready or a control frame arrives (or timeout_ms passes), and acts
// on control frames: an abort or a death anywhere in the job ends this rank's wait too.
void Mesh::watch(const std::vector<bool>& reading, const std::vector<bool>& writing, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<Peer*> control_of, data_of;
  for (auto& p : peers_) {
    if (!p || !p->control.valid()) continue;
    if (!p->said_bye) {
      fds.push_back({p->control.get(), POLLIN, 0});
      control_of.push_back(p.get());
      data_of.push_back(nullptr);
    }
    if (p->shm) continue;
    short events = short((reading[p->rank] ? POLLIN : 0) | (writing[p->rank] ? POLLOUT : 0));
    if (events != 0) {
      fds.push_back({p->data.get(), events, 0});
      control_of.push_back(nullptr);
      data_of.push_back(p.get());
    }
  }
  // The listener stays open for the life of the mesh: a peer dials in when it first needs this rank,
  // and strangers are handshaken here too, each under its own short deadline.
  const size_t listener_from = fds.size();
  if (listener_state_) listener_state_->add_pollfds(&fds);
  if (fds.empty()) return;
  int rc = ::poll(fds.data(), fds.size(), listener_state_ ? listener_state_->poll_timeout_ms(timeout_ms) : timeout_ms);
  if (rc < 0) return;
  if (rc == 0) {
    // Nothing came in a whole wait: try every socket again rather than trust a threshold.
    for (auto& p : peers_) {
      if (p) p->drained = false;
    }
  }
  for (size_t i = 0; i < listener_from; ++i) {
    if (fds[i].revents == 0) continue;
    if (control_of[i] != nullptr) {
      read_control_frame(*control_of[i]);
    } else {
      data_of[i]->drained = false;
    }
  }
  bool listener_ready = false;
  for (size_t i = listener_from; i < fds.size(); ++i) listener_ready |= fds[i].revents != 0;
  if (listener_ready || (listener_state_ && listener_state_->has_pending())) service_listener();
}

std::vector<int> Mesh::silent_peers() {
  std::vector<Peer*> asked;
  std::vector<int> silent, answered_at;
  for (auto& p : peers_) {
    if (!p || !p->control.valid() || p->said_bye) continue;
    FrameHeader h{kFrameMagic, kPing, 0};
    std::string why;
    if (!write_all(p->control.get(), &h, sizeof(h), Deadline::after_seconds(kAbortGraceSeconds), &why)) {
      silent.push_back(p->rank);
      continue;
    }
    asked.push_back(p.get());
    answered_at.push_back(p->pongs + 1);
  }
  Deadline grace = Deadline::after_seconds(kProbeSeconds);
  std::vector<pollfd> fds;
  auto unanswered = [&] {
    std::vector<Peer*> left;
    for (size_t i = 0; i < asked.size(); ++i) {
      // A peer that said goodbye meanwhile left in order: not silent.
      if (asked[i]->pongs < answered_at[i] && !asked[i]->said_bye) left.push_back(asked[i]);
    }
    return left;
  };
  while (!unanswered().empty() && !grace.expired()) {
    // Every peer is read, not only those yet to answer: another rank probing at the same moment must get
    // this rank's answer too, or each would blame the other.
    fds.clear();
    std::vector<Peer*> polled;
    for (Peer* p : asked) {
      if (p->said_bye) continue;
      fds.push_back({p->control.get(), POLLIN, 0});
      polled.push_back(p);
    }
    if (::poll(fds.data(), fds.size(), grace.remaining_ms(50)) <= 0) continue;
    // Reading throws on a death, or on an abort with its cause.
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_control_frame(*polled[i]);
    }
  }
  for (Peer* p : unanswered()) silent.push_back(p->rank);
  std::sort(silent.begin(), silent.end());
  return silent;
}

void Mesh::time_out(const std::vector<SendItem>& sends, const std::vector<RecvItem>& recvs, const Active& active,
                    const std::string& what) {
  std::string waiting;
  std::vector<int> waited_on;
  for (int r = 0; r < options_.size; ++r) {
    if (active.recv[r] >= 0) {
      const RecvItem& it = recvs[active.recv[r]];
      const bool length_unknown = it.grow_into != nullptr && !it.length_known;
      waiting += (waiting.empty() ? "" : "; ") + std::string("receiving from ") + peer_name(r) + " (" +
                 (length_unknown ? std::string("nothing yet; its length is not known")
                                 : std::to_string(it.done) + " of " + std::to_string(it.len) + " bytes") +
                 ")";
      waited_on.push_back(r);
    }
    if (active.send[r] >= 0) {
      const SendItem& it = sends[active.send[r]];
      if (!waits_on_own_receive(it)) {
        waiting += (waiting.empty() ? "" : "; ") + std::string("sending to ") + peer_name(r) + " (" +
                   std::to_string(it.done) + " of " + std::to_string(it.len) + " bytes)";
        waited_on.push_back(r);
      }
    }
  }
  // The peer this rank waits on may itself be waiting on the real culprit (a ring passes a stall along):
  // blame a silent peer, the one waited on first.
  std::vector<int> silent = silent_peers();
  auto is_silent = [&](int r) { return std::binary_search(silent.begin(), silent.end(), r); };
  int blamed = -1;
  for (int r : waited_on) {
    if (blamed < 0 && is_silent(r)) blamed = r;
  }
  if (blamed < 0 && !silent.empty()) blamed = silent.front();
  std::string msg = what + " timed out on " + peer_name(options_.rank) + ": still " + waiting;
  if (blamed >= 0) {
    msg += "; " + peer_name(blamed) + " is not responding (stopped, hung, or not in a collective)";
  } else if (!waited_on.empty()) {
    // A live peer that holds back may be a relay (a log-round gather, a ring) waiting on the real culprit,
    // which it is about to blame: its abort carries that cause, and reading it here throws it.
    const std::vector<bool> none(options_.size, false);
    Deadline relay = Deadline::after_seconds(kRelayGraceSeconds);
    while (!relay.expired()) watch(none, none, relay.remaining_ms(100));
    blamed = waited_on.front();
    msg += "; " + peer_name(blamed) + " still answers but has not sent or taken its data";
  }
  fail(ErrorKind::kTimeout, msg, blamed);
}

bool Mesh::waits_on_bulk_tcp(const std::vector<SendItem>& sends, const std::vector<RecvItem>& recvs,
                             const Active& active) const {
  bool any = false;
  for (int r = 0; r < options_.size; ++r) {
    if (!peers_[r]) continue;
    const bool recv_waits = active.recv[r] >= 0;
    const bool send_waits = active.send[r] >= 0 && !waits_on_own_receive(sends[active.send[r]]);
    if (!recv_waits && !send_waits) continue;
    // Shared memory has no wake-up as cheap and prompt as a socket's; it keeps the spinning wait.
    if (peers_[r]->shm) return false;
    if (recv_waits && !streams(recvs[active.recv[r]])) return false;
    any = true;  // a send waits for socket space: the peer has a full buffer to read first
  }
  return any;
}

void Mesh::set_wake_thresholds(const std::vector<RecvItem>& recvs, const Active& active) {
  for (int r = 0; r < options_.size; ++r) {
    if (!peers_[r] || peers_[r]->shm || active.recv[r] < 0) continue;
    Peer& peer = *peers_[r];
    const RecvItem& item = recvs[active.recv[r]];
    int lowat = streams(item) ? int(std::min(bytes_to_come(item), kTcpWakeBytes)) : 1;
    if (lowat == peer.rcvlowat) continue;
    // A failure leaves the previous threshold, which only changes how often this rank wakes.
    if (::setsockopt(peer.data.get(), SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat)) == 0) peer.rcvlowat = lowat;
  }
}

void Mesh::wait_for_progress(const std::vector<SendItem>& sends, const std::vector<RecvItem>& recvs,
                             const Active& active, const Deadline& deadline, const std::string& what) {
  if (deadline.expired()) time_out(sends, recvs, active, what);
  set_wake_thresholds(recvs, active);
  std::vector<bool> reading(options_.size, false), writing(options_.size, false);
  bool any_tcp = false;
  ShmRing* shm_wait_data = nullptr;
  ShmRing* shm_wait_space = nullptr;
  for (int r = 0; r < options_.size; ++r) {
    if (!peers_[r]) continue;
    Peer& peer = *peers_[r];
    // A TCP peer's goodbye closes its data socket, which the pass just before this one reads as the end.
    // A shared-memory ring has no end to read: a peer sends all it ever will before it says goodbye, so
    // a goodbye seen before a pass that moved nothing means what this rank waits for will never come.
    if (peer.shm && peer.said_bye && active.recv[r] >= 0) peer_lost(peer, "expected data from it");
    if (peer.shm && peer.said_bye && active.send[r] >= 0) peer_lost(peer, "was sending to it");
    if (active.recv[r] >= 0) {
      reading[r] = true;
      any_tcp |= !peer.shm;
      if (peer.shm && !shm_wait_data) shm_wait_data = &peer.in;
    }
    if (active.send[r] >= 0 && !waits_on_own_receive(sends[active.send[r]])) {
      writing[r] = true;
      any_tcp |= !peer.shm;
      if (peer.shm && !shm_wait_space) shm_wait_space = &peer.out;
    }
  }
  if (any_tcp) {
    // Shared-memory items can't wake poll(); keep the sleep short when some are also pending.
    bool shm_pending = shm_wait_data || shm_wait_space;
    watch(reading, writing, deadline.remaining_ms(shm_pending ? 1 : 100));
    return;
  }
  int timeout_us = std::max(1, std::min(deadline.remaining_ms(2), 2)) * 1000;
  if (shm_wait_data) {
    shm_wait_data->wait_for_data(timeout_us);
  } else if (shm_wait_space) {
    shm_wait_space->wait_for_space(timeout_us);
  }
  watch(reading, writing, 0);
}

void Mesh::check_items(const std::vector<SendItem>& sends, const std::vector<RecvItem>& recvs,
                       const std::string& what) const {
  if (broken_ || closed_) {
    fail(ErrorKind::kPeerFailure, "the communicator is unusable after an earlier failure or shutdown; call "
                                  "shutdown() and init() again");
  }
  for (const SendItem& s : sends) {
    if (s.peer < 0 || s.peer >= options_.size || s.peer == options_.rank) {
      fail(ErrorKind::kInvalidArgument, "send to invalid peer " + std::to_string(s.peer));
    }
    if (peers_[s.peer]->said_bye) {
      fail(ErrorKind::kPeerFailure, peer_name(s.peer) + " has already shut down; " + what + " cannot reach it",
           s.peer);
    }
  }
  for (const RecvItem& r : recvs) {
    if (r.peer < 0 || r.peer >= options_.size || r.peer == options_.rank) {
      fail(ErrorKind::kInvalidArgument, "receive from invalid peer " + std::to_string(r.peer));
    }
  }
}

// One pass over every item: items to the same peer go strictly in order, so only the first unfinished
// one per peer moves (and is recorded as active).
Mesh::Pass Mesh::progress_all(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, Active& active) {
  std::fill(active.send.begin(), active.send.end(), -1);
  std::fill(active.recv.begin(), active.recv.end(), -1);
  Pass pass;
  for (size_t i = 0; i < sends.size(); ++i) {
    SendItem& s = sends[i];
    if (item_complete(s)) continue;
    pass.pending = true;
    if (active.send[s.peer] >= 0) continue;
    pass.progressed |= progress_send(s, *peers_[s.peer]);
    if (!item_complete(s)) active.send[s.peer] = int(i);
  }
  for (size_t i = 0; i < recvs.size(); ++i) {
    RecvItem& r = recvs[i];
    if (item_complete(r)) continue;
    pass.pending = true;
    if (active.recv[r.peer] >= 0) continue;
    pass.progressed |= progress_recv(r, *peers_[r.peer]);
    if (!item_complete(r)) active.recv[r.peer] = int(i);
  }
  return pass;
}

void Mesh::run(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, const Deadline& deadline,
               const std::string& what, const WaitPolicy* policy) {
  const WaitPolicy wait = policy ? *policy : default_wait_;
  check_items(sends, recvs, what);
  connect_for(sends, recvs, deadline);
  Active active{std::vector<int>(options_.size), std::vector<int>(options_.size)};
  IdleSpell idle;
  while (true) {
    Pass pass = progress_all(sends, recvs, active);
    if (!pass.pending) return;
    if (pass.progressed) {
      idle.rounds = 0;
      continue;
    }
    if (waits_on_bulk_tcp(sends, recvs, active)) {
      wait_for_progress(sends, recvs, active, deadline, what);
      continue;
    }
    // A spinning wait tries every socket on every pass.
    for (auto& p : peers_) {
      if (p) p->drained = false;
    }
    if (!spin_or_yield(wait, idle)) wait_for_progress(sends, recvs, active, deadline, what);
  }
}

void Mesh::abort(int cause_rank, const std::string& message) {
  if (broken_ || closed_) return;
  broken_ = true;
  stop_listening();
  std::string payload(4, '\0');
  std::memcpy(payload.data(), &cause_rank, 4);
  payload += message.substr(0, kMaxControlPayload - 8);
  Deadline deadline = Deadline::after_seconds(0.5);
  // Explanations first, on every control connection; only then drop the data connections.
  for (auto& peer : peers_) {
    if (!peer || !peer->control.valid() || peer->said_bye) continue;
    FrameHeader h{kFrameMagic, kAbort, payload.size()};
    std::string why;
    if (write_all(peer->control.get(), &h, sizeof(h), deadline, &why)) {
      write_all(peer->control.get(), payload.data(), payload.size(), deadline, &why);
    }
  }
  for (auto& peer : peers_) {
    if (!peer) continue;
    ::shutdown(peer->data.get(), SHUT_RDWR);
    peer->data.reset();
    peer->control.reset();
  }
}

void Mesh::close() {
  if (closed_ || broken_) return;
  closed_ = true;
  stop_listening();
  Deadline deadline = Deadline::after_seconds(1.0);
  for (auto& peer : peers_) {
    if (!peer || !peer->control.valid()) continue;
    FrameHeader h{kFrameMagic, kBye, 0};
    std::string why;
    write_all(peer->control.get(), &h, sizeof(h), deadline, &why);
  }
  for (auto& peer : peers_) {
    if (!peer) continue;
    peer->data.reset();
    peer->control.reset();
  }
}

}  // namespace shvd
