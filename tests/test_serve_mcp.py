"""The server's MCP tools, called by a real MCP client (fastmcp) over streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json

import pytest

pytestmark = pytest.mark.slow


def test_an_agent_searches_with_tour_over_mcp(server, dense_index, bm25_index):
    from fastmcp import Client
    from fastmcp.exceptions import ToolError

    query = "vitamin D and bone density"
    rest = server.search(dense_index.name, query, hits=5, rewriter="tour-soft", teacher="bm25", depth=20)

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
                    "depth": 20,
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


def test_pyserinis_other_mcp_tools_and_one_line_argument_errors(server, dense_index, bm25_index, mini_scifact):
    from fastmcp import Client
    from fastmcp.exceptions import ToolError

    from tour_pyserini.files import read_qrels

    qrels = read_qrels(mini_scifact["qrels"])
    qid, judged = next(iter(qrels.items()))
    relevant = next(d for d, g in judged.items() if g > 0)

    async def session():
        async with Client(f"{server.url}/mcp/") as client:
            out = {"tools": {tool.name for tool in await client.list_tools()}}
            out["qrels"] = await client.call_tool("get_qrels", {"index_name": dense_index.name, "query_id": qid})
            out["rr"] = await client.call_tool(
                "eval_hits",
                {
                    "index_name": dense_index.name,
                    "metric": "recip_rank",
                    "query_id": qid,
                    "hits": {"not-it": 2.0, relevant: 1.0},
                    "cutoff": 10,
                },
            )
            out["index"] = await client.call_tool("get_index", {"index_name": bm25_index.name})
            out["bm25"] = await client.call_tool("list_indexes", {"index_type": "tf"})
            out["raw"] = await client.call_tool(
                "get_document", {"docid": relevant, "index": dense_index.name, "parse": False}
            )
            for tool, args, message in [
                ("search", {"query": "a", "index": dense_index.name, "hits": "ten"}, "argument 'hits': "),
                ("search", {"index": dense_index.name}, "argument 'query': Missing required argument"),
                # trec_eval's code aborts the process on a cutoff of 0: refused before it runs
                (
                    "eval_hits",
                    {
                        "index_name": dense_index.name,
                        "metric": "ndcg",
                        "query_id": qid,
                        "hits": {relevant: 1.0},
                        "cutoff": 0,
                    },
                    "cutoff must be in [1, ",
                ),
            ]:
                with pytest.raises(ToolError) as refused:
                    await client.call_tool(tool, args)
                out.setdefault("errors", []).append((str(refused.value), message))
            out["alive"] = await client.call_tool("get_index", {"index_name": dense_index.name})
            return out

    out = asyncio.run(session())
    assert {
        "search",
        "get_document",
        "list_indexes",
        "get_index",
        "fuse_search_results",
        "get_qrels",
        "eval_hits",
    } <= out["tools"]
    assert out["qrels"].structured_content == dict(judged)
    assert out["rr"].structured_content["result"] == 0.5  # the relevant document second
    assert out["index"].structured_content["kind"] == "bm25"
    assert [i["name"] for i in out["bm25"].structured_content["result"]] == [bm25_index.name]
    raw = json.loads(out["raw"].structured_content["doc"])
    assert raw["id"] == relevant and set(raw) == {"id", "title", "text"}
    assert out["alive"].structured_content["kind"] == "dense"  # the server is still there
    for error, message in out["errors"]:
        assert message in error and "\n" not in error and "pydantic" not in error


@pytest.mark.parametrize(
    "dense, sparse",
    [
        ({"a": 3.1, "b": 1.3, "d": 2.2}, {"a": 10.4, "b": 9.7, "c": 6.1}),
        ({"a": 0.71, "b": 0.65, "c": 0.645}, {"a": 12.2, "c": 3.1, "e": 5.0}),
    ],
)
def test_fusion_is_pyserinis_hybrid_fusion(dense, sparse):
    from tour_pyserini._java import import_pyserini
    from tour_pyserini.search.fusion import hybrid_fusion

    DenseSearchResult = import_pyserini("pyserini.search.faiss").DenseSearchResult
    HybridSearcher = import_pyserini("pyserini.search.hybrid").HybridSearcher

    theirs = HybridSearcher._hybrid_results(
        [DenseSearchResult(d, s) for d, s in dense.items()],
        [DenseSearchResult(d, s) for d, s in sparse.items()],
        1,
        10,
        True,
    )
    ours = hybrid_fusion(dense, sparse, k=10)
    assert [(h.docid, pytest.approx(h.score)) for h in theirs] == ours


def test_scores_that_are_not_finite_numbers_and_docids_that_are_not_strings_are_refused(
    server, dense_index, mini_scifact
):
    """JSON has no NaN: a client's NaN or infinity arrives as null, refused by the tool's schema or by the server."""
    from fastmcp import Client
    from fastmcp.exceptions import ToolError

    from tour_pyserini.files import read_qrels

    qid = next(iter(read_qrels(mini_scifact["qrels"])))
    cases = [
        (
            "eval_hits",
            {"index_name": dense_index.name, "metric": "ndcg", "query_id": qid, "hits": {"a": float("nan"), "b": 1.0}},
            "argument 'hits.a': Input should be a valid number",
        ),
        (
            "eval_hits",
            {"index_name": dense_index.name, "metric": "ndcg", "query_id": qid, "hits": {"a": float("inf")}},
            "argument 'hits.a': Input should be a valid number",
        ),
        (
            "fuse_search_results",
            {"hits1": [{"docid": "a", "score": float("nan")}], "hits2": []},
            "argument 'hits1': the score of 'a' is not a finite",
        ),
        (
            "fuse_search_results",
            {"hits1": [{"docid": "a", "score": 1.0}], "hits2": [{"docid": 7, "score": 1.0}]},
            "argument 'hits2': docid '7' is not a string",
        ),
        (
            "fuse_search_results",
            {"hits1": [{"docid": "a", "score": "1.0"}], "hits2": []},
            "argument 'hits1': the score of 'a' is not a finite number",
        ),
        ("search", {"query": "\u200b\u200d\ufeff", "index": dense_index.name}, "must not be blank"),
        ("search", {"query": "a", "index": dense_index.name, "options": {"query": "b"}}, "an argument of its own"),
    ]

    async def session():
        out = []
        async with Client(f"{server.url}/mcp/") as client:
            for tool, args, _ in cases:
                with pytest.raises(ToolError) as refused:
                    await client.call_tool(tool, args)
                out.append(str(refused.value))
            two = {"hits1": [{"docid": "a", "score": 2.0}], "hits2": [{"docid": "b", "score": 1.0}]}
            fused = await client.call_tool("fuse_search_results", two)
        return out, fused.structured_content["result"]

    errors, fused = asyncio.run(session())
    for error, (_, _, message) in zip(errors, cases):
        assert message in error and "\n" not in error, error
    assert [h["docid"] for h in fused] == ["a", "b"]


@pytest.mark.parametrize(
    "pairs, message",
    [
        ([("a", float("nan"))], "argument 'hits1': the score of 'a' is not a finite number (nan)"),
        ([("a", float("-inf"))], "argument 'hits1': the score of 'a' is not a finite number (-inf)"),
        ([("a", True)], "argument 'hits1': the score of 'a' is not a finite number (True)"),
        ([(3, 1.0)], "argument 'hits1': docid '3' is not a string"),
    ],
)
def test_hits_given_to_the_tools_are_string_docids_with_finite_scores(pairs, message):
    from tour_pyserini.serve.requests import BadRequest
    from tour_pyserini.serve.service import scored

    assert scored("hits1", [("a", 1), ("b", 0.5)]) == {"a": 1.0, "b": 0.5}
    with pytest.raises(BadRequest) as refused:
        scored("hits1", pairs)
    assert str(refused.value) == message
