#include "transport/mesh.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
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

namespace shvd {
namespace {

constexpr uint32_t kFrameMagic = 0x44564853;  // "SHVD"
enum FrameType : uint32_t { kData = 1, kAbort = 2, kBye = 3, kShmSetup = 4, kShmAck = 5 };

struct FrameHeader {
  uint32_t magic;
  uint32_t type;
  uint64_t length;
};
static_assert(sizeof(FrameHeader) == 16, "frame header is sent raw");

// Largest piece moved per step, so receivers start (and gated sends follow) early.
constexpr size_t kPieceBytes = 256 << 10;
constexpr size_t kMaxControlPayload = 64 << 10;
constexpr size_t kDescribeBytes = 16;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::string peer_name(int rank) { return "rank " + std::to_string(rank); }

void send_frame_blocking(int fd, uint32_t type, const void* payload, size_t len, const Deadline& deadline,
                         int peer) {
  FrameHeader h{kFrameMagic, type, len};
  std::string why;
  if (!write_all(fd, &h, sizeof(h), deadline, &why) || (len > 0 && !write_all(fd, payload, len, deadline, &why))) {
    fail(ErrorKind::kPeerFailure, "sending to " + peer_name(peer) + " failed: " + why, peer);
  }
}

std::string read_frame_blocking(int fd, uint32_t expected_type, const Deadline& deadline, int peer) {
  FrameHeader h{};
  std::string why;
  if (!read_all(fd, &h, sizeof(h), deadline, &why)) {
    fail(ErrorKind::kPeerFailure, "reading from " + peer_name(peer) + " failed: " + why, peer);
  }
  if (h.magic != kFrameMagic || h.type != expected_type || h.length > kMaxControlPayload) {
    fail(ErrorKind::kPeerFailure, "unexpected frame from " + peer_name(peer) + " while setting up", peer);
  }
  std::string payload(h.length, '\0');
  if (h.length > 0 && !read_all(fd, payload.data(), h.length, deadline, &why)) {
    fail(ErrorKind::kPeerFailure, "reading from " + peer_name(peer) + " failed: " + why, peer);
  }
  return payload;
}

}  // namespace

struct Mesh::Peer {
  int rank = -1;
  Fd fd;
  bool shm = false;
  ShmSegment segment;
  ShmRing out;
  ShmRing in;
  // Incoming TCP framing state.
  uint8_t header_buf[sizeof(FrameHeader)];
  size_t header_have = 0;
  // Outgoing DATA frame half written: an abort frame cannot be injected into the stream then.
  bool send_frame_open = false;
  bool said_bye = false;
};

int Mesh::bind_listener(const std::string& host, Fd* listener) {
  int port = 0;
  *listener = listen_tcp(host, 0, &port);
  return port;
}

Mesh::Mesh(MeshOptions options, Fd listener) : options_(std::move(options)), listener_(std::move(listener)) {
  const int n = options_.size;
  if (int(options_.hosts.size()) != n || int(options_.ports.size()) != n || int(options_.host_keys.size()) != n) {
    fail(ErrorKind::kInvalidArgument, "mesh needs one host, port and host key per rank");
  }
  peers_.resize(n);
  int local_ranks = 0;
  for (int r = 0; r < n; ++r) local_ranks += options_.host_keys[r] == options_.host_keys[options_.rank];
  spin_us_ = options_.spin_us;
  if (spin_us_ < 0) {
    // Busy-waiting only pays when every local rank has a core; otherwise it steals the peer's time slice.
    int cores = int(std::thread::hardware_concurrency());
    spin_us_ = local_ranks <= cores ? 50 : 0;
  }
  connect_all();
  setup_shm();
}

Mesh::~Mesh() {
  if (!closed_ && !broken_) {
    try {
      close();
    } catch (...) {
    }
  }
}

bool Mesh::uses_shm(int peer) const { return peers_[peer] && peers_[peer]->shm; }

void Mesh::connect_all() {
  const int me = options_.rank;
  const int n = options_.size;
  Deadline deadline = Deadline::after_seconds(options_.connect_timeout_s);
  for (int j = 0; j < me; ++j) {
    Fd fd = connect_tcp_with_retry(options_.hosts[j], options_.ports[j], deadline, peer_name(j));
    authenticate_outgoing(fd.get(), options_.secret, me, j, n, deadline);
    auto peer = std::make_unique<Peer>();
    peer->rank = j;
    peer->fd = std::move(fd);
    peers_[j] = std::move(peer);
  }
  int missing = n - 1 - me;
  int refused = 0;
  std::string last_refusal;
  while (missing > 0) {
    Fd fd = accept_before(listener_.get(), deadline);
    if (!fd.valid()) {
      std::string waiting;
      for (int j = me + 1; j < n; ++j) {
        if (!peers_[j]) waiting += (waiting.empty() ? "" : ", ") + std::to_string(j);
      }
      std::string msg = peer_name(me) + " timed out after " + std::to_string(options_.connect_timeout_s) +
                        " s waiting for rank(s) " + waiting + " to connect";
      if (refused > 0) {
        msg += "; refused " + std::to_string(refused) + " connection(s): " + last_refusal;
        fail(ErrorKind::kAuthentication, msg);
      }
      fail(ErrorKind::kTimeout, msg);
    }
    // A stranger gets a few seconds at most, so it cannot hold the job's setup hostage.
    Deadline auth_deadline = Deadline::after_seconds(std::min(5.0, options_.connect_timeout_s));
    if (auth_deadline.at() > deadline.at()) auth_deadline = deadline;
    std::string why;
    int peer_rank = authenticate_incoming(fd.get(), options_.secret, me, n, auth_deadline, &why);
    if (peer_rank < 0 || peers_[peer_rank]) {
      ++refused;
      last_refusal = peer_rank < 0 ? why : "a second connection claiming " + peer_name(peer_rank);
      continue;
    }
    auto peer = std::make_unique<Peer>();
    peer->rank = peer_rank;
    peer->fd = std::move(fd);
    peers_[peer_rank] = std::move(peer);
    --missing;
  }
  listener_.reset();
  for (auto& peer : peers_) {
    if (peer) {
      set_nonblocking(peer->fd.get(), true);
      tune_data_socket(peer->fd.get(), options_.tcp_socket_buffer_bytes);
    }
  }
}

void Mesh::setup_shm() {
  if (!options_.enable_shm) return;
  const int me = options_.rank;
  const int n = options_.size;
  Deadline deadline = Deadline::after_seconds(options_.connect_timeout_s);
  auto same_host = [&](int j) { return j != me && options_.host_keys[j] == options_.host_keys[me]; };
  // Create every segment we own and announce it before waiting on anyone, so no pair can deadlock.
  uint8_t tag[6];
  random_bytes(tag, sizeof(tag));
  char tag_hex[13];
  for (int i = 0; i < 6; ++i) snprintf(tag_hex + 2 * i, 3, "%02x", tag[i]);
  for (int j = me + 1; j < n; ++j) {
    if (!same_host(j)) continue;
    std::string name = "/shvd-" + std::to_string(getpid()) + "-" + tag_hex + "-" + std::to_string(me) + "-" +
                       std::to_string(j);
    Peer& peer = *peers_[j];
    peer.segment = ShmSegment::create(name, options_.shm_buffer_bytes);
    std::string payload(8, '\0');
    uint64_t capacity = options_.shm_buffer_bytes;
    std::memcpy(payload.data(), &capacity, 8);
    payload += name;
    send_frame_blocking(peer.fd.get(), kShmSetup, payload.data(), payload.size(), deadline, j);
  }
  for (int j = 0; j < me; ++j) {
    if (!same_host(j)) continue;
    Peer& peer = *peers_[j];
    std::string payload = read_frame_blocking(peer.fd.get(), kShmSetup, deadline, j);
    if (payload.size() < 9) fail(ErrorKind::kPeerFailure, "malformed shared-memory setup from " + peer_name(j), j);
    uint64_t capacity = 0;
    std::memcpy(&capacity, payload.data(), 8);
    peer.segment = ShmSegment::open(payload.substr(8), capacity);
    peer.out = peer.segment.outgoing(false);
    peer.in = peer.segment.incoming(false);
    peer.shm = true;
    send_frame_blocking(peer.fd.get(), kShmAck, nullptr, 0, deadline, j);
  }
  for (int j = me + 1; j < n; ++j) {
    if (!same_host(j)) continue;
    Peer& peer = *peers_[j];
    read_frame_blocking(peer.fd.get(), kShmAck, deadline, j);
    peer.segment.unlink_name();
    peer.out = peer.segment.outgoing(true);
    peer.in = peer.segment.incoming(true);
    peer.shm = true;
  }
}

bool Mesh::progress_send(SendItem& item, Peer& peer) {
  size_t limit = item.gate ? std::min(*item.gate, item.len) : item.len;
  if (peer.shm) {
    if (item.done >= limit) return false;
    size_t n = peer.out.write_some(item.data + item.done, std::min(limit - item.done, kPieceBytes));
    item.done += n;
    return n > 0;
  }
  FrameHeader header{kFrameMagic, kData, item.len};
  iovec iov[2];
  int count = 0;
  if (item.header_done < sizeof(header)) {
    iov[count++] = {reinterpret_cast<uint8_t*>(&header) + item.header_done, sizeof(header) - item.header_done};
  }
  size_t payload = std::min(limit - std::min(limit, item.done), options_.tcp_chunk_bytes);
  if (payload > 0) iov[count++] = {const_cast<uint8_t*>(item.data + item.done), payload};
  if (count == 0) return false;
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = count;
  ssize_t n = ::sendmsg(peer.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    fail(ErrorKind::kPeerFailure,
         "connection to " + peer_name(peer.rank) + " lost while sending (" + errno_text(errno) +
             "); that rank probably died or exited",
         peer.rank);
  }
  size_t sent = size_t(n);
  size_t to_header = std::min(sent, sizeof(header) - item.header_done);
  item.header_done += to_header;
  item.done += sent - to_header;
  peer.send_frame_open = item.done < item.len;
  return n > 0;
}

bool Mesh::read_frame_header(RecvItem& item, Peer& peer) {
  while (peer.header_have < sizeof(FrameHeader)) {
    ssize_t n = ::recv(peer.fd.get(), peer.header_buf + peer.header_have, sizeof(FrameHeader) - peer.header_have,
                       MSG_DONTWAIT);
    if (n > 0) {
      peer.header_have += size_t(n);
      continue;
    }
    if (n == 0) {
      fail(ErrorKind::kPeerFailure,
           peer_name(peer.rank) + " closed its connection while this rank expected data from it; it probably died",
           peer.rank);
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    fail(ErrorKind::kPeerFailure, "connection to " + peer_name(peer.rank) + " lost: " + errno_text(errno), peer.rank);
  }
  FrameHeader h;
  std::memcpy(&h, peer.header_buf, sizeof(h));
  peer.header_have = 0;
  if (h.magic != kFrameMagic) {
    fail(ErrorKind::kPeerFailure, "corrupt stream from " + peer_name(peer.rank), peer.rank);
  }
  if (h.type != kData) {
    handle_control_frame(peer, h.type, h.length, true);
    return false;
  }
  if (item.grow_into != nullptr) {
    if (h.length > item.max_len || h.length < kDescribeBytes) {
      fail(ErrorKind::kMismatch, peer_name(peer.rank) + " sent a " + std::to_string(h.length) +
                                     "-byte block where at most " + std::to_string(item.max_len) + " fit",
           peer.rank);
    }
    item.grow_into->resize(h.length);
    item.dst = item.grow_into->data();
    item.len = h.length;
  } else if (h.length != item.len) {
    fail(ErrorKind::kMismatch, peer_name(peer.rank) + " sent " + std::to_string(h.length) +
                                   " bytes where this rank expected " + std::to_string(item.len) +
                                   "; the ranks disagree about this operation",
         peer.rank);
  }
  item.header_read = true;
  return true;
}

bool Mesh::progress_recv_tcp(RecvItem& item, Peer& peer) {
  bool progressed = false;
  if (!item.header_read) {
    if (!read_frame_header(item, peer)) return false;
    progressed = true;
  }
  const size_t elem = item.reduce ? dtype_size(item.dtype) : 1;
  if (item.reduce && !item.staging) item.staging.reset(new uint8_t[std::max(options_.tcp_chunk_bytes, elem)]);
  while (item.done < item.len) {
    uint8_t* into;
    size_t want;
    if (item.reduce) {
      into = item.staging.get() + item.staged;
      size_t room = std::max(options_.tcp_chunk_bytes, elem) - item.staged;
      want = std::min(room, item.len - item.done - item.staged);
    } else {
      into = item.dst + item.done;
      want = std::min(item.len - item.done, options_.tcp_chunk_bytes);
    }
    ssize_t n = ::recv(peer.fd.get(), into, want, MSG_DONTWAIT);
    if (n == 0) {
      fail(ErrorKind::kPeerFailure,
           peer_name(peer.rank) + " closed its connection in the middle of a transfer; it probably died",
           peer.rank);
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return progressed;
      fail(ErrorKind::kPeerFailure, "connection to " + peer_name(peer.rank) + " lost: " + errno_text(errno),
           peer.rank);
    }
    progressed = true;
    if (!item.reduce) {
      item.done += size_t(n);
      continue;
    }
    item.staged += size_t(n);
    size_t whole = item.staged / elem * elem;
    if (whole > 0) {
      reduce_inplace(item.dst + item.done, item.staging.get(), whole / elem, item.dtype, item.op);
      item.done += whole;
      item.staged -= whole;
      if (item.staged > 0) std::memmove(item.staging.get(), item.staging.get() + whole, item.staged);
    }
  }
  return progressed;
}

bool Mesh::progress_recv_shm(RecvItem& item, Peer& peer) {
  bool progressed = false;
  if (item.grow_into != nullptr && !item.header_read) {
    if (item.grow_into->size() < kDescribeBytes) item.grow_into->resize(kDescribeBytes);
    while (item.done < kDescribeBytes) {
      const uint8_t* region;
      size_t n = peer.in.peek(&region);
      if (n == 0) return progressed;
      size_t take = std::min(n, kDescribeBytes - item.done);
      std::memcpy(item.grow_into->data() + item.done, region, take);
      peer.in.consume(take);
      item.done += take;
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
    item.header_read = true;
  }
  const size_t elem = item.reduce ? dtype_size(item.dtype) : 1;
  if (item.reduce && !item.staging) item.staging.reset(new uint8_t[8]);
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
      std::memcpy(item.staging.get() + item.staged, region, part);
      peer.in.consume(part);
      item.staged += part;
      if (item.staged == elem) {
        reduce_inplace(item.dst + item.done, item.staging.get(), 1, item.dtype, item.op);
        item.done += elem;
        item.staged = 0;
      }
      continue;
    }
    size_t whole = take / elem * elem;
    reduce_inplace(item.dst + item.done, region, whole / elem, item.dtype, item.op);
    peer.in.consume(whole);
    item.done += whole;
  }
  return progressed;
}

bool Mesh::progress_recv(RecvItem& item, Peer& peer) {
  return peer.shm ? progress_recv_shm(item, peer) : progress_recv_tcp(item, peer);
}

void Mesh::handle_control_frame(Peer& peer, uint32_t type, uint64_t length, bool expecting_data) {
  if (type == kAbort) {
    std::string payload(std::min<uint64_t>(length, kMaxControlPayload), '\0');
    std::string why;
    int cause = peer.rank;
    Deadline deadline = Deadline::after_seconds(1.0);
    if (payload.size() >= 4 && read_all(peer.fd.get(), payload.data(), payload.size(), deadline, &why)) {
      std::memcpy(&cause, payload.data(), 4);
      if (cause < 0 || cause >= options_.size) cause = peer.rank;
      fail(ErrorKind::kPeerFailure, payload.substr(4) + " (reported by " + peer_name(peer.rank) + ")", cause);
    }
    fail(ErrorKind::kPeerFailure, peer_name(peer.rank) + " aborted the job", peer.rank);
  }
  if (type == kBye) {
    peer.said_bye = true;
    if (expecting_data) {
      fail(ErrorKind::kPeerFailure,
           peer_name(peer.rank) + " has shut down while this rank still expected data from it; did the ranks call "
                                  "different numbers of collectives?",
           peer.rank);
    }
    return;
  }
  fail(ErrorKind::kPeerFailure, "unexpected frame type " + std::to_string(type) + " from " + peer_name(peer.rank),
       peer.rank);
}

// Looks at connections this rank is not currently reading, for aborts, goodbyes and deaths.
void Mesh::check_control(const std::vector<bool>& active_recv, bool block, int timeout_ms,
                         const std::vector<bool>& want_write) {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (auto& p : peers_) {
    if (!p || !p->fd.valid()) continue;
    short events = 0;
    bool reading = active_recv[p->rank] && !p->shm;
    if (reading) {
      events |= POLLIN;
    } else if (!p->said_bye) {
      // For a TCP peer not being read, its next bytes may be a later operation's data: only a hangup counts.
      events |= p->shm ? (POLLIN | POLLRDHUP) : POLLRDHUP;
    }
    if (want_write[p->rank] && !p->shm) events |= POLLOUT;
    if (events == 0) continue;
    fds.push_back({p->fd.get(), events, 0});
    ranks.push_back(p->rank);
  }
  if (fds.empty()) {
    if (block && timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return;
  }
  int rc = ::poll(fds.data(), fds.size(), block ? timeout_ms : 0);
  if (rc <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    Peer& peer = *peers_[ranks[i]];
    if (fds[i].revents == 0) continue;
    if (active_recv[peer.rank] && !peer.shm) continue;  // its reader handles data, frames and EOF
    if (!(fds[i].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))) continue;
    FrameHeader h{};
    ssize_t n = ::recv(peer.fd.get(), &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      if (peer.said_bye) continue;
      fail(ErrorKind::kPeerFailure,
           peer_name(peer.rank) + " died or lost its connection (closed without saying goodbye)", peer.rank);
    }
    if (n < ssize_t(sizeof(h)) || h.magic != kFrameMagic) continue;
    if (h.type == kData) continue;  // a later operation's data; nothing is wrong
    ::recv(peer.fd.get(), &h, sizeof(h), MSG_DONTWAIT);
    handle_control_frame(peer, h.type, h.length, false);
  }
}

void Mesh::wait_for_progress(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs,
                             const std::vector<int>& active_send, const std::vector<int>& active_recv,
                             const Deadline& deadline, const std::string& what) {
  if (deadline.expired()) {
    std::string waiting;
    for (int r = 0; r < options_.size; ++r) {
      if (active_recv[r] >= 0) {
        const RecvItem& it = recvs[active_recv[r]];
        waiting += (waiting.empty() ? "" : "; ") + std::string("receiving from ") + peer_name(r) + " (" +
                   std::to_string(it.done) + " of " + std::to_string(it.len) + " bytes)";
      }
      if (active_send[r] >= 0) {
        const SendItem& it = sends[active_send[r]];
        bool gated = it.gate && *it.gate <= it.done;
        if (!gated) {
          waiting += (waiting.empty() ? "" : "; ") + std::string("sending to ") + peer_name(r) + " (" +
                     std::to_string(it.done) + " of " + std::to_string(it.len) + " bytes)";
        }
      }
    }
    fail(ErrorKind::kTimeout, what + " timed out on " + peer_name(options_.rank) + ": still " + waiting);
  }
  std::vector<bool> reading(options_.size, false), writing(options_.size, false);
  bool any_tcp = false;
  ShmRing* shm_wait_data = nullptr;
  ShmRing* shm_wait_space = nullptr;
  for (int r = 0; r < options_.size; ++r) {
    if (!peers_[r]) continue;
    Peer& peer = *peers_[r];
    if (active_recv[r] >= 0) {
      reading[r] = true;
      if (peer.shm) {
        if (!shm_wait_data) shm_wait_data = &peer.in;
      } else {
        any_tcp = true;
      }
    }
    if (active_send[r] >= 0) {
      const SendItem& it = sends[active_send[r]];
      bool gated = it.gate && *it.gate <= it.done && it.header_done == sizeof(FrameHeader);
      if (!gated) {
        if (peer.shm) {
          if (!shm_wait_space) shm_wait_space = &peer.out;
        } else {
          writing[r] = true;
          any_tcp = true;
        }
      }
    }
  }
  if (any_tcp) {
    // Shared-memory items can't wake poll(); keep the sleep short when some are also pending.
    bool shm_pending = shm_wait_data || shm_wait_space;
    check_control(reading, true, deadline.remaining_ms(shm_pending ? 1 : 100), writing);
    return;
  }
  int timeout_us = std::max(1, std::min(deadline.remaining_ms(2), 2)) * 1000;
  if (shm_wait_data) {
    shm_wait_data->wait_for_data(timeout_us);
  } else if (shm_wait_space) {
    shm_wait_space->wait_for_space(timeout_us);
  }
  check_control(reading, false, 0, writing);
}

void Mesh::run(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, const Deadline& deadline,
               const std::string& what) {
  if (broken_ || closed_) {
    fail(ErrorKind::kPeerFailure, "the communicator is unusable after an earlier failure or shutdown; call "
                                  "shutdown() and init() again");
  }
  for (auto& s : sends) {
    if (s.peer < 0 || s.peer >= options_.size || s.peer == options_.rank) {
      fail(ErrorKind::kInvalidArgument, "send to invalid peer " + std::to_string(s.peer));
    }
    if (peers_[s.peer]->said_bye) {
      fail(ErrorKind::kPeerFailure, peer_name(s.peer) + " has already shut down; " + what + " cannot reach it",
           s.peer);
    }
  }
  for (auto& r : recvs) {
    if (r.peer < 0 || r.peer >= options_.size || r.peer == options_.rank) {
      fail(ErrorKind::kInvalidArgument, "receive from invalid peer " + std::to_string(r.peer));
    }
  }
  const int n = options_.size;
  std::vector<int> active_send(n), active_recv(n);
  auto spin_started = std::chrono::steady_clock::now();
  int idle_rounds = 0;
  while (true) {
    std::fill(active_send.begin(), active_send.end(), -1);
    std::fill(active_recv.begin(), active_recv.end(), -1);
    bool pending = false;
    bool progressed = false;
    for (size_t i = 0; i < sends.size(); ++i) {
      SendItem& s = sends[i];
      Peer& peer = *peers_[s.peer];
      bool complete = s.done == s.len && (peer.shm || s.header_done == sizeof(FrameHeader));
      if (complete) continue;
      if (active_send[s.peer] >= 0) {
        pending = true;  // queued behind an earlier send to the same peer
        continue;
      }
      active_send[s.peer] = int(i);
      progressed |= progress_send(s, peer);
      complete = s.done == s.len && (peer.shm || s.header_done == sizeof(FrameHeader));
      pending |= !complete;
    }
    for (size_t i = 0; i < recvs.size(); ++i) {
      RecvItem& r = recvs[i];
      Peer& peer = *peers_[r.peer];
      bool complete = r.done == r.len && (r.header_read || (peer.shm && r.grow_into == nullptr));
      if (complete) continue;
      if (active_recv[r.peer] >= 0) {
        pending = true;  // queued behind an earlier receive from the same peer
        continue;
      }
      active_recv[r.peer] = int(i);
      progressed |= progress_recv(r, peer);
      complete = r.done == r.len && (r.header_read || (peer.shm && r.grow_into == nullptr));
      pending |= !complete;
    }
    if (!pending) return;
    if (progressed) {
      idle_rounds = 0;
      continue;
    }
    // Recompute which items are still active for the wait (completed ones drop out).
    for (int r = 0; r < n; ++r) {
      if (active_send[r] >= 0) {
        SendItem& s = sends[active_send[r]];
        if (s.done == s.len && (peers_[r]->shm || s.header_done == sizeof(FrameHeader))) active_send[r] = -1;
      }
      if (active_recv[r] >= 0) {
        RecvItem& it = recvs[active_recv[r]];
        if (it.done == it.len && (it.header_read || (peers_[r]->shm && it.grow_into == nullptr))) active_recv[r] = -1;
      }
    }
    if (idle_rounds++ == 0) spin_started = std::chrono::steady_clock::now();
    auto spun = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - spin_started);
    if (spun.count() < spin_us_) {
      cpu_relax();
      continue;
    }
    if (idle_rounds < 8 + spin_us_) {
      sched_yield();
      continue;
    }
    wait_for_progress(sends, recvs, active_send, active_recv, deadline, what);
  }
}

