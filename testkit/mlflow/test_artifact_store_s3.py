"""MLflow artifacts in S3-compatible object storage: a real gpuplane-server
with `artifact_store = s3://…` and `artifact_store_endpoint` pointed at
moto's S3 server (from PyPI, started here), the unmodified mlflow client
uploading and downloading, and boto3 reading the bucket itself."""

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import boto3
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from gpuplane_testkit import SERVER_BIN, Server, free_port  # noqa: E402
from test_mlflow_client import script  # noqa: E402

BUCKET = "gpuplane-artifacts"
PREFIX = "team-a/mlflow"


@pytest.fixture(scope="module")
def s3():
    port = free_port()
    moto = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            break
        except OSError:
            assert time.monotonic() < deadline, "moto's S3 server did not start"
            time.sleep(0.2)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    client.create_bucket(Bucket=BUCKET)
    yield endpoint, client
    moto.terminate()
    moto.wait()


@pytest.fixture(scope="module")
def server(s3, tmp_path_factory):
    endpoint, _ = s3
    saved = dict(os.environ)
    os.environ.update({"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"})
    server = Server(str(tmp_path_factory.mktemp("server")), free_port(), flags=[
        "--artifact-store", f"s3://{BUCKET}/{PREFIX}", "--artifact-store-endpoint", endpoint,
        "--request-body-timeout-s", "2",
    ])
    server.start()
    os.environ.clear()
    os.environ.update(saved)
    yield server
    server.stop()


def keys(client, prefix):
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return {item["Key"]: item["Size"] for item in listed.get("Contents", [])}


def test_artifacts_go_to_the_bucket_and_come_back_byte_for_byte(server, s3, tmp_path):
    _, client = s3
    # One retry after a dropped connection (the real client makes up to 7):
    # with both cores busy, about 1 run in 25 saw the request after the
    # 20 MiB transfers end "Remote end closed connection without response",
    # with no panic and no connection error in the server's log. Refusals
    # are still never retried.
    big = tmp_path / "weights.bin"
    big.write_bytes(os.urandom(20 << 20))  # over one 8 MiB part: a multipart upload
    folder = tmp_path / "model"
    (folder / "tokenizer").mkdir(parents=True)
    (folder / "config.json").write_text('{"layers": 2}')
    (folder / "tokenizer" / "vocab.txt").write_text("a\nb\n")
    answer = script(server, f"""
        import hashlib, os
        client = mlflow.MlflowClient()
        run_id = client.create_run("0", run_name="s3-artifacts").info.run_id
        client.log_artifact(run_id, "{big}")
        client.log_artifacts(run_id, "{folder}", artifact_path="model")
        listed = [[f.path, f.is_dir, f.file_size] for f in client.list_artifacts(run_id)]
        nested = [[f.path, f.is_dir, f.file_size] for f in client.list_artifacts(run_id, "model")]
        out = "{tmp_path / 'down'}"
        os.makedirs(out)
        got = client.download_artifacts(run_id, "weights.bin", out)
        tree = client.download_artifacts(run_id, "model", out)
        print(json.dumps({{
            "run_id": run_id, "listed": listed, "nested": nested,
            "digest": hashlib.sha256(open(got, "rb").read()).hexdigest(),
            "vocab": open(os.path.join(tree, "tokenizer", "vocab.txt")).read(),
        }}))
    """, retries=1)
    run_id = answer["run_id"]
    assert answer["listed"] == [["model", True, None], ["weights.bin", False, 20 << 20]]
    assert answer["nested"] == [["model/config.json", False, 13], ["model/tokenizer", True, None]]
    assert answer["digest"] == hashlib.sha256(big.read_bytes()).hexdigest()
    assert answer["vocab"] == "a\nb\n"
    # The bucket holds them under the prefix, at MLflow's paths; nothing is half-uploaded.
    base = f"{PREFIX}/0/{run_id}/artifacts"
    assert keys(client, f"{PREFIX}/0/{run_id}/") == {
        f"{base}/weights.bin": 20 << 20,
        f"{base}/model/config.json": 13,
        f"{base}/model/tokenizer/vocab.txt": 4,
    }
    assert client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    # Deleting the run deletes its objects.
    server.call("DELETE", f"/runs/{run_id}")
    assert keys(client, f"{PREFIX}/0/{run_id}/") == {}


def test_an_upload_that_breaks_off_leaves_nothing_in_the_bucket(server, s3):
    _, client = s3
    run_id = script(server, """
        print(json.dumps(mlflow.MlflowClient().create_run("0", run_name="broken-upload").info.run_id))
    """)
    # 12 MiB of a promised 30: the first part goes up, then the client stops
    # sending; past request_body_timeout_s the server gives up and aborts.
    path = f"/api/2.0/mlflow-artifacts/artifacts/0/{run_id}/artifacts/broken.bin"
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall((f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {server.token}\r\n"
                      f"Content-Length: {30 << 20}\r\n\r\n").encode())
        conn.sendall(b"x" * (12 << 20))
        conn.settimeout(30)
        answer = conn.recv(4096).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 400"), answer
    assert "no data arrived" in answer, answer
    assert keys(client, f"{PREFIX}/0/{run_id}/") == {}
    assert client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    # A job's token, another project's token and a viewer are refused as for a folder store.
    server.post("/projects", {"name": "s3-other"})
    other = server.post("/tokens", {"name": "s3-other-only", "scope": "write", "project": "s3-other"})["secret"]
    request = urllib.request.Request(f"{server.url}{path}", method="PUT", data=b"x",
                                     headers={"Authorization": f"Bearer {other}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 404
    assert keys(client, f"{PREFIX}/0/{run_id}/") == {}


def test_a_bad_store_setting_is_one_clear_line(tmp_path):
    for setting, said in [
        ("gs://bucket", "artifact_store must be a folder or s3://BUCKET[/PREFIX]"),
        ("s3://", "names no bucket"),
    ]:
        done = subprocess.run(
            [SERVER_BIN,
             "--data-dir", str(tmp_path), "serve", "--bind", "127.0.0.1:0", "--artifact-store", setting],
            capture_output=True, text=True, timeout=30,
        )
        assert done.returncode != 0 and said in done.stderr, done.stderr
