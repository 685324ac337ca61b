// The background engine: requests are enqueued from any thread and waited on through handles.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings/bindings.h"
#include "engine/coordinator.h"
#include "engine/engine.h"
#include "engine/timeline.h"

namespace shvd {
namespace {

struct PyEngine {
  PyCommunicator* comm = nullptr;
  std::unique_ptr<Engine> engine;
};

int64_t enqueue(PyEngine& e, CollectiveKind kind, const std::string& name, nb::handle tensor,
                std::optional<DType> dtype, nb::handle shape, ReduceOp op, int root, double prescale,
                double postscale, nb::handle splits, int group, int group_size, nb::handle source) {
  PyCall call(kind, name, tensor, dtype, shape, op, root, prescale, postscale, splits);
  call.spec.group = group;
  call.spec.group_size = group_size;
  if (source.is_none()) return e.engine->enqueue(std::move(call.spec), call.data());
  if (!call.tensor) fail(ErrorKind::kInvalidArgument, "a separate input needs an output tensor, for '" + name + "'");
  // A buffer is typed by its own format, so that a source of another dtype is refused rather than
  // reinterpreted (bfloat16 arrives as its uint16 bit pattern, as the output does); an address (torch)
  // has the output's dtype and shape.
  const bool by_address = PyLong_Check(source.ptr());
  TensorArg input(source, by_address ? std::optional<DType>(call.spec.dtype) : std::nullopt,
                  by_address ? nb::cast(call.spec.shape) : nb::none(), false, name);
  const bool same_type = input.dtype() == call.spec.dtype ||
                         (call.spec.dtype == DType::kBFloat16 && input.dtype() == DType::kUInt16);
  if (!same_type || element_count(input.shape()) != element_count(call.spec.shape)) {
    fail(ErrorKind::kInvalidArgument,
         "the input of '" + name + "' is " + std::to_string(element_count(input.shape())) + " " +
             dtype_name(input.dtype()) + " elements, its output " + std::to_string(element_count(call.spec.shape)) +
             " " + dtype_name(call.spec.dtype));
  }
  return e.engine->enqueue(std::move(call.spec), call.data(), input.data());
}

nb::object outcome_to_python(HandleOutcome& out, DType dtype) {
  if (out.failed) throw Error(out.error_kind, out.error, out.error_rank);
  if (out.join_rank >= 0) return nb::int_(out.join_rank);
  return result_to_python(out.result, dtype, out.has_result);
}

nb::object wait(PyEngine& e, int64_t handle, double timeout_s, DType dtype) {
  HandleOutcome out;
  {
    nb::gil_scoped_release release;
    out = e.engine->wait(handle, timeout_s);
  }
  return outcome_to_python(out, dtype);
}

// enqueue, then wait: a direct call's twin, so that callers need not care which one runs.
nb::object run(PyEngine& e, CollectiveKind kind, const std::string& name, nb::handle tensor,
               std::optional<DType> dtype, nb::handle shape, ReduceOp op, int root, double prescale, double postscale,
               nb::handle splits, double timeout_s) {
  PyCall call(kind, name, tensor, dtype, shape, op, root, prescale, postscale, splits);
  const DType result_dtype = call.spec.dtype;
  int64_t handle = e.engine->enqueue(std::move(call.spec), call.data());
  HandleOutcome out;
  {
    nb::gil_scoped_release release;
    out = e.engine->wait(handle, timeout_s);
  }
  return outcome_to_python(out, result_dtype);
}

Timeline::Clock::time_point at(int64_t ns) {
  using std::chrono::duration_cast;
  return Timeline::Clock::time_point(duration_cast<Timeline::Clock::duration>(std::chrono::nanoseconds(ns)));
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Timeline::Clock::now().time_since_epoch()).count();
}

// The native engine's Chrome-trace writer, for the MPI backend's Python engine: one definition of the
// file format and of the phase names for both engines.
void register_timeline(nb::module_& m) {
  nb::class_<Timeline>(m, "Timeline")
      .def(nb::init<>())
      .def("open", &Timeline::open, nb::arg("path"), nb::arg("rank"), nb::arg("mark_cycles") = false,
           "Starts writing to path (closing any file it was writing); raises InvalidArgumentError if it cannot.")
      .def(
          "phase",
          [](Timeline& t, const std::string& tensor, const std::string& phase, int64_t start_ns, int64_t end_ns,
             const std::string& detail) { t.phase(tensor, phase.c_str(), at(start_ns), at(end_ns), detail); },
          nb::arg("tensor"), nb::arg("phase"), nb::arg("start_ns"), nb::arg("end_ns"), nb::arg("detail") = "",
          "One finished phase of one tensor; times are now_ns() readings.")
      .def("cycle_start", &Timeline::cycle_start, "Marks an engine cycle that runs collectives (if asked to).")
      .def("close", &Timeline::close, "Closes the file, which is then valid JSON.")
      .def_static("now_ns", &now_ns, "The timeline's clock, in nanoseconds.");
  m.def(
      "collective_phase", [](CollectiveKind kind) { return std::string(collective_phase(kind)); }, nb::arg("kind"),
      "The timeline phase name of a collective kind (ALLREDUCE...).");
  m.def(
      "negotiate_phase", [](CollectiveKind kind) { return std::string(negotiate_phase(kind)); }, nb::arg("kind"),
      "The timeline phase name of a collective kind's negotiation (NEGOTIATE_ALLREDUCE...).");
  m.def("joined_refusal", &joined_refusal, nb::arg("kind"), nb::arg("name"), nb::arg("joined"),
        "Why a collective other than allreduce is refused while the ranks ``joined`` have joined.");
}

}  // namespace

