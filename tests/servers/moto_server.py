#!/usr/bin/env python3
"""moto's standalone server (same CLI as `python -m moto.server`) with its
authentication (INITIAL_NO_AUTH_ACTION_COUNT=0) made to behave like AWS where
the credential provider chain tests need it:

1. STS AssumeRoleWithWebIdentity and AssumeRoleWithSAML are accepted without
   a SigV4 signature. AWS documents them as unsigned calls and the SDKs send
   them unsigned; moto would demand a signature (and fail on the missing
   Authorization header). Every other action stays enforced, and an unsigned
   request for one gets AWS's 403 (`MissingAuthenticationToken`, for S3
   `AccessDenied`) instead of moto's 500 (a KeyError on the header).
2. Temporary credentials from moto's STS (AssumeRole, AssumeRoleWithWebIdentity,
   ...) stop working once past their Expiration; moto accepts them forever.
   An expired key gets the AWS answer: for S3 `ExpiredToken` "The provided
   token has expired." with HTTP 400 (as real S3 does; set
   SHARDSTREAM_MOTO_S3_EXPIRED_STATUS=403 to get 403 instead), for query/JSON
   services (STS, IAM, ...) `ExpiredToken` "The security token included in the
   request is expired" with HTTP 403.
   moto does not enforce STS's 900 s minimum DurationSeconds (only botocore's
   client-side validation does), so durations of a few seconds work as is.

`moto_server.py --port-0` listens on a port the kernel picks and prints "port N", and
counts the requests it serves (GET /_shardstream/requests).
"""
import os
import sys

from moto import settings
from moto.core import errors, serialize
from moto.core.authorization import ActionAuthenticatorMixin
from moto.core.exceptions import _RESTError
from moto.core.utils import utcnow
from moto.iam import access_control
from moto.moto_server import werkzeug_app
from moto.s3.exceptions import S3AccessDeniedError, S3ClientError
from moto.server import main

UNSIGNED_STS_ACTIONS = ("AssumeRoleWithWebIdentity", "AssumeRoleWithSAML")
S3_EXPIRED_STATUS = int(os.environ.get("SHARDSTREAM_MOTO_S3_EXPIRED_STATUS", "400"))


# --- 1. unsigned web identity / SAML calls ---------------------------------
class MissingAuthenticationTokenError(_RESTError):
    code = 403

    def __init__(self):
        super().__init__("MissingAuthenticationToken", "Request is missing Authentication Token")


_authenticate = ActionAuthenticatorMixin._authenticate_and_authorize_action


def _authenticate_unless_unsigned(self, iam_request_cls, resource="*"):
    if getattr(self, "service_name", None) == "sts" and \
            self._get_action() in UNSIGNED_STS_ACTIONS:
        return
    enforced = ActionAuthenticatorMixin.request_count >= settings.INITIAL_NO_AUTH_ACTION_COUNT
    if enforced and "Authorization" not in self.headers and "X-Amz-Signature" not in self.uri:
        if iam_request_cls is access_control.S3IAMRequest:
            raise S3AccessDeniedError()
        raise MissingAuthenticationTokenError()
    return _authenticate(self, iam_request_cls, resource)


ActionAuthenticatorMixin._authenticate_and_authorize_action = _authenticate_unless_unsigned
# moto routes unsigned requests to S3 unless it knows the action; send the
# other STS actions to STS so that they get STS's (query protocol) error.
werkzeug_app.UNSIGNED_ACTIONS.update({a: ("sts", "us-east-1") for a in (
    "AssumeRole", "GetCallerIdentity", "GetSessionToken", "GetFederationToken")})


# --- 2. expired temporary credentials --------------------------------------
class ExpiredTokenError(_RESTError):  # query/JSON services
    code = 403

    def __init__(self):
        super().__init__("ExpiredToken", "The security token included in the request is expired")


class S3ExpiredTokenError(S3ClientError):
    def __init__(self):
        super().__init__("ExpiredToken", "The provided token has expired.")


_assumed_init = access_control.AssumedRoleAccessKey.__init__


def _assumed_init_checking_expiry(self, account_id, partition, access_key_id, headers):
    _assumed_init(self, account_id, partition, access_key_id, headers)
    sts = access_control.sts_backends[account_id][partition]
    role = sts.get_assumed_role_from_access_key(access_key_id)
    if role is not None and utcnow() >= role.expiration:
        raise access_control.CreateAccessKeyFailure(reason="ExpiredToken")


access_control.AssumedRoleAccessKey.__init__ = _assumed_init_checking_expiry


def _wrap_invalid_key(cls, error):
    original = cls._raise_invalid_access_key

    def raise_invalid_access_key(self, reason):
        if reason == "ExpiredToken":
            raise error()
        original(self, reason)

    cls._raise_invalid_access_key = raise_invalid_access_key


_wrap_invalid_key(access_control.IAMRequest, ExpiredTokenError)
_wrap_invalid_key(access_control.S3IAMRequest, S3ExpiredTokenError)

# moto gives S3 errors missing from botocore's model status 400; give ours
# its configured status.
_get_error_model = serialize.get_error_model


def _get_error_model_with_status(exception, service_model):
    shape = _get_error_model(exception, service_model)
    if isinstance(exception, S3ExpiredTokenError):
        shape = errors.ErrorShape("ExpiredToken", {
            "exception": True, "type": "structure", "members": {},
            "error": {"code": "ExpiredToken", "httpStatusCode": S3_EXPIRED_STATUS}})
    return shape


serialize.get_error_model = _get_error_model_with_status


# --- 3. a count of the requests, for tests that count them ----------------
# GET /_shardstream/requests answers {"list": ListObjects(V2) calls, "GET": object GETs, "HEAD":
# object HEADs, "PUT": ..., "by_key": {"GET /bucket/key": n, ...}}.
_counts = {"by_key": {}}


def _counting(app):
    import json
    import threading
    lock = threading.Lock()

    def wrapped(environ, start_response):
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "")
        if path == "/_shardstream/requests":
            with lock:
                body = json.dumps(_counts).encode()
            start_response("200 OK", [("Content-Type", "application/json"),
                                      ("Content-Length", str(len(body)))])
            return [body]
        query = environ.get("QUERY_STRING", "")
        parts = [p for p in path.split("/") if p]
        is_list = method == "GET" and len(parts) == 1 and "uploads" not in query
        kind = "list" if is_list else method
        with lock:
            _counts[kind] = _counts.get(kind, 0) + 1
            if not is_list and len(parts) > 1:
                key = f"{method} {path}"
                _counts["by_key"][key] = _counts["by_key"].get(key, 0) + 1
        return app(environ, start_response)

    return wrapped


def serve_on_a_free_port():
    """`--port-0`: binds a port the kernel picks and prints "port N" once it listens, so that
    no port is reserved and released first for another process to take (moto.server.main
    needs a port number before it binds)."""
    from werkzeug.serving import make_server
    from moto.server import DomainDispatcherApplication, create_backend_app
    app = DomainDispatcherApplication(create_backend_app)
    app.debug = True
    server = make_server("127.0.0.1", 0, _counting(app), threaded=True)  # as main's run_simple
    os.environ["MOTO_PORT"] = str(server.port)
    print("port", server.port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1:] == ["--port-0"]:
        serve_on_a_free_port()
    else:
        main(sys.argv[1:])
