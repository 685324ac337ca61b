// The mesh of connections of one rank, and the progress loop that moves data over it.
//
// A pair of ranks that talks holds two authenticated TCP connections: a control connection that carries
// only small frames (shared-memory setup, abort with its cause, goodbye) and a data connection that carries
// raw bytes. Same-host pairs move their data through a shared-memory segment instead. Pairs connect
// lazily: at formation a rank connects only its two ring neighbours, and any other pair connects the first
// time a call moves data between them (the higher rank dials; the listener stays open for the life of the
// mesh and is serviced in every wait). Every wait also watches every connected peer's control connection,
// so a dead or failing peer is noticed wherever this rank is waiting, and an abort can always be
// delivered, even in the middle of a transfer; a rank that fails passes the abort on to all its connected
// peers, so it floods the job along the ring that every rank holds.
#pragma once
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/byte_buffer.h"
#include "common/deadline.h"
#include "common/types.h"
#include "reduce/reduce.h"
#include "transport/handshake.h"
#include "transport/host_layout.h"
#include "transport/listener.h"
#include "transport/shm_ring.h"
#include "transport/socket.h"

namespace shvd {

struct MeshOptions {
  int rank = 0;
  int size = 1;
  std::string secret;
  std::vector<std::string> hosts;      // advertised address of every rank
  std::vector<int> ports;              // listening port of every rank
  std::vector<std::string> host_keys;  // equal keys = same physical host
  bool enable_shm = true;
  size_t shm_buffer_bytes = 4 << 20;
  size_t tcp_chunk_bytes = 1 << 20;
  int tcp_socket_buffer_bytes = 4 << 20;
  double connect_timeout_s = 60.0;
  double handshake_timeout_s = 2.0;  // each unauthenticated connection's deadline to pass the challenge
  int max_pending_handshakes = 64;   // strangers handshaking at once; the oldest is dropped beyond this
  double timeout_s = 300.0;  // deadline of each collective on this mesh (direct calls and the engine's)
  int spin_us = -1;     // busy-wait (pause) before yielding; -1 picks by cores vs local ranks
  int yield_us = 2000;  // then keep yielding the core this long before sleeping on a futex or poll()
  // Allreduce in three steps (reduce-scatter within each host, allreduce across hosts, allgather within
  // each host): true forces it wherever there are several hosts (but a direct call whose tensors came inside
  // the descriptor round is reduced from those), false never, unset lets each call choose.
  // Every rank must hold the same value (the caller checks it when the mesh forms).
  std::optional<bool> hierarchical_allreduce;
  // The radix of small calls' gathers (algorithms/block_allgather.h): 2 gathers in log2(p) rounds, size or
  // more in one round; 0 lets the measured model choose. Every rank must hold the same value.
  int small_call_radix = 0;
};

// Bytes this rank has sent over each transport since the mesh formed, so tests and benchmarks can see
// which path the data took. Atomic: the engine's thread counts while Python reads.
struct TrafficCounters {
  std::atomic<uint64_t> shm_bytes{0};
  std::atomic<uint64_t> tcp_bytes{0};
};

// One send to a peer. Sends to the same peer go out in the order given.
struct SendItem {
  int peer = -1;
  const uint8_t* data = nullptr;
  size_t len = 0;
  // When set, only bytes below *gate may be sent yet: they are produced by an earlier receive
  // of the same call, which lets one call pipeline a whole ring algorithm without bubbles.
  const size_t* gate = nullptr;
  // Progress, owned by the mesh.
  size_t done = 0;
};

// One receive from a peer. Receives from the same peer complete in the order given.
struct RecvItem {
  int peer = -1;
  uint8_t* dst = nullptr;
  size_t len = 0;
  bool reduce = false;  // dst = dst (op) incoming, element-wise
  // When set (with reduce): dst = reduce_from (op) incoming instead, so that an out-of-place
  // allreduce never copies its input into its output first. Spans len bytes, like dst.
  const uint8_t* reduce_from = nullptr;
  DType dtype = DType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  // With reduce: applied to each piece right after it is reduced, while it is still in cache (the last
  // receive of an allreduce's reduce-scatter completes this rank's chunk, which is then final).
  Finish finish;
  // Self-describing receive: the first `describe_bytes` bytes hold a little-endian uint64 total
  // length at offset 8; the payload then grows *grow_into up to max_len.
  ByteBuffer* grow_into = nullptr;
  size_t max_len = 0;
  // Progress, owned by the mesh: bytes delivered into dst (whole elements when reducing).
  size_t done = 0;
  bool length_known = false;  // self-describing receive: total length read
  size_t staged = 0;          // bytes of a partial element (or TCP chunk) waiting in the peer's staging
};

// How a waiting rank burns time before it sleeps: spinning and yielding cost CPU but answer in
// microseconds; sleeping is free but wakes in tens of microseconds on a busy machine.
struct WaitPolicy {
  int spin_us = 0;
  int yield_us = 0;
};

class Mesh {
 public:
  // Binds the listening socket first, so its port can be published before the mesh forms.
  static int bind_listener(const std::string& host, Fd* listener);

