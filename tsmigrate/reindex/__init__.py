"""Search-index reindex: a changed search index rebuilt beside the old one and switched in under
its name (Tablestore's dynamic schema modification). ``checkpoint`` keeps the stage in the
state table, ``flow`` runs the stages, ``parity`` compares the two indexes' answers before the
switch, ``progress`` shows it in ``tsmigrate apply``."""
