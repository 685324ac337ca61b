// The listening socket and the direct communicator. A direct call is the engine's request run at once:
// Communicator.run takes what Engine.enqueue takes and returns what Engine.wait returns.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings/bindings.h"
#include "common/error.h"

namespace shvd {
namespace {

struct Listener {
  Fd fd;
  int port = 0;
};

// Direct (synchronous) calls hold this for their whole duration.
struct DirectCall {
  explicit DirectCall(PyCommunicator& c) : lock(c.mutex) {
    if (c.engine_running) {
      fail(ErrorKind::kInvalidArgument, "the collective engine owns this communicator; submit through the engine");
    }
  }
  std::lock_guard<std::mutex> lock;
};

nb::object run(PyCommunicator& c, CollectiveKind kind, const std::string& name, nb::handle tensor,
               std::optional<DType> dtype, nb::handle shape, ReduceOp op, int root, double prescale, double postscale,
               nb::handle splits) {
  PyCall call(kind, name, tensor, dtype, shape, op, root, prescale, postscale, splits);
  OwnedResult result;
  {
    nb::gil_scoped_release release;
    DirectCall lock(c);
    result = c.comm->run(call.spec, call.data());
  }
  return result_to_python(result, call.spec.dtype, op_for(kind).returns_result);
}

}  // namespace

void register_communicator(nb::module_& m) {
  nb::class_<Listener>(m, "Listener")
      .def_ro("port", &Listener::port)
      .def("close", [](Listener& l) { l.fd.reset(); });
  m.def(
      "listen",
      [](const std::string& host) {
        auto l = std::make_unique<Listener>();
        l->port = Mesh::bind_listener(host, &l->fd);
        return l.release();
      },
      nb::arg("host"), nb::rv_policy::take_ownership, "Bind a listening socket for the mesh; publish .port to peers.");

  m.def(
      "host_layout",
      [](const std::vector<std::string>& host_keys) {
        HostLayout layout = layout_hosts(host_keys);
        return nb::make_tuple(layout.hosts, layout.ring);
      },
      nb::arg("host_keys"),
      "(ranks of each host, ring order) as every mesh derives them from its ranks' host keys: hosts in the "
      "order of their lowest rank, and the ring that rings and chains follow, host by host.");

  nb::class_<PyCommunicator>(m, "Communicator")
      .def(
          "__init__",
          [](PyCommunicator* self, Listener& listener, MeshOptions options) {
            new (self) PyCommunicator();
            Fd fd = std::move(listener.fd);
            nb::gil_scoped_release release;
            self->comm = std::make_unique<Communicator>(std::move(options), std::move(fd));
          },
          nb::arg("listener"), nb::arg("options"))
      .def_prop_ro("rank", [](PyCommunicator& c) { return c.comm->rank(); })
      .def_prop_ro("size", [](PyCommunicator& c) { return c.comm->size(); })
      .def("uses_shm", [](PyCommunicator& c, int peer) { return c.comm->uses_shm(peer); })
      .def("connected_peers", [](PyCommunicator& c) { return c.comm->connected_peers(); },
           "Peers this rank holds connections to now: its ring neighbours after init, then each peer a call "
           "has moved data with (pairs connect on first use).")
      .def(
          "bytes_sent",
          [](PyCommunicator& c) {
            // Atomic counters: read without the call mutex, so this works while the engine runs.
            const TrafficCounters& t = c.comm->mesh().traffic();
            nb::dict out;
            out["shm"] = t.shm_bytes.load(std::memory_order_relaxed);
            out["tcp"] = t.tcp_bytes.load(std::memory_order_relaxed);
            return out;
          },
          "Bytes this rank has sent to its peers since the mesh formed, per transport: {'shm': n, 'tcp': n}.")
      .def("run", &run, nb::arg("kind"), nb::arg("name"), nb::arg("tensor").none(), nb::arg("dtype").none() = nb::none(),
           nb::arg("shape").none() = nb::none(), nb::arg("op") = ReduceOp::kSum, nb::arg("root") = -1,
           nb::arg("prescale") = 1.0, nb::arg("postscale") = 1.0, nb::arg("splits").none() = nb::none(),
           "Runs one collective now. `tensor` is a buffer, an address with `dtype` and `shape`, or None (barrier). "
           "In-place kinds write there and return None; the others return (flat uint8 array, shape"
           "[, received_splits]).")
      .def("shutdown", [](PyCommunicator& c) {
        nb::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(c.mutex);
        c.comm->shutdown();
      });
}

}  // namespace shvd
