"""The conductor-lite: registers agents and presents their hardware.

``service`` runs it, ``api`` is its REST API, ``registry`` tells UP from
DOWN and raises the alarm, ``hardware`` gathers the agents' hardware
with Placement usage, ``db`` keeps the state in SQL.
"""
