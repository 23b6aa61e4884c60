#!/usr/bin/env python3
"""A loopback emulation of the EC2 instance metadata service (IMDSv2/v1) and
of the container credentials endpoint (ECS, EKS Pod Identity), for tests.

Every credential document carries REAL temporary credentials, minted per
request by moto's STS AssumeRole (--moto, signed with --access-key/
--secret-key, RoleArn --role-arn, DurationSeconds --duration), so they work
against moto's S3 and expire for real (tests/servers/moto_server.py); the
Expiration reported is theirs (to the second, rounded down).

EC2 (IMDS):
  PUT /latest/api/token            needs X-aws-ec2-metadata-token-ttl-seconds
                                   (1..21600; 400 otherwise), answers a token
  GET /latest/meta-data/iam/security-credentials/         the role name
  GET /latest/meta-data/iam/security-credentials/<role>   {"Code": "Success",
      "LastUpdated", "Type": "AWS-HMAC", "AccessKeyId", "SecretAccessKey",
      "Token", "Expiration"}   (404 for another role name)
  GET /latest/meta-data/placement/region                  --region
  A GET with an unknown or expired X-aws-ec2-metadata-token gets 401; one
  without the header gets 401 with --require-token (IMDSv1 works otherwise).
Container: GET /container/<anything> answers {"AccessKeyId",
  "SecretAccessKey", "Token", "Expiration", "RoleArn"}; with
  --container-token T the Authorization header must equal T (401 otherwise).

Faults: POST /_control/faults with a JSON rule or list; POST /_control/clear
removes them. Each request takes the first rule that matches it, which is
used "count" times (default 1, -1 = forever). Optional "path_prefix" (default
any path). Kinds, and the requests they match:
  {"kind": "status", "code": 500}     any: answer that status (default 500)
  {"kind": "stall", "seconds": S}     any: sleep S, then answer as usual
  {"kind": "token_refused", "code": 403}  the token PUT only (default 403)
  {"kind": "bad_json"}                credential documents: 200, not JSON
  {"kind": "expired"}                 credential documents: real credentials
                                      with an Expiration an hour ago
  {"kind": "missing_field", "field": "SecretAccessKey"}  credential documents
GET /_control/log: a JSON list, one object per request (control requests
excepted): {"method", "path", "status", "token" (an X-aws-ec2-metadata-token
header came), "authorization" (an Authorization header came), "fault" (its
kind or null), "access_key_id" (issued, or null)}.

Prints "port N" on stdout once listening; exits when its parent does.
"""
import argparse
import datetime
import itertools
import json
import secrets
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
from botocore.config import Config

from server_util import exit_with_parent

CREDS_PREFIX = "/latest/meta-data/iam/security-credentials"
CREDENTIAL_KINDS = ("bad_json", "expired", "missing_field")