void register_engine(nb::module_& m) {
  register_timeline(m);
  nb::class_<PyEngine>(m, "Engine")
      .def(
          "__init__",
          [](PyEngine* self, PyCommunicator& comm, EngineOptions options) {
            new (self) PyEngine();
            std::lock_guard<std::mutex> lock(comm.mutex);
            if (comm.engine_running) fail(ErrorKind::kInvalidArgument, "an engine already runs on this communicator");
            self->engine = std::make_unique<Engine>(comm.comm->mesh(), std::move(options));
            self->comm = &comm;
            comm.engine_running = true;
          },
          nb::arg("comm"), nb::arg("options"), nb::keep_alive<1, 2>())
      .def("enqueue", &enqueue, nb::arg("kind"), nb::arg("name"), nb::arg("tensor").none(), nb::arg("dtype").none(),
           nb::arg("shape").none(), nb::arg("op"), nb::arg("root"), nb::arg("prescale"), nb::arg("postscale"),
           nb::arg("splits").none(), nb::arg("group"), nb::arg("group_size"), nb::arg("source").none() = nb::none(),
           "Enqueues a request, as Communicator.run takes it, and returns its handle. An allreduce may read its "
           "input from source (same dtype and size, never written) and write the result into tensor.")
      .def("run", &run, nb::arg("kind"), nb::arg("name"), nb::arg("tensor").none(), nb::arg("dtype").none(),
           nb::arg("shape").none(), nb::arg("op"), nb::arg("root"), nb::arg("prescale"), nb::arg("postscale"),
           nb::arg("splits").none(), nb::arg("timeout_s"),
           "Enqueues a request and waits for it; takes and returns what Communicator.run does.")
      .def("poll", [](PyEngine& e, int64_t handle) { return e.engine->poll(handle); }, nb::arg("handle"))
      .def("wait", &wait, nb::arg("handle"), nb::arg("timeout_s"), nb::arg("dtype") = DType::kUInt8,
           "Blocks until the handle completes. Returns None, the last rank to join, or (flat uint8 array, shape"
           "[, received_splits]); raises the collective's error.")
      .def(
          "start_timeline",
          [](PyEngine& e, const std::string& path, bool mark_cycles) { e.engine->start_timeline(path, mark_cycles); },
          nb::arg("path"), nb::arg("mark_cycles"), "Rank 0 starts writing the Chrome trace to path (others: no-op).")
      .def("stop_timeline", [](PyEngine& e) { e.engine->stop_timeline(); }, "Closes the timeline file, if any.")
      .def("shutdown", [](PyEngine& e) {
        {
          nb::gil_scoped_release release;
          e.engine->shutdown();
        }
        std::lock_guard<std::mutex> lock(e.comm->mutex);
        e.comm->engine_running = false;
      });
}

}  // namespace shvd
