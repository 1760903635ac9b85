"""Workspace doc reflection: AIOSON's in-harness "Living Memory" reflect flow.

``engine`` is pure (no git, no disk, no database); ``git`` runs git; ``repository`` checks where a
workspace's work tree may live; ``docs`` is prepare/commit against a repository; ``gate`` holds the
human approval of doc rewrites. Facts: ``docs/compat/aioson.md``.
"""