  Mesh(MeshOptions options, Fd listener);
  ~Mesh();

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  // Whether data to `peer` goes through shared memory (once the pair connects, if it has not yet).
  bool uses_shm(int peer) const;
  // Peers this rank holds connections to now (ring neighbours after formation, then whoever calls used).
  int connected_peers() const { return connected_count_.load(std::memory_order_relaxed); }
  const MeshOptions& options() const { return options_; }
  // Which ranks share a host; rings and chains follow its order.
  const HostLayout& layout() const { return layout_; }
  const TrafficCounters& traffic() const { return traffic_; }

  // Moves all items to completion or throws (timeout, peer failure, size mismatch).
  // `what` names the operation for error messages.
  // `policy` overrides the mesh's default waiting (the engine's idle negotiation rounds sleep early).
  void run(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, const Deadline& deadline,
           const std::string& what, const WaitPolicy* policy = nullptr);

  // Tells every peer this rank is failing because of `cause_rank`, then drops all connections.
  void abort(int cause_rank, const std::string& message);
  // Orderly goodbye: peers that still expect data from this rank get a clear error instead of a hang.
  void close();
  bool broken() const { return broken_; }

 private:
  struct Peer;
  struct DialJob;
  // Connecting pairs (mesh_connect.cc).
  void form();
  void connect_for(const std::vector<SendItem>& sends, const std::vector<RecvItem>& recvs, const Deadline& deadline);
  void connect_peers(const std::vector<int>& wanted, const Deadline& deadline, bool forming);
  std::vector<std::shared_ptr<DialJob>> start_dials(const std::vector<int>& wanted, const Deadline& deadline,
                                                    bool forming);
  void finish_dial(DialJob& job);
  void service_listener();
  void install(int rank, Channel channel, Fd fd);
  void on_connected(Peer& peer);
  void open_shm(Peer& peer, const std::string& payload);
  void mark_ready(Peer& peer);
  void stop_listening();
  [[noreturn]] void connect_timed_out(const std::vector<int>& absent, bool forming, const std::string& reported = "");
  std::vector<int> silent_peers();
  bool progress_send(SendItem& item, Peer& peer);
  bool progress_recv(RecvItem& item, Peer& peer);
  bool progress_recv_tcp(RecvItem& item, Peer& peer);
  bool progress_recv_shm(RecvItem& item, Peer& peer);
  size_t read_available(Peer& peer, uint8_t* dst, size_t max);
  [[noreturn]] void peer_lost(Peer& peer, const std::string& context);
  void read_control_frame(Peer& peer);
  void watch(const std::vector<bool>& reading, const std::vector<bool>& writing, int timeout_ms);
  // The steps of run().
  struct Active {
    std::vector<int> send, recv;  // per peer: the index of the item in progress, or -1
  };
  struct Pass {
    bool pending = false;
    bool progressed = false;
  };
  void check_items(const std::vector<SendItem>& sends, const std::vector<RecvItem>& recvs,
                   const std::string& what) const;
  Pass progress_all(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, Active& active);
  // Whether every wait is on a TCP peer with much still to come, so sleeping at once costs nothing.
  bool waits_on_bulk_tcp(const std::vector<SendItem>& sends, const std::vector<RecvItem>& recvs,
                         const Active& active) const;
  void set_wake_thresholds(const std::vector<RecvItem>& recvs, const Active& active);
  void wait_for_progress(const std::vector<SendItem>& sends, const std::vector<RecvItem>& recvs,
                         const Active& active, const Deadline& deadline, const std::string& what);
  [[noreturn]] void time_out(const std::vector<SendItem>& sends, const std::vector<RecvItem>& recvs,
                             const Active& active, const std::string& what);

  MeshOptions options_;
  HostLayout layout_;
  TrafficCounters traffic_;
  Fd listener_;
  std::unique_ptr<PeerListener> listener_state_;  // handshakes on listener_ in progress
  std::string shm_tag_;                           // random, so segment names never collide across jobs
  std::atomic<int> connected_count_{0};
  std::vector<std::unique_ptr<Peer>> peers_;
  WaitPolicy default_wait_;
  bool broken_ = false;
  bool closed_ = false;
};

}  // namespace shvd