void Mesh::abort(int cause_rank, const std::string& message) {
  if (broken_ || closed_) return;
  broken_ = true;
  std::string payload(4, '\0');
  std::memcpy(payload.data(), &cause_rank, 4);
  payload += message.substr(0, kMaxControlPayload - 8);
  Deadline deadline = Deadline::after_seconds(0.5);
  for (auto& peer : peers_) {
    if (!peer || !peer->fd.valid()) continue;
    if (!peer->send_frame_open) {
      FrameHeader h{kFrameMagic, kAbort, payload.size()};
      std::string why;
      if (write_all(peer->fd.get(), &h, sizeof(h), deadline, &why)) {
        write_all(peer->fd.get(), payload.data(), payload.size(), deadline, &why);
      }
    }
    ::shutdown(peer->fd.get(), SHUT_WR);
  }
  for (auto& peer : peers_) {
    if (peer) peer->fd.reset();
  }
}

void Mesh::close() {
  if (closed_ || broken_) return;
  closed_ = true;
  Deadline deadline = Deadline::after_seconds(1.0);
  for (auto& peer : peers_) {
    if (!peer || !peer->fd.valid()) continue;
    if (!peer->send_frame_open) {
      FrameHeader h{kFrameMagic, kBye, 0};
      std::string why;
      write_all(peer->fd.get(), &h, sizeof(h), deadline, &why);
    }
    ::shutdown(peer->fd.get(), SHUT_WR);
  }
  for (auto& peer : peers_) {
    if (peer) peer->fd.reset();
  }
}

}  // namespace shvd
