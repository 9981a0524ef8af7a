"""Human-readable rendering of IR values (the plan renderers will join them here)."""

from __future__ import annotations

from tsmigrate.schema import NO_TTL, AccessPattern, Catalog, SearchField, Table


def duration(seconds: int) -> str:
    if seconds == NO_TTL:
        return "forever"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _field(field: SearchField) -> str:
    flags = [f.replace("_", "-") for f in ("sort_and_agg", "store", "is_array") if getattr(field, f)]
    if not field.index:
        flags.append("not-indexed")
    if field.analyzer:
        flags.append(f"analyzer={field.analyzer}")
    text = f"{field.name}:{field.type.lower()}" + (f"[{','.join(flags)}]" if flags else "")
    if field.sub_fields:
        text += "{" + ", ".join(_field(s) for s in field.sub_fields) + "}"
    return text


def pattern_text(pattern: AccessPattern) -> str:
    """``user = ? and day in [a, b) order by -ts``."""
    parts = [f"{c} = ?" for c in pattern.eq]
    if pattern.range:
        parts.append(f"{pattern.range} in [a, b)")
    order = f" order by {pattern.order_by}" if pattern.order_by else ""
    return f"{' and '.join(parts) or 'all rows'}{order}"


def table_text(table: Table) -> list[str]:
    o = table.options
    lines = [f"table {table.name}" + (f"  (from {table.source})" if table.source else "")]
    if table.replaces:
        lines.append(f"  replaces      {table.replaces}")
    keys = []
    for c in table.primary_key:
        text = f"{c.name} {c.type}"
        if c.auto_increment:
            text += " auto-increment"
        if c.derivation is not None:
            args = {k: v for k, v in c.derivation.to_dict().items() if k != "kind"}
            text += f" = {type(c.derivation).__name__}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
        keys.append(text)
    lines.append("  primary key   " + (" | ".join(keys) or "(none)"))
    if table.defined_columns:
        lines.append(
            "  defined       " + ", ".join(f"{c.name} {c.type}" for c in table.defined_columns)
        )
    if table.attributes:
        lines.append("  attributes    " + ", ".join(f"{c.name} {c.type}" for c in table.attributes))
    lines.append(
        f"  options       ttl={duration(o.time_to_live)} max_versions={o.max_versions} "
        f"max_time_deviation={duration(o.max_time_deviation)} allow_update={o.allow_update}"
    )
    t = table.throughput
    if t.read or t.write:
        lines.append(f"  reserved CU   read={t.read} write={t.write}")
    if table.stream.enabled:
        lines.append(f"  stream        on, records kept {table.stream.expiration_hours}h")
    for index in table.secondary_indexes:
        include = f" include ({', '.join(index.include)})" if index.include else ""
        lines.append(
            f"  {index.type.lower()} index  {index.name} on ({', '.join(index.keys)}){include}"
        )
    for search in table.search_indexes:
        extra = []
        if search.routing_fields:
            extra.append(f"routing ({', '.join(search.routing_fields)})")
        if search.index_sort:
            extra.append(
                "presort "
                + ", ".join(f"{s.field or 'pk'} {s.order.lower()}" for s in search.index_sort)
            )
        extra.append(f"ttl={duration(search.time_to_live)}")
        lines.append(
            f"  search index  {search.name}: "
            + ", ".join(_field(f) for f in search.fields)
            + f" ({'; '.join(extra)})"
        )
    for pattern in table.access_patterns:
        lines.append(f"  query         {pattern.name}: {pattern_text(pattern)}")
    return lines


def catalog_text(catalog: Catalog) -> str:
    blocks = ["\n".join(table_text(t)) for t in catalog.tables]
    blocks.append(f"fingerprint {catalog.fingerprint()}")
    return "\n\n".join(blocks) + "\n"
