"""The rewrite's contract: what services, planning and the rewrite engine agree on about a rewrite.

- ``phases``: the phases of a rewrite and which table takes the writes of services in each
  (``side``);
- ``staterow``: the rewrite's row in ``tsmigrate_state`` as both sides read it (its format,
  ``row_problems``, and the job it holds, ``RewriteJob``) and the kinds of the rows around it;
- ``routes``: the timing routing keeps by (leases, acknowledgement bound, fence waits), which
  the cut-over waits on;
- ``transform`` (with ``rekey``, ``rowbytes`` and ``functions``): a row of one table as the
  other stores it, the key transform and its inverse;
- ``shapes``: which pairs of tables a rewrite can move rows between (planning asks it).

It imports only ``tsmigrate.errors``, ``tsmigrate.keys``, ``tsmigrate.wire`` and
``tsmigrate.schema`` (one exception: ``functions`` loads a revision script's function through
``tsmigrate.versions.scripts``, when a custom key transform names one): a service routing a
table under rewrite loads no module of the engine (``tsmigrate.rewrite``).
"""
