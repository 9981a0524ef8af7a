"""Talking to an instance: everything that reads or changes one.

- ``target``: which instance (the embedded local one by default), connected with ``pacing`` of
  table-level calls and ``retry``, the one retry policy of every call;
- ``adapter``: the only door to the SDK (IR to SDK objects and back, inspection, executing a
  step); ``rawclient``: signed calls for the APIs the SDK lacks;
- ``state``: tsmigrate's own table in the instance (lock, history rows, the catalog last
  applied); ``history`` and ``records`` read and write that history;
- ``apply``: running a plan (lock, destructive flag, history, settle, resume), which drives the
  rewrite and reindex engines for their steps; ``status``: where the instance stands;
- ``archive``: a retired month table's rows, written to and read from an archive file;
- ``pipeprogress``: progress of long calls as plain lines when output is a pipe;
- ``protowire``: protobuf's wire format by hand, for the messages sent per row.
"""
