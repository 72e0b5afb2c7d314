#!/usr/bin/env python3
"""Check a release package made by `cargo xtask dist` as a user would use it.

1. The tarball matches its `.sha256`, and once unpacked every file matches
   the package's `SHA256SUMS` (and every file is listed there).
2. Each binary in `bin/` runs (`--help`).
3. `bin/gpuplane-server` started alone, from an empty directory and with a
   site root that does not exist, serves the console's files built into it:
   each file of `target/dist/site` comes back byte for byte with its media
   type, the sign-in page names the bundle it loads, and `/docs/` is the
   manual.
4. The `Dockerfile` copies only files the package has, and its entrypoint is
   the server's path inside the image; `compose.yaml` builds that image and
   sets only variables `gpuplane-server serve` reads.
Exits 1 with one line per problem, else prints a one-line summary.
Usage: scripts/check-dist.py target/dist/gpuplane-VERSION-ARCH-linux[-debug].tar.gz
"""
import argparse
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request

MEDIA_TYPES = {".js": "text/javascript", ".wasm": "application/wasm", ".css": "text/css"}


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_checksums(tarball, package, problems):
    expected = open(tarball + ".sha256").read().split()[0]
    if sha256(tarball) != expected:
        problems.append(f"{tarball}: does not match its .sha256")
    listed = {}
    for line in open(os.path.join(package, "SHA256SUMS")):
        digest, name = line.rstrip("\n").split("  ", 1)
        listed[name] = digest
    present = set()
    for folder, _, files in os.walk(package):
        for name in files:
            relative = os.path.relpath(os.path.join(folder, name), package)
            if relative != "SHA256SUMS":
                present.add(relative)
    for name in sorted(present - listed.keys()):
        problems.append(f"SHA256SUMS: {name} is not listed")
    for name in sorted(listed.keys() - present):
        problems.append(f"SHA256SUMS: lists {name}, which the package lacks")
    for name in sorted(present & listed.keys()):
        if sha256(os.path.join(package, name)) != listed[name]:
            problems.append(f"SHA256SUMS: {name} does not match")


def check_binaries(package, problems):
    for name in sorted(os.listdir(os.path.join(package, "bin"))):
        result = subprocess.run([os.path.join(package, "bin", name), "--help"], capture_output=True, text=True)
        if result.returncode != 0:
            problems.append(f"bin/{name} --help exited {result.returncode}: {result.stderr.strip()}")


def get(url, problems):
    """The media type and body of a 200 answer; None after noting any other."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.headers.get("content-type", ""), response.read()
    except urllib.error.HTTPError as error:
        problems.append(f"GET {url}: {error.code}")
        return None


def check_embedded_console(package, site, problems):
    with tempfile.TemporaryDirectory() as empty:
        env = dict(os.environ, GPUPLANE_SITE_ROOT=os.path.join(empty, "no-site"), GPUPLANE_LOG="info")
        server = subprocess.Popen(
            [os.path.join(package, "bin", "gpuplane-server"), "--data-dir", os.path.join(empty, "data"),
             "serve", "--bind", "127.0.0.1:0"],
            cwd=empty, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            # The server logs where it listens, then where its console comes from.
            url, console_line, log = None, None, ""
            deadline = time.monotonic() + 60
            while console_line is None and time.monotonic() < deadline:
                line = server.stderr.readline()
                if not line:
                    break
                log += line
                match = re.search(r"listening on (http://\S+)", line)
                url = url or (match and match.group(1))
                if "console" in line and url:
                    console_line = line
            if url is None or console_line is None:
                problems.append(f"the packaged server did not start:\n{log}")
                return
            # Keep reading its log so the server never blocks on a full pipe.
            threading.Thread(target=server.stderr.read, daemon=True).start()
            if "built into this binary" not in console_line:
                problems.append(f"the packaged server does not serve a console built in: {console_line.strip()}")
            checked = 0
            for folder, _, files in os.walk(site):
                for name in files:
                    path = os.path.join(folder, name)
                    route = "/" + os.path.relpath(path, site).replace(os.sep, "/")
                    checked += 1
                    answer = get(url + route, problems)
                    if answer is None:
                        continue
                    media_type, body = answer
                    if body != open(path, "rb").read():
                        problems.append(f"{route}: the server's copy differs from {path}")
                    wanted = MEDIA_TYPES.get(os.path.splitext(name)[1])
                    if wanted and not media_type.startswith(wanted):
                        problems.append(f"{route}: served as {media_type!r}, not {wanted}")
            if checked == 0:
                problems.append(f"{site} holds no files")
            answer = get(url + "/login", problems)
            if answer and b"/pkg/gpuplane.js" not in answer[1]:
                problems.append("/login does not load /pkg/gpuplane.js")
            answer = get(url + "/docs/", problems)
            if answer and b"<title>GPUPlane" not in answer[1]:
                problems.append("/docs/ does not answer the manual's first page")
            return checked
        finally:
            server.terminate()
            server.wait(timeout=20)


def check_dockerfile(package, problems):
    lines = open(os.path.join(package, "Dockerfile")).read().splitlines()
    for line in lines:
        words = line.split()
        if words[:1] == ["COPY"]:
            for source in words[1:-1]:
                if not source.startswith("--") and not os.path.exists(os.path.join(package, source)):
                    problems.append(f"Dockerfile: COPY {source}: not in the package")
        if words[:1] == ["ENTRYPOINT"]:
            if '"/usr/local/bin/gpuplane-server"' not in line:
                problems.append("Dockerfile: the entrypoint is not /usr/local/bin/gpuplane-server")
            if not any(l.startswith("COPY bin/gpuplane-server /usr/local/bin/gpuplane-server") for l in lines):
                problems.append("Dockerfile: does not copy bin/gpuplane-server to /usr/local/bin")


def check_compose(package, problems):
    text = open(os.path.join(package, "compose.yaml")).read()
    if not re.search(r"^    build: \.$", text, re.MULTILINE):
        problems.append("compose.yaml: the server is not built from the package's Dockerfile (build: .)")
    server = os.path.join(package, "bin", "gpuplane-server")
    known = subprocess.run([server, "serve", "--help"], capture_output=True, text=True).stdout
    for name in sorted(set(re.findall(r"\b(GPUPLANE_[A-Z_]+):", text))):
        if not re.search(rf"\[env: {name}[=\]]", known):
            problems.append(f"compose.yaml: sets {name}, which `gpuplane-server serve` does not read")
    if "GPUPLANE_DATABASE_URL" not in text:
        problems.append("compose.yaml: the server is not given its PostgreSQL (GPUPLANE_DATABASE_URL)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tarball")
    args = parser.parse_args()
    tarball = os.path.abspath(args.tarball)
    name = os.path.basename(tarball).removesuffix(".tar.gz")
    site = os.path.join(os.path.dirname(tarball), "site")
    problems = []
    with tempfile.TemporaryDirectory() as unpacked:
        with tarfile.open(tarball) as archive:
            archive.extractall(unpacked, filter="tar")
        package = os.path.join(unpacked, name)
        check_checksums(tarball, package, problems)
        check_binaries(package, problems)
        served = check_embedded_console(package, site, problems)
        check_dockerfile(package, problems)
        check_compose(package, problems)
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"check-dist: {name}: checksums match, binaries run, {served} console files served from inside the server")
    return 0


if __name__ == "__main__":
    sys.exit(main())
