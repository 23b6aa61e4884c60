#!/usr/bin/env python3
"""A loopback HTTP/1.1 file server for tests, with fault injection.

Serves --root over http (or https with --certfile/--keyfile) (GET/HEAD with single-range Range support, ETag, If-Match),
stores PUT bodies under --root, deletes on DELETE. Prints "port N" on stdout
once listening. Every request is appended to --log as one JSON line:
{"method", "path", "range", "if_match", "status", "sent", "fault"}.

Faults are rules matched against each request in order; a matching rule is
used once per request until its count runs out (count -1 = forever):
  {"kind": "drop", "after": N}          reset the connection after N body bytes
  {"kind": "drop", "random": true}      ... after a random number of bytes
  {"kind": "truncate", "after": N}      close cleanly after N body bytes
  {"kind": "stall", "after": N, "seconds": S}  pause S seconds after N bytes
  {"kind": "status", "code": 503, "retry_after": 1, "body": "..."}
  {"kind": "wrong_length", "delta": D}  declare Content-Length + D, then close
  {"kind": "ignore_range"}              answer a Range request with 200
  {"kind": "change_etag"}               the object gets a new ETag from now on
  {"kind": "none"}                      nothing (with "count": let N requests pass first)
Optional keys: "path" (exact request path; default any), "method"
(default GET; "POST" takes "status" rules only), "count" (default 1). Set faults with --fault JSON (repeat)
or at run time: POST /_control/faults with a JSON rule or list;
POST /_control/clear removes them. GET /_redirect?to=URL answers 302.
"""
import argparse
import email.utils
import json
import os
import random
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from server_util import exit_with_parent


