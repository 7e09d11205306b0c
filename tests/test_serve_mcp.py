"""The server's MCP tools, called by a real MCP client (fastmcp) over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.slow


def test_an_agent_searches_with_tour_over_mcp(server, dense_index, bm25_index):
    from fastmcp import Client
    from fastmcp.exceptions import ToolError

    query = "vitamin D and bone density"
    rest = server.search(dense_index.name, query, hits=5, rewriter="tour-soft", teacher="bm25", k=20)

    async def session():
        async with Client(f"{server.url}/mcp/") as client:
            tools = {tool.name for tool in await client.list_tools()}
            found = await client.call_tool(
                "search",
                {
                    "query": query,
                    "index": dense_index.name,
                    "hits": 5,
                    "rewriter": "tour-soft",
                    "teacher": "bm25",
                    "k": 20,
                },
            )
            first = found.structured_content["candidates"][0]["docid"]
            doc = await client.call_tool("get_document", {"docid": first, "index": dense_index.name})
            listed = await client.call_tool("list_indexes", {})
            with pytest.raises(ToolError, match="unknown index 'nope'"):
                await client.call_tool("search", {"query": "a", "index": "nope"})
            return tools, found.structured_content, doc.structured_content, listed.structured_content

    tools, found, doc, listed = asyncio.run(session())
    assert {"search", "get_document", "list_indexes"} <= tools
    assert [c["docid"] for c in found["candidates"]] == [c["docid"] for c in rest["candidates"]]
    assert found["rewriter"] == "tour-soft" and found["teacher_calls"] == rest["teacher_calls"]
    assert doc["doc"] == rest["candidates"][0]["doc"]
    assert {i["name"] for i in listed["result"]} == {dense_index.name, bm25_index.name}
