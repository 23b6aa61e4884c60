#!/usr/bin/env python3
"""A loopback TCP forwarding proxy that can reset its client connections, for
tests that break a long transfer in the middle (e.g. an S3 GET from moto).

  fault_proxy.py --target PORT|127.0.0.1:PORT [--port P] [--control-port C]

Prints "port N control M" on stdout once listening. Every connection to N is
forwarded to the target. M is an HTTP control server:
  POST /reset        reset (RST: SO_LINGER 0, close) every open client
                     connection now
  POST /reset_after  {"bytes": N}: each connection open now is reset once N
                     more bytes have been forwarded to its client (exactly N
                     reach the client)
  POST /reset_next  {"bytes": N}: the next connection accepted is reset once
                     N bytes have been forwarded to its client
  POST /reset_first  {"bytes": N}: the first connection (open now or later) to
                     have forwarded N bytes to its client is reset; once
  POST /rate         {"bytes_per_s": R}: forward at most R bytes/s to each
                     client from now on (0: no limit)
  POST /latency      {"ms": L}: each answer's first byte reaches the client
                     at least L ms after the request's bytes went to the
                     target (a store's first-byte latency; 0: none). Also
                     --latency-ms at start.
  POST /status_next  {"count": N, "status": 503, "method": "PUT"}: the next N
                     requests of that method (any: "") on new connections are
                     answered by the proxy itself with that status and an S3
                     error body (SlowDown for 503, InternalError else), their
                     body read first, and the connection closed; open
                     connections are reset now so the client reconnects
  GET  /stats        {"connections": accepted in all, "resets": done,
                     "open": open now, "bytes_to_clients": forwarded in all,
                     "statuses": requests answered by /status_next}
Each connection is pumped by its own thread with non-blocking sockets and
1 MiB buffers (no per-byte Python work). Exits when its parent does.
"""
import argparse
import json
import selectors
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from server_util import exit_with_parent

BUF = 1 << 20


class Proxy:
    def __init__(self, target):
        self.target = target
        self.lock = threading.Lock()
        self.conns = set()
        self.connections = 0
        self.resets = 0
        self.bytes_done = 0  # of closed connections
        self.next_reset = None  # reset_at of the next connection accepted
        self.rate = 0  # bytes/s to each client, 0: unlimited
        self.latency = 0.0  # seconds from a request to its answer's first byte
        self.reset_first = None  # bytes after which the first connection is reset
        self.status_left = 0  # requests still to answer with self.status
        self.status = 503
        self.status_method = ""
        self.statuses = 0

    def stats(self):
        with self.lock:
            return {"connections": self.connections, "resets": self.resets,
                    "open": len(self.conns),
                    "bytes_to_clients": self.bytes_done + sum(c.down for c in self.conns),
                    "statuses": self.statuses}

    def arm(self, after):
        """Reset each open connection after `after` more bytes (0: now)."""
        with self.lock:
            for c in self.conns:
                c.reset_at = c.down + after
                c.wake()

    def serve(self, listener):
        while True:
            client, _ = listener.accept()
            with self.lock:
                answer = self.status_left > 0
            if answer:
                threading.Thread(target=self.answer_status, args=(client,), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            conn = Conn(self, client, upstream)
            with self.lock:
                conn.reset_at, self.next_reset = self.next_reset, None
                self.connections += 1
                self.conns.add(conn)
            threading.Thread(target=conn.run, daemon=True).start()


    def answer_status(self, client):
        """Reads one request (head and Content-Length body) and answers it with the armed
        status, or forwards the connection when its method is not the one armed."""
        try:
            client.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    return client.close()
                head += chunk
            head, _, body = head.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method = lines[0].split(" ")[0]
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (ln.partition(":") for ln in lines[1:])}
            with self.lock:
                take = self.status_left > 0 and self.status_method in ("", method)
                if take:
                    self.status_left -= 1
                    self.statuses += 1
                code = self.status
            if not take:  # not ours: forward it, the bytes read first
                upstream = socket.create_connection(self.target)
                upstream.sendall(head + b"\r\n\r\n" + body)
                conn = Conn(self, client, upstream)
                with self.lock:
                    self.connections += 1
                    self.conns.add(conn)
                client.settimeout(None)
                return conn.run()
            if headers.get("expect", "").lower() != "100-continue":
                left = int(headers.get("content-length", "0")) - len(body)
                while left > 0:
                    chunk = client.recv(min(left, 1 << 20))
                    if not chunk:
                        break
                    left -= len(chunk)
            name = "SlowDown" if code == 503 else "InternalError"
            text = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{name}</Code>"
                    f"<Message>injected by fault_proxy</Message></Error>").encode()
            client.sendall(f"HTTP/1.1 {code} {name}\r\nContent-Type: application/xml\r\n"
                           f"Content-Length: {len(text)}\r\nConnection: close\r\n\r\n"
                           .encode() + text)
        except OSError:
            pass
        finally:
            client.close()


