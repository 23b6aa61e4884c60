#!/usr/bin/env python3
"""Creates an IAM user with full access on a moto server that enforces
authentication, and prints "access_key ..." and "secret_key ...".

moto only accepts keys it knows, so enforcement is lifted for the three IAM
calls (POST /moto-api/reset-auth) and put back to 0 before returning.
"""
import json
import sys
import urllib.request

import boto3


def reset_auth(endpoint, count):
    req = urllib.request.Request(endpoint + "/moto-api/reset-auth",
                                 data=str(count).encode(), method="POST",
                                 headers={"Content-Type": "text/plain"})
    urllib.request.urlopen(req).read()


def main():
    endpoint = sys.argv[1]
    reset_auth(endpoint, 3)
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="setup", aws_secret_access_key="setup")
    iam.create_user(UserName="shardstream")
    iam.put_user_policy(UserName="shardstream", PolicyName="all", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName="shardstream")["AccessKey"]
    reset_auth(endpoint, 0)
    print("access_key", key["AccessKeyId"])
    print("secret_key", key["SecretAccessKey"])


if __name__ == "__main__":
    main()
