"""The S3-compatible server of the object-storage tests (tests/common/moto.rs and
python/tests/test_remote.py both start it): moto's server on 127.0.0.1:PORT, with IAM
authentication on (a wrong credential is refused as S3 refuses it), a user allowed everything
and the bucket `packs`. Prints the user's key as one JSON line, then serves until its standard
input closes, so the server dies with the test process that started it, however that ends.

    python tests/python/moto_server.py PORT
"""

import json
import logging
import os
import sys

logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log on the test's stderr
os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"  # the 3 IAM calls below; then auth is on

from moto.server import ThreadedMotoServer  # noqa: E402 (after the environment it reads)
import boto3  # noqa: E402

port = int(sys.argv[1])
server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
server.start()
kw = dict(endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
iam = boto3.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup", **kw)
iam.create_user(UserName="tester")
iam.put_user_policy(UserName="tester", PolicyName="all", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
key = iam.create_access_key(UserName="tester")["AccessKey"]
s3 = boto3.client("s3", aws_access_key_id=key["AccessKeyId"],
                  aws_secret_access_key=key["SecretAccessKey"], **kw)
s3.create_bucket(Bucket="packs")
print(json.dumps({"key": key["AccessKeyId"], "secret": key["SecretAccessKey"]}), flush=True)
sys.stdin.read()
server.stop()