class State:
    def __init__(self, root, log_path, seed):
        self.root = os.path.abspath(root)
        self.log_path = log_path
        self.lock = threading.Lock()
        self.faults = []
        self.generations = {}
        self.rng = random.Random(seed)

    def take_fault(self, method, path):
        with self.lock:
            for rule in self.faults:
                if rule.get("count", 1) == 0:
                    continue
                if rule.get("path") not in (None, path):
                    continue
                if rule.get("method", "GET") not in (method, "*"):
                    continue
                if rule.get("count", 1) > 0:
                    rule["count"] = rule.get("count", 1) - 1
                return dict(rule)
        return None

    def log(self, entry):
        if not self.log_path:
            return
        with self.lock, open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "shardstream-test"

    def log_message(self, fmt, *args):  # quiet
        pass

    @property
    def state(self):
        return self.server.state

    def _path(self):
        return urllib.parse.urlsplit(self.path).path

    def _file(self):
        rel = urllib.parse.unquote(self._path()).lstrip("/")
        full = os.path.abspath(os.path.join(self.state.root, rel))
        if not full.startswith(self.state.root + os.sep) and full != self.state.root:
            return None
        return full

    def _etag(self, full, st):
        gen = self.state.generations.get(full, 0)
        return '"%x-%x-%d"' % (st.st_mtime_ns, st.st_size, gen)

    def _record(self, status, sent=0, fault=None):
        self.state.log({
            "method": self.command, "path": self._path(),
            "range": self.headers.get("Range"),
            "if_match": self.headers.get("If-Match"),
            "status": status, "sent": sent,
            "fault": fault["kind"] if fault else None})

    def _simple(self, code, body=b"", headers=None, fault=None):
        # Logged before answering, so a client that has its answer always
        # finds the request in the log.
        self._record(code, len(body), fault)
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self):
        self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    # --- control ---------------------------------------------------------
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length)
        path = self._path()
        if path == "/_control/faults":
            rules = json.loads(data)
            with self.state.lock:
                self.state.faults.extend(rules if isinstance(rules, list) else [rules])
            return self._simple(200, b"ok")
        if path == "/_control/clear":
            with self.state.lock:
                self.state.faults.clear()
            return self._simple(200, b"ok")
        fault = self.state.take_fault("POST", path)
        if fault and fault["kind"] == "status":  # e.g. an STS endpoint throttling
            return self._simple(fault["code"], fault.get("body", "").encode(), fault=fault)
        return self._simple(404, b"no such control")

    # --- files -----------------------------------------------------------
    def do_PUT(self):
        fault = self.state.take_fault("PUT", self._path())
        if fault and fault["kind"] == "status":
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hdr = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {}
            return self._simple(fault["code"], b"injected", hdr, fault)
        full = self._file()
        if full is None:
            return self._simple(403, b"outside root")
        length = int(self.headers.get("Content-Length") or 0)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        tmp = full + ".uploading"
        with open(tmp, "wb") as f:
            left = length
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                f.write(chunk)
                left -= len(chunk)
        if left:
            os.unlink(tmp)
            self.close_connection = True
            self._record(400, 0, fault)
            return
        os.replace(tmp, full)
        self._simple(201, b"")

    def do_DELETE(self):
        full = self._file()
        if full is None or not os.path.isfile(full):
            return self._simple(404, b"not found")
        os.unlink(full)
        self._simple(204)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        parts = urllib.parse.urlsplit(self.path)
        if parts.path == "/_redirect":
            to = urllib.parse.parse_qs(parts.query).get("to", [""])[0]
            return self._simple(302, b"", {"Location": to})
        fault = self.state.take_fault(self.command, parts.path)
        if fault and fault["kind"] == "status":
            hdr = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {}
            body = fault.get("body", "injected error").encode()
            return self._simple(fault["code"], body, hdr, fault)
        full = self._file()
        if full is None or not os.path.isfile(full):
            return self._simple(404, b"not found", fault=fault)
        if fault and fault["kind"] == "change_etag":
            with self.state.lock:
                self.state.generations[full] = self.state.generations.get(full, 0) + 1
        st = os.stat(full)
        etag = self._etag(full, st)
        size = st.st_size
        if_match = self.headers.get("If-Match")
        if if_match and if_match not in ("*", etag):
            return self._simple(412, b"precondition failed", {"ETag": etag}, fault)
        start, end, status = 0, size, 200
        rng = self.headers.get("Range")
        if rng and not (fault and fault["kind"] == "ignore_range"):
            spec = rng.replace("bytes=", "", 1)
            a, _, b = spec.partition("-")
            start = int(a)
            end = min(size, int(b) + 1) if b else size
            if start >= size:
                return self._simple(416, b"", {"Content-Range": "bytes */%d" % size}, fault)
            status = 206
        length = end - start
        declared = length
        if fault and fault["kind"] == "wrong_length":
            declared = length + fault["delta"]
        self.send_response(status)
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        self.send_header("Content-Length", str(declared))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, size))
        if self.command == "HEAD":
            self._record(status, 0, fault)
            return self.end_headers()
        limit = length
        kind = fault["kind"] if fault else None
        if kind in ("drop", "truncate", "stall"):
            if fault.get("random"):
                # Somewhere strictly inside the body, so each drop leaves
                # progress behind; a 1-byte body gets the rule back.
                if length < 2:
                    with self.state.lock:
                        for rule in self.state.faults:
                            if rule["kind"] == fault["kind"] and rule.get("random"):
                                rule["count"] = rule.get("count", 0) + 1
                                break
                    kind, fault, limit = None, None, length
                else:
                    with self.state.lock:
                        limit = self.state.rng.randrange(1, length)
            else:
                limit = min(length, fault.get("after", 0))
        if kind == "wrong_length" and declared < length:
            limit = declared
        self._record(status, length if kind == "stall" else limit, fault)
        self.end_headers()
        sent = 0
        try:
            with open(full, "rb") as f:
                f.seek(start)
                while sent < limit:
                    chunk = f.read(min(limit - sent, 1 << 16))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
                if kind == "stall":
                    self.wfile.flush()
                    time.sleep(fault.get("seconds", 5))
                    while sent < length:
                        chunk = f.read(min(length - sent, 1 << 16))
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                        sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        if kind == "drop":
            self._reset()
        elif kind in ("truncate", "wrong_length"):
            self.wfile.flush()
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Clients open dozens of connections at once (ranged parts): with the default
    # backlog of 5 the kernel drops their SYNs and each retries a second later.
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass  # resets are part of the job


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", default="")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--certfile", default="", help="serve https with this PEM cert")
    ap.add_argument("--keyfile", default="")
    ap.add_argument("--fault", action="append", default=[],
                    help="a JSON fault rule; may be repeated")
    args = ap.parse_args()
    state = State(args.root, args.log, args.seed)
    for f in args.fault:
        state.faults.append(json.loads(f))
    exit_with_parent()
    server = Server(("127.0.0.1", args.port), Handler)
    server.state = state
    if args.certfile:
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.certfile, args.keyfile)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print("port %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