def iso(t):
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.faults = []
        self.log = []
        self.tokens = {}  # token -> monotonic deadline
        self.sessions = itertools.count(1)
        # parameter_validation off: botocore would refuse DurationSeconds < 900.
        self.sts = boto3.client(
            "sts", endpoint_url=args.moto, region_name=args.region,
            aws_access_key_id=args.access_key, aws_secret_access_key=args.secret_key,
            config=Config(parameter_validation=False, retries={"max_attempts": 2}))

    def take_fault(self, method, path):
        is_token = method == "PUT" and path == "/latest/api/token"
        is_creds = method == "GET" and (
            path.startswith("/container/") or
            (path.startswith(CREDS_PREFIX + "/") and len(path) > len(CREDS_PREFIX) + 1))
        with self.lock:
            for rule in self.faults:
                kind = rule.get("kind")
                if rule.get("count", 1) == 0 or not path.startswith(rule.get("path_prefix", "")):
                    continue
                if (kind == "token_refused" and not is_token) or \
                        (kind in CREDENTIAL_KINDS and not is_creds):
                    continue
                if rule.get("count", 1) > 0:
                    rule["count"] = rule.get("count", 1) - 1
                return dict(rule)
        return None

    def mint(self):
        name = "shardstream-%d" % next(self.sessions)
        c = self.sts.assume_role(RoleArn=self.args.role_arn, RoleSessionName=name,
                                 DurationSeconds=self.args.duration)["Credentials"]
        return {"AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"],
                "Token": c["SessionToken"], "Expiration": iso(c["Expiration"])}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "shardstream-test"

    def log_message(self, fmt, *args):  # quiet
        pass

    @property
    def state(self):
        return self.server.state

    def _answer(self, code, body=b"", ctype="text/plain", headers=None, fault=None, key=None):
        if isinstance(body, str):
            body = body.encode()
        if fault is not False:  # control requests are not logged
            with self.state.lock:
                self.state.log.append({
                    "method": self.command, "path": self.path, "status": code,
                    "token": "X-aws-ec2-metadata-token" in self.headers,
                    "authorization": "Authorization" in self.headers,
                    "fault": fault["kind"] if fault else None, "access_key_id": key})
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # --- control -----------------------------------------------------------
    def do_POST(self):
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urllib.parse.urlsplit(self.path).path
        if path == "/_control/faults":
            rules = json.loads(data)
            with self.state.lock:
                self.state.faults.extend(rules if isinstance(rules, list) else [rules])
            return self._answer(200, "ok", fault=False)
        if path == "/_control/clear":
            with self.state.lock:
                self.state.faults.clear()
            return self._answer(200, "ok", fault=False)
        return self._answer(404, "not found")

    # --- IMDS token --------------------------------------------------------
    def do_PUT(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = urllib.parse.urlsplit(self.path).path
        fault = self._pre_fault("PUT", path)
        if fault and fault["kind"] in ("status", "token_refused"):
            code = fault.get("code", 403 if fault["kind"] == "token_refused" else 500)
            return self._answer(code, "injected", fault=fault)
        if path != "/latest/api/token":
            return self._answer(404, "not found", fault=fault)
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        if ttl is None or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return self._answer(400, "missing or invalid ttl", fault=fault)
        token = secrets.token_urlsafe(32)
        with self.state.lock:
            self.state.tokens[token] = time.monotonic() + int(ttl)
        self._answer(200, token, headers={"X-aws-ec2-metadata-token-ttl-seconds": ttl},
                     fault=fault)

    def _pre_fault(self, method, path):
        fault = self.state.take_fault(method, path)
        if fault and fault["kind"] == "stall":
            time.sleep(fault.get("seconds", 5))
        return fault

    # --- GETs --------------------------------------------------------------
    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/_control/log":
            with self.state.lock:
                body = json.dumps(self.state.log)
            return self._answer(200, body, "application/json", fault=False)
        fault = self._pre_fault("GET", path)
        if fault and fault["kind"] == "status":
            return self._answer(fault.get("code", 500), "injected", fault=fault)
        args = self.state.args
        if path.startswith("/container/"):
            if args.container_token is not None and \
                    self.headers.get("Authorization") != args.container_token:
                return self._answer(401, "unauthorized", fault=fault)
            return self._credentials(fault, {"RoleArn": args.role_arn}, "application/json")
        if path.startswith("/latest/"):
            token = self.headers.get("X-aws-ec2-metadata-token")
            if token is not None:
                with self.state.lock:
                    deadline = self.state.tokens.get(token)
                if deadline is None or deadline < time.monotonic():
                    return self._answer(401, "", fault=fault)
            elif args.require_token:
                return self._answer(401, "", fault=fault)
            if path.rstrip("/") == CREDS_PREFIX:
                return self._answer(200, args.role_name, fault=fault)
            if path == CREDS_PREFIX + "/" + args.role_name:
                now = iso(datetime.datetime.now(datetime.timezone.utc))
                return self._credentials(fault, {"Code": "Success", "LastUpdated": now,
                                                 "Type": "AWS-HMAC"}, "text/plain")
            if path == "/latest/meta-data/placement/region":
                return self._answer(200, args.region, fault=fault)
        self._answer(404, "not found", fault=fault)

    def _credentials(self, fault, extra, ctype):
        kind = fault["kind"] if fault else None
        if kind == "bad_json":
            return self._answer(200, "<html>this is not JSON", ctype, fault=fault)
        try:
            creds = self.state.mint()
        except Exception as e:  # moto down or refusing: tell the test
            return self._answer(500, "minting failed: %s" % e, fault=fault)
        doc = dict(extra)
        doc.update(creds)
        if kind == "expired":
            doc["Expiration"] = iso(datetime.datetime.now(datetime.timezone.utc)
                                    - datetime.timedelta(hours=1))
        if kind == "missing_field":
            doc.pop(fault.get("field", "SecretAccessKey"), None)
        self._answer(200, json.dumps(doc, indent=2), ctype, fault=fault,
                     key=creds["AccessKeyId"])


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moto", required=True, help="moto endpoint, http://127.0.0.1:PORT")
    ap.add_argument("--access-key", required=True)
    ap.add_argument("--secret-key", required=True)
    ap.add_argument("--role-arn", required=True)
    ap.add_argument("--duration", type=int, default=900, help="DurationSeconds")
    ap.add_argument("--role-name", default="shardstream-role")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--require-token", action="store_true", help="refuse IMDSv1")
    ap.add_argument("--container-token", default=None)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    host = urllib.parse.urlsplit(args.moto).hostname
    if host not in ("127.0.0.1", "localhost"):
        ap.error("--moto must be on loopback")
    exit_with_parent()
    server = Server(("127.0.0.1", args.port), Handler)
    server.state = State(args)
    print("port %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
