#!/usr/bin/env python3
"""Writes tests/data/sigv4_golden.json: S3 requests signed by botocore's
S3SigV4Auth at a fixed time, for tests/sigv4_test.cc to reproduce byte for
byte. Usage: make_sigv4_golden.py [OUTPUT]  (default: print to stdout).

Each case gives the inputs (method, bucket/key or url, extra headers, body,
credentials, region, time) and botocore's canonical request, string to sign,
and final headers. Object urls quote the key as botocore's S3 client does
(urllib.parse.quote with safe "/~"), so the test checks our url encoding too.
"""
import datetime
import json
import sys
from urllib.parse import quote

import botocore
import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

TIME = datetime.datetime(2024, 3, 9, 17, 5, 42)


class RecordingAuth(botocore.auth.S3SigV4Auth):
    def string_to_sign(self, request, canonical_request):
        self.canonical = canonical_request
        self.sts = super().string_to_sign(request, canonical_request)
        return self.sts


def case(name, *, method="GET", endpoint="http://127.0.0.1:9000", bucket="bucket",
         key="", query="", headers=None, body="", token=None, region="us-east-1",
         access="AKIDEXAMPLE", secret="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"):
    path = "/" + bucket if bucket else ""
    if key:
        path += "/" + quote(key, safe="/~")
    url = endpoint + path + ("?" + query if query else "")
    req = AWSRequest(method=method, url=url, headers=dict(headers or {}),
                     data=body.encode("utf-8"))
    auth = RecordingAuth(Credentials(access, secret, token), "s3", region)
    original = botocore.auth.get_current_datetime
    botocore.auth.get_current_datetime = lambda *a, **k: TIME
    try:
        auth.add_auth(req)
    finally:
        botocore.auth.get_current_datetime = original
    return {
        "name": name,
        "input": {
            "method": method, "endpoint": endpoint, "bucket": bucket, "key": key,
            "query": query, "headers": list((headers or {}).items()), "body": body,
            "access_key": access, "secret_key": secret, "session_token": token or "",
            "region": region, "service": "s3",
            "amz_date": TIME.strftime("%Y%m%dT%H%M%SZ"),
        },
        "url": url,
        "canonical_request": auth.canonical,
        "string_to_sign": auth.sts,
        "headers": list(req.headers.items()),
    }


def main():
    cases = [
        case("get_simple", key="shards/data-000000.tar"),
        case("key_with_spaces", key="my shards/part 1 of 2.tar"),
        case("key_unicode", key="données/ünïcødé-日本.tar"),
        case("key_reserved_chars", key="a+b=c&d~e!'()*,;:@$ [x].tar"),
        case("list_v2_query", key="",
             query="list-type=2&prefix=" + quote("my dir/ü", safe="~") +
                   "&delimiter=%2F&continuation-token=" + quote("1/xyz+==", safe="~")),
        case("session_token", key="k.tar",
             token="FQoGZXIvYXdzEPT//////////wEaDOSECRET+TOKEN/with=chars"),
        case("put_body", method="PUT", key="ckpt/step 100/model.bin",
             headers={"Content-Type": "application/octet-stream",
                      "X-Amz-Meta-Note": "  two   spaces  here "},
             body="hello checkpoint\n"),
        case("multipart_create", method="POST", key="big.bin", query="uploads"),
        case("multipart_part", method="PUT", key="big.bin",
             query="partNumber=3&uploadId=" + quote("2~abc/DEF+ghi==", safe="~"),
             body="x" * 1000),
        case("multipart_complete", method="POST", key="big.bin",
             query="uploadId=abc",
             body="<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>"
                  "<ETag>\"e\"</ETag></Part></CompleteMultipartUpload>"),
        case("ranged_get_if_match", key="k.tar",
             headers={"Range": "bytes=100-", "If-Match": "\"etag-1\""}),
        case("https_virtual_host", endpoint="https://bucket.s3.eu-west-1.amazonaws.com",
             bucket="", key="path/to/obj.tar", region="eu-west-1"),
        case("custom_port_https", endpoint="https://minio.local:9443", key="x"),
        case("head_delete", method="DELETE", key="old.tar"),
    ]
    text = json.dumps({"botocore": botocore.__version__, "cases": cases},
                      indent=1, ensure_ascii=False) + "\n"
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
