"""Tempest tests of cyborg-nova: accelerators through Nova and Placement.

Installed with cyborg-nova and registered with Tempest through the
``tempest.test_plugins`` entry point (:mod:`.plugin`). Nothing here is
imported by cyborg-nova itself, and nothing here imports cyborg-nova:
the tests talk to a cloud through its APIs only, so they run from any
Tempest node.
"""
