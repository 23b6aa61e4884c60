"""Reads a data set over HTTPS from a loopback server whose certificate only a CA bundle in the
chroot can vouch for: scripts/test_wheels.sh moves bundles around Debian 11's /etc to play RHEL.

    python https_ca.py DIR read|no-bundle|untrusted

DIR holds cert.pem and key.pem (the server's self-signed certificate, for localhost). `read`:
every sample arrives. `no-bundle`: a ConfigError naming the missing CA file. `untrusted`: a
ConfigError for the certificate (a bundle was found, but not one that trusts it).
"""
import functools
import http.server
import os
import ssl
import sys
import threading

import numpy as np

import shardstream

work, expect = sys.argv[1], sys.argv[2]
os.chdir(work)
with shardstream.ShardWriter("set", max_samples=50, overwrite=True) as w:
    for i in range(100):
        w.write({"__key__": f"s{i:04d}", "x.npy": np.full(4, i, dtype=np.int32)})
http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=work)
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("cert.pem", "key.pem")
server.socket = ctx.wrap_socket(server.socket, server_side=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
port = server.server_address[1]
urls = [f"https://localhost:{port}/set/shard-{i:06d}.tar" for i in range(2)]
try:
    with shardstream.Loader(urls, batch_size=10) as loader:
        seen = sorted(int(v) for b in loader for v in b["x.npy"][:, 0])
    outcome = "read"
    assert seen == list(range(100)), "every sample once over https"
except shardstream.ConfigError as e:
    text = str(e)
    assert f"https://localhost:{port}/set/" in text, text
    outcome = "no-bundle" if "CA cert" in text else "untrusted" if "certificate" in text else text
finally:
    server.shutdown()
assert outcome == expect, f"expected {expect}, got {outcome}"
print(f"    {expect}: as expected")
