#!/usr/bin/env python3
"""Creates an IAM user with full access on a moto server that enforces
authentication, and prints "access_key ...", "secret_key ..." and then
"role_arn ..." (a role "shardstream-role" that anyone may assume, also by web
identity, allowed everything), one "name value" line each.

moto only accepts keys it knows, so enforcement is lifted for the five IAM
calls (POST /moto-api/reset-auth) and put back to 0 before returning.
"""
import json
import sys
import urllib.request

import boto3

ALLOW_ALL = json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
# moto checks only the AWS principal (of sts:AssumeRole) against a trust
# policy; the web identity and SAML calls are unsigned and never checked.
TRUST_ANYONE = json.dumps({
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": "*"},
         "Action": ["sts:AssumeRole", "sts:TagSession"]},
        {"Effect": "Allow", "Principal": {"Federated": "*"},
         "Action": ["sts:AssumeRoleWithWebIdentity", "sts:AssumeRoleWithSAML"]}]})


def reset_auth(endpoint, count):
    req = urllib.request.Request(endpoint + "/moto-api/reset-auth",
                                 data=str(count).encode(), method="POST",
                                 headers={"Content-Type": "text/plain"})
    urllib.request.urlopen(req).read()


def main():
    endpoint = sys.argv[1]
    reset_auth(endpoint, 5)
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="setup", aws_secret_access_key="setup")
    iam.create_user(UserName="shardstream")
    iam.put_user_policy(UserName="shardstream", PolicyName="all", PolicyDocument=ALLOW_ALL)
    key = iam.create_access_key(UserName="shardstream")["AccessKey"]
    role = iam.create_role(RoleName="shardstream-role",
                           AssumeRolePolicyDocument=TRUST_ANYONE)["Role"]
    iam.put_role_policy(RoleName="shardstream-role", PolicyName="all",
                        PolicyDocument=ALLOW_ALL)
    reset_auth(endpoint, 0)
    print("access_key", key["AccessKeyId"])
    print("secret_key", key["SecretAccessKey"])
    print("role_arn", role["Arn"])


if __name__ == "__main__":
    main()
