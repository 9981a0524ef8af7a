"""The timing routing keeps by, which the cut-over waits on.

A process routing a table under rewrite (``tsmigrate.service.routing``) trusts the state it read
for a lease, acknowledges no write answered later than a bound, and holds writes while a fence
is up; ``switch``, ``revert`` and ``finish`` (``tsmigrate.rewrite.cutover``, ``late``) wait on
exactly these. A rewrite may set its own lease and bound in its row's doc (``routing_lease_s``,
``routing_ack_s``); these are the defaults.
"""

from __future__ import annotations

LEASE_S = 2.0  # how long a process trusts the state it read (a rewrite may set its own)
# A routed write answered later than this after it was sent is not acknowledged (an error says
# it may have landed): so no acknowledged write lands on a side more than LEASE_S + ACK_S after
# the fence, which is how long finish waits for late writes (a rewrite may set its own).
ACK_S = 10.0
HOLD_S = 30.0  # the longest a write waits for a fence (switch, revert) to come down
HELD_ERROR = "WritesHeld"  # the error a write held longer fails with (tsmigrate.service.WritesHeld)
POLL_S = 0.05  # how often a held write reads the state again
# The read timeout a routing process reports when its SDK client has none of its own: the SDK's
# default socket_timeout (tablestore.OTSClient.DEFAULT_SOCKET_TIMEOUT)
SDK_SOCKET_TIMEOUT_S = 50.0
