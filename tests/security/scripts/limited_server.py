"""A server in a process of its own at its open-file limit, for the EMFILE tests.

    python limited_server.py rendezvous|collector SECRET_HEX FREE_FDS

Leaves itself FREE_FDS descriptors (RLIMIT_NOFILE), starts the server on loopback, prints ``PORT n``, serves until
stdin closes, then stops the server and prints ``STOPPED``. Log records are printed as ``LOG ...`` lines.
"""

import logging
import os
import resource
import sys


def main() -> int:
    kind, secret_hex, free_fds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    secret = bytes.fromhex(secret_hex)
    logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="LOG %(name)s: %(message)s")
    if kind == "rendezvous":
        from collective.bootstrap import RendezvousServer

        server = RendezvousServer("127.0.0.1", 0, secret=secret)
        server.start()
        port = server.address[1]
    else:
        from collective.launcher import LineSink
        from spark_hvd.launch.driver.output_collector import OutputCollector

        sink = LineSink(sys.stdout)
        server = OutputCollector(secret, 1, lambda event: print(f"EVENT {event}", flush=True), sink, sink,
                                 bind_host="127.0.0.1")
        port = server.start()
    in_use = len(os.listdir("/proc/self/fd"))
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + free_fds, hard))
    print(f"PORT {port}", flush=True)
    sys.stdin.read()
    server.stop()
    print("STOPPED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