class Conn:
    def __init__(self, proxy, client, upstream):
        self.proxy = proxy
        self.client, self.upstream = client, upstream
        self.down = 0          # bytes sent to the client
        self.reset_at = None   # reset once self.down reaches this
        self.wake_r, self.wake_w = socket.socketpair()
        self.t0 = time.monotonic()
        self.asked = None      # when request bytes last went to the target
        self.hold_until = None  # the answer's first byte waits until then

    def wake(self):
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass

    def run(self):
        try:
            self._pump()
        except OSError:
            pass
        finally:
            for s in (self.client, self.upstream, self.wake_r, self.wake_w):
                s.close()
            with self.proxy.lock:
                self.proxy.conns.discard(self)
                self.proxy.bytes_done += self.down

    def _reset(self):
        self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.client.close()
        with self.proxy.lock:
            self.proxy.resets += 1

    def _pump(self):
        c, u = self.client, self.upstream
        for s in (c, u, self.wake_r):
            s.setblocking(False)
        # Per source socket: its buffer, what is read from it but not yet
        # sent on, and whether it reached EOF. A source is read only when its
        # pending data is all sent (back pressure both ways).
        bufs = {c: memoryview(bytearray(BUF)), u: memoryview(bytearray(BUF))}
        pending = {c: None, u: None}
        eof = {c: False, u: False}
        dst = {c: u, u: c}
        sel = selectors.DefaultSelector()
        sel.register(self.wake_r, selectors.EVENT_READ)
        registered = {c: 0, u: 0}
        while True:
            if self.reset_at is not None and self.down >= self.reset_at:
                return self._reset()
            first = self.proxy.reset_first
            if first is not None and self.down >= first:
                with self.proxy.lock:
                    mine = self.proxy.reset_first is not None
                    self.proxy.reset_first = None
                if mine:
                    return self._reset()
            if eof[c] and eof[u] and pending[c] is None and pending[u] is None:
                return
            for s in (c, u):
                ev = 0
                if pending[s] is None and not eof[s]:
                    ev |= selectors.EVENT_READ
                if pending[dst[s]] is not None:
                    ev |= selectors.EVENT_WRITE
                if ev != registered[s]:
                    if not registered[s]:
                        sel.register(s, ev)
                    elif not ev:
                        sel.unregister(s)
                    else:
                        sel.modify(s, ev)
                    registered[s] = ev
            for key, mask in sel.select():
                s = key.fileobj
                if s is self.wake_r:
                    self.wake_r.recv(4096)
                    continue
                src = dst[s]
                if mask & selectors.EVENT_WRITE and pending[src] is not None:
                    data = pending[src]
                    if s is c and self.reset_at is not None:
                        data = data[:max(0, self.reset_at - self.down)]
                    if s is c and self.hold_until is not None:
                        time.sleep(max(0.0, self.hold_until - time.monotonic()))
                        self.hold_until = None
                    if len(data):
                        try:
                            n = s.send(data)
                        except BlockingIOError:
                            n = 0
                        if s is u and n:
                            self.asked = time.monotonic()
                        if s is c:
                            self.down += n
                            rate = self.proxy.rate
                            if rate and n:
                                time.sleep(min(1.0, max(0.0, self.t0 + self.down / rate -
                                                        time.monotonic())))
                        rest = pending[src][n:]
                        pending[src] = rest if len(rest) else None
                if mask & selectors.EVENT_READ and pending[s] is None and not eof[s]:
                    try:
                        n = s.recv_into(bufs[s])
                    except BlockingIOError:
                        continue
                    except ConnectionResetError:
                        n = 0
                    if n:
                        pending[s] = bufs[s][:n]
                        if s is u and self.asked is not None:
                            if self.proxy.latency > 0:
                                self.hold_until = self.asked + self.proxy.latency
                            self.asked = None
                    else:  # EOF: pass it on (nothing of this direction is pending)
                        eof[s] = True
                        dst[s].shutdown(socket.SHUT_WR)


def make_control(proxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet
            pass

        def _answer(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/reset":
                proxy.arm(0)
                return self._answer(200, proxy.stats())
            if self.path == "/reset_after":
                proxy.arm(int(json.loads(data)["bytes"]))
                return self._answer(200, proxy.stats())
            if self.path == "/reset_next":
                with proxy.lock:
                    proxy.next_reset = int(json.loads(data)["bytes"])
                return self._answer(200, proxy.stats())
            if self.path == "/status_next":
                req = json.loads(data)
                with proxy.lock:
                    proxy.status_left = int(req["count"])
                    proxy.status = int(req.get("status", 503))
                    proxy.status_method = req.get("method", "")
                proxy.arm(0)
                return self._answer(200, proxy.stats())
            if self.path == "/reset_first":
                with proxy.lock:
                    proxy.reset_first = int(json.loads(data)["bytes"])
                return self._answer(200, proxy.stats())
            if self.path == "/latency":
                proxy.latency = float(json.loads(data)["ms"]) / 1000
                return self._answer(200, proxy.stats())
            if self.path == "/rate":
                proxy.rate = int(json.loads(data)["bytes_per_s"])
                return self._answer(200, proxy.stats())
            self._answer(404, {"error": "not found"})

        def do_GET(self):
            if self.path == "/stats":
                return self._answer(200, proxy.stats())
            self._answer(404, {"error": "not found"})

    return Handler


class ControlServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True, help="PORT or 127.0.0.1:PORT")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--control-port", type=int, default=0)
    ap.add_argument("--latency-ms", type=float, default=0)
    args = ap.parse_args()
    host, _, port = args.target.rpartition(":")
    if host not in ("", "127.0.0.1", "localhost"):
        ap.error("the target must be on loopback")
    proxy = Proxy(("127.0.0.1", int(port)))
    proxy.latency = args.latency_ms / 1000
    exit_with_parent()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(128)
    control = ControlServer(("127.0.0.1", args.control_port), make_control(proxy))
    threading.Thread(target=control.serve_forever, kwargs={"poll_interval": 0.1},
                     daemon=True).start()
    print("port %d control %d" % (listener.getsockname()[1], control.server_address[1]),
          flush=True)
    try:
        proxy.serve(listener)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
