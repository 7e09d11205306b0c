"""Serving: Pyserini 2.x's REST routes and MCP tools over this package's searchers, with query rewriters,
batching across clients, online TTT-Embed learning, and the explorer page (``tour-pyserini serve``).

Above ``search/``, ``rewriters/``, ``teachers/`` and ``ttt/``, beside ``commands/``: ``requests`` checks a
request into a plan, ``engine`` opens the indexes and runs batches of plans, ``batching`` feeds it from a
bounded queue, ``learning`` and ``allocation`` are online TTT-Embed, ``explain`` is the explorer's view of
TOUR, ``service`` shapes the answers, ``app`` and ``mcp_tools`` are the HTTP routes and the MCP tools.
"""
