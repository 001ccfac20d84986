"""An independent MCP client: the official Python SDK (`mcp` from PyPI)
against a running mneme, in both protocol eras.

Usage: sdk_client.py <mcp url> <api key>

- "legacy": the initialize handshake with sessions (what claude.ai and
  ChatGPT use today);
- "auto": the SDK probes `server/discover` (2026-07-28, stateless) and falls
  back to the handshake;
- "sse": the legacy HTTP+SSE transport (`/sse` and `/message`), for clients
  that predate Streamable HTTP.

Exits non-zero with a message on the first deviation; prints one line per
mode on success.
"""

import asyncio
import json
import sys
import uuid

import httpx2
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client


def structured(result):
    assert not result.is_error, f"tool failed: {result}"
    assert result.structured_content is not None, f"no structuredContent: {result}"
    mirrored = json.loads(result.content[0].text)
    assert mirrored == result.structured_content, "text block does not mirror structuredContent"
    return result.structured_content


def connect(url, key, mode):
    headers = {"Authorization": f"Bearer {key}"}
    if mode == "sse":
        sse_url = url.removesuffix("/mcp") + "/sse"
        return Client(sse_client(sse_url, headers=headers, timeout=30), mode="legacy")
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    return Client(streamable_http_client(url, http_client=http), mode=mode)


async def exercise(url, key, mode):
    async with connect(url, key, mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"remember", "recall", "forget"} <= set(tools), sorted(tools)
        assert tools["recall"].annotations.read_only_hint is True
        assert tools["forget"].annotations.destructive_hint is True
        assert all(tool.output_schema for tool in tools.values())

        marker = uuid.uuid4().hex[:8]
        content = f"The {mode} client marker {marker} belongs to the Python SDK test."
        stored = structured(
            await client.call_tool("remember", {"content": content, "topic": "sdk", "type": "fact"})
        )
        assert stored["outcome"] == "created", stored
        found = structured(await client.call_tool("recall", {"text": f"Python SDK marker {marker}"}))
        assert found["fragments"] and found["fragments"][0]["id"] == stored["id"], found

        bad = await client.call_tool("remember", {"content": "x", "topic": "sdk", "type": "fact"})
        assert bad.is_error, f"invalid input must be a tool error: {bad}"
        assert json.loads(bad.content[0].text)["error"]["code"] == "invalid_argument"

        gone = structured(await client.call_tool("forget", {"id": stored["id"]}))
        assert gone["deleted"] == 1 and gone["ids"] == [stored["id"]], gone
        return client.session.protocol_version if hasattr(client, "session") else "?"


async def main():
    url, key = sys.argv[1], sys.argv[2]
    for mode in ("legacy", "auto", "sse"):
        version = await exercise(url, key, mode)
        print(f"{mode}: ok (protocol {version})")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as error:
        print(f"assertion failed: {error}", file=sys.stderr)
        sys.exit(1)
