"""How long an MCP tool call takes compared with the same API request, with
the official Python client against a real server (prints figures; asserts
nothing). Run after a release build:

    CARGO_TARGET_DIR=target GPUPLANE_SERVER_BIN=target/release/gpuplane-server \\
    GPUCTL_BIN=target/release/gpuctl GPUPLANE_AGENT_BIN=target/release/gpuplane-agent \\
    .venv/bin/python testkit/mcp/bench_mcp.py
"""

import asyncio
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from gpuplane_testkit import GPUCTL_BIN, Server, free_port  # noqa: E402

CALLS = 300
JOBS = 200


def summary(name, seconds):
    seconds = sorted(seconds)
    p50 = statistics.median(seconds) * 1000
    p95 = seconds[int(len(seconds) * 0.95)] * 1000
    print(f"{name:<44} p50 {p50:6.2f} ms   p95 {p95:6.2f} ms   ({len(seconds)} calls)")


async def through_mcp(client, tool, arguments):
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        result = await client.call_tool(tool, arguments)
        times.append(time.perf_counter() - start)
        assert not result.is_error, result
    return times


def through_api(server, path):
    times = []
    for _ in range(CALLS):
        request = urllib.request.Request(f"{server.url}/api/v1{path}",
                                         headers={"Authorization": f"Bearer {server.token}"})
        start = time.perf_counter()
        with urllib.request.urlopen(request) as response:
            response.read()
        times.append(time.perf_counter() - start)
    return times


async def main():
    server = Server(tempfile.mkdtemp(prefix="gpuplane-mcp-bench-"), free_port())
    server.start()
    try:
        for n in range(JOBS):
            server.post("/jobs", {"name": f"bench-{n}", "command": ["true"], "resources": {"gpu": 1}})
        summary("API GET /jobs?limit=20 (urllib)", through_api(server, "/jobs?limit=20"))
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {server.token}"}) as http:
            for mode in ("auto", "legacy"):
                async with Client(streamable_http_client(f"{server.url}/mcp", http_client=http), mode=mode) as client:
                    label = f"MCP list_jobs over HTTP ({client.protocol_version})"
                    summary(label, await through_mcp(client, "list_jobs", {}))
        env = {"HOME": tempfile.mkdtemp(), "GPUCTL_SERVER": server.url, "GPUCTL_TOKEN": server.token}
        async with Client(StdioServerParameters(command=GPUCTL_BIN, args=["mcp"], env=env)) as client:
            label = f"MCP list_jobs via gpuctl mcp ({client.protocol_version})"
            summary(label, await through_mcp(client, "list_jobs", {}))
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
