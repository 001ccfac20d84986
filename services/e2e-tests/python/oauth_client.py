"""The official Python MCP SDK's OAuth client against a running mneme.

Usage: oauth_client.py <mcp url> <api key>

The SDK discovers mneme's authorization server from the 401, registers a
client, sends "the user" to the sign-in page and redeems the code. The
user is simulated headlessly: the redirect handler loads the page, submits
the form with the API key the connector should act as, and hands the code
from the redirect to the callback handler. Then the SDK calls tools with
its access token. Prints "oauth: ok" on success.
"""

import asyncio
import html
import re
import sys
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

CALLBACK = "http://127.0.0.1:9/callback"


class MemoryStorage(TokenStorage):
    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class HeadlessUser:
    """Plays the person in the browser: signs in with an API key and allows."""

    def __init__(self, api_key):
        self.api_key = api_key
        self.result = None

    async def redirect(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as browser:
            page = await browser.get(authorization_url)
            assert page.status_code == 200, f"sign-in page: {page.status_code} {page.text[:300]}"
            fields = {
                name: html.unescape(value)
                for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text)
            }
            assert "csrf" in fields, "the page carries an anti-forgery token"
            fields.update({"api_key": self.api_key, "decision": "allow"})
            answer = await browser.post(urljoin(authorization_url, "/authorize"), data=fields)
            assert answer.status_code in (302, 303), f"consent: {answer.status_code} {answer.text[:300]}"
            location = answer.headers["location"]
            assert location.startswith(CALLBACK), location
            query = parse_qs(urlparse(location).query)
            self.result = AuthorizationCodeResult(
                code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
            )

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None, "the redirect handler ran first"
        return self.result


async def main():
    url, key = sys.argv[1], sys.argv[2]
    user = HeadlessUser(key)
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="Python SDK OAuth test",
            redirect_uris=[CALLBACK],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=MemoryStorage(),
        redirect_handler=user.redirect,
        callback_handler=user.callback,
    )
    http = httpx2.AsyncClient(auth=provider, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"remember", "recall"} <= tools, sorted(tools)
        stored = await client.call_tool(
            "remember", {"content": "The Python SDK signed in through OAuth.", "topic": "sdk", "type": "fact"}
        )
        assert not stored.is_error, stored
        found = await client.call_tool("recall", {"text": "Python SDK signed in through OAuth"})
        assert not found.is_error and found.structured_content["fragments"], found
    print("oauth: ok")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as error:
        print(f"assertion failed: {error}", file=sys.stderr)
        sys.exit(1)
