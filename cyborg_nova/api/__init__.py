"""A small JSON REST framework shared by the agent and the conductor-lite.

Routes are declared with their request and response schemas and their
policy rule; the same declarations validate requests and produce the
OpenAPI document, so the document cannot drift from what is enforced.
"""
