"""A tiny threaded TCP proxy that adds a fixed delay to every HTTP request: simulated network latency in front of
an S3-compatible server on the loopback interface (moto's ThreadedMotoServer), for tests and benchmarks/remote.py.

Each accepted connection gets its own upstream connection and two pump threads. The client-to-server pump sleeps
`delay` seconds before forwarding the first bytes of each request (the first bytes sent after a response began,
or on a new connection), so every request, on a new or a kept-alive connection, waits once: what a round trip to
a distant object store costs. The sleep is the simulated network, not a timing anything asserts.

    with LatencyProxy("127.0.0.1", 5000, delay=0.02) as proxy:
        endpoint = proxy.url      # http://127.0.0.1:<port>

`S3Server` runs moto's server and one proxy per delay in a process of their own (`python -m
benchmarks.latency_proxy`), as a real object store is not in the reader's process: its request handling (Python,
under its own GIL) then competes with the readers for the cores only, not for the reading process's GIL.

    with S3Server(delays=[0.02, 0.05]) as server:
        server.direct                # http://127.0.0.1:<port>, no delay
        server.proxies[0.02]         # the endpoint 20 ms away
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["LatencyProxy", "S3Server"]


class LatencyProxy:
    """Forward 127.0.0.1:<port> to `host:port`, waiting `delay` seconds before each request. `start()` returns once
    the listening socket accepts connections; `stop()` closes it and every connection it opened."""

    def __init__(self, host: str, port: int, delay: float) -> None:
        self.upstream = (host, int(port))
        self.delay = float(delay)
        self.requests = 0  # requests delayed so far (how many round trips the readers made)
        self.bytes_down = 0  # bytes the server sent back so far (bodies and headers)
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._sockets: list[socket.socket] = []
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LatencyProxy:
        self._listener.listen(128)
        self._thread = threading.Thread(target=self._accept, name="latency-proxy", daemon=True)
        self._thread.start()
        with socket.create_connection(("127.0.0.1", self.port), timeout=10):  # readiness: a connection is accepted
            pass
        return self

    def stop(self) -> None:
        self._stopping.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        if self._thread is not None:
            self._thread.join(10)
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._stopping.is_set():
                client.close()
                return
            try:
                server = socket.create_connection(self.upstream, timeout=30)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(None)
            with self._lock:
                self._sockets += [client, server]
            answered = threading.Event()  # set once the server sends: the client's next bytes are a new request
            answered.set()
            threading.Thread(target=self._pump, args=(client, server, answered, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, answered, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answered: threading.Event, requests: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                if requests and answered.is_set():
                    answered.clear()
                    with self._lock:
                        self.requests += 1
                    time.sleep(self.delay)  # the simulated network: one round trip per request
                elif not requests:
                    answered.set()
                    with self._lock:
                        self.bytes_down += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class S3Server:
    """moto's S3 server and a `LatencyProxy` per delay, in a child process (see the module's docstring). `start()`
    returns once they listen; `stop()` ends the process."""

    def __init__(self, delays: Sequence[float] = ()) -> None:
        self.delays = [float(d) for d in delays]
        self.direct = ""
        self.proxies: dict[float, str] = {}
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> S3Server:
        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
        self._proc = subprocess.Popen([sys.executable, "-m", "benchmarks.latency_proxy", *map(str, self.delays)],
                                      cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the S3 server process exited ({self._proc.wait()}) before it listened")
        ready = json.loads(line)
        self.direct = ready["direct"]
        self.proxies = {float(d): url for d, url in ready["proxies"]}
        return self

    def stop(self) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()  # the child's signal to stop
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _serve(delays: list[float]) -> None:
    """(the child of S3Server) Serve until stdin closes; first print the endpoints as one JSON line."""
    import logging

    os.environ.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(1 << 30))  # objects in memory, not temp files
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    proxies = [(d, LatencyProxy(host, port, d).start()) for d in delays]
    print(json.dumps({"direct": f"http://{host}:{port}", "proxies": [(d, p.url) for d, p in proxies]}), flush=True)
    sys.stdin.read()
    for _, proxy in proxies:
        proxy.stop()
    server.stop()


if __name__ == "__main__":
    _serve([float(arg) for arg in sys.argv[1:]])
