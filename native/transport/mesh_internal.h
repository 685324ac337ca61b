// What the mesh's own files share: the control frames pairs exchange, and what the mesh holds per peer.
// Not for use outside native/transport/mesh*.cc.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/byte_buffer.h"
#include "common/deadline.h"
#include "transport/mesh.h"
#include "transport/shm_ring.h"
#include "transport/socket.h"

namespace shvd {

constexpr uint32_t kFrameMagic = 0x44564853;  // "SHVD"
// A rank that times out pings every peer and blames one that does not answer: a live rank answers from
// whatever wait it is in, a stopped or hung one cannot.
enum FrameType : uint32_t { kAbort = 2, kBye = 3, kShmSetup = 4, kShmAck = 5, kPing = 6, kPong = 7 };

struct FrameHeader {
  uint32_t magic;
  uint32_t type;
  uint64_t length;
};
static_assert(sizeof(FrameHeader) == 16, "frame header is sent raw");

constexpr size_t kMaxControlPayload = 64 << 10;
// How long a broken data connection waits for the peer's explanation on its control connection.
constexpr double kAbortGraceSeconds = 0.2;

inline std::string peer_name(int rank) { return "rank " + std::to_string(rank); }

void send_frame_blocking(int fd, uint32_t type, const void* payload, size_t len, const Deadline& deadline, int peer);

struct Mesh::Peer {
  int rank = -1;
  Fd control;
  Fd data;
  // Both connections are up and authenticated, and, for a same-host pair, the segment is mapped: items
  // to this peer may move. A pair connects when it is first used (see mesh_connect.cc).
  bool ready = false;
  bool shm = false;
  ShmSegment segment;
  ShmRing out;
  ShmRing in;
  bool said_bye = false;
  int pongs = 0;
  int rcvlowat = 1;  // the data socket's SO_RCVLOWAT: poll() reports it readable from this many bytes
  // The last recv() emptied the data socket: a streaming receive leaves it alone until poll() reports a
  // batch (see kTcpWakeBytes in mesh.cc).
  bool drained = false;
  // Incoming bytes not yet reduced: a partial element, or a TCP chunk. Receives from one peer complete
  // in order, so one buffer per peer serves them all and lives as long as the mesh.
  ByteBuffer staging;
};

}  // namespace shvd
