"""Declarative models: Python classes that compile to IR tables and build rows for services.

    class Telemetry(Model, table="telemetry", ttl="90d", allow_update=False):
        pk = PrimaryKey(str, derive=HashPrefix("device_id", length=4, sep="|"))
        ts = PrimaryKey(int)
        device_id = Column(str, defined=True)
        by_device = GlobalIndex(keys=["device_id"])

Primary-key order is declaration order. Declaration mistakes (a float primary key, an unknown
option or keyword) do not raise at class creation: they are recorded and reported, with every other
problem of every model, when the models are compiled (``compile_models``).
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from contextlib import suppress
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, ClassVar, TypeVar, cast, get_args

import attrs

from tsmigrate import schema
from tsmigrate.errors import KeyDerivationError, ModelError, Problem, SchemaError, did_you_mean
from tsmigrate.keys import Derivation
from tsmigrate.schema.families import Monthly, epoch_ms
from tsmigrate.schema.validate import validate_catalog

DERIVATIONS = get_args(Derivation)  # the classes a PrimaryKey's derive= may be

PYTHON_TYPES: dict[Any, str] = {
    str: schema.STRING,
    int: schema.INTEGER,
    bytes: schema.BINARY,
    float: schema.DOUBLE,
    bool: schema.BOOLEAN,
    # Stored as INTEGER: a datetime as epoch milliseconds, a Decimal (money) in minor units.
    datetime: schema.INTEGER,
    Decimal: schema.INTEGER,
    date: schema.STRING,  # 'YYYY-MM-DD', which sorts by date
}
# The Python types whose stored value differs from the Python value (stored_value converts).
CONVERTED_TYPES = (datetime, Decimal, date)
_TYPE_NAMES = {"STRING", "INTEGER", "BINARY", "DOUBLE", "BOOLEAN"}


class _AutoIncrement:
    """Placeholder for a value the service generates (an auto-increment key column)."""

    def __repr__(self) -> str:
        return "AUTO_INCREMENT"


AUTO_INCREMENT = _AutoIncrement()


def column_type(declared: Any) -> str:
    """Python type or Tablestore type name -> IR type name (unknown types pass through, named,
    so that validation reports them)."""
    if declared in PYTHON_TYPES:
        return PYTHON_TYPES[declared]
    if isinstance(declared, str) and declared.upper() in _TYPE_NAMES:
        return declared.upper()
    return getattr(declared, "__name__", repr(declared))


_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
FOREVER = ("forever", "never", "none", "-1")


_UNIT_WORDS = {"sec": "s", "second": "s", "min": "m", "minute": "m", "hr": "h", "hour": "h",
               "day": "d", "week": "w"}
_WORDY_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]+?)s?\s*$", re.IGNORECASE)


def duration_fix(option: str, value: Any, unit: int = 1) -> str:
    """The fix line of a duration option that did not parse: the accepted forms, and the
    likely meaning of a spelt-out unit ('30days' -> '30d')."""
    forms = ("'1h', '24h', '7d' (whole hours), or True for 24 h" if unit == 3600 else
             "a number with a unit ('30d', '12h', '30m', '45s', '2w') or a whole number of "
             "seconds (2592000)")
    if option == "ttl":
        forms += ", or None for no expiry"
    match = _WORDY_DURATION.match(value) if isinstance(value, str) else None
    short = _UNIT_WORDS.get(match.group(2).lower()) if match else None
    guess = ""
    if match and short:
        meant = f"{match.group(1)}{short}"
        with suppress(ValueError):
            parse_duration(meant, unit)  # a guess the option would take
            guess = f"did you mean {option}={meant!r}? "
    return f"{guess}write {option}= as {forms}"


def parse_duration(value: Any, unit: int = 1) -> int:
    """'90d', '12h', 3600 or None/'forever' -> seconds (or ``unit`` seconds); -1 means forever."""
    if value is None or value == -1 or (isinstance(value, str) and value.lower() in FOREVER):
        return -1
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, int):
        return value
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a duration such as '90d', '12h', '30m' or 86400")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds % unit:
        raise ValueError(f"{value!r} is not a whole number of {unit} s units")
    return seconds // unit


# --- field declarations --------------------------------------------------------------------------

_Init = TypeVar("_Init", bound=Callable[..., None])


def _keywords_checked_later(init: _Init) -> _Init:
    """A declaration's ``__init__`` that keeps an unknown keyword (``Column(str, defind=True)``)
    with the line it was written on, for ``Model.compile`` to report with the model and field
    and the closest keyword, like every other declaration mistake, instead of a TypeError that
    stops the import at its first mistake. Type checkers see ``init``'s own signature."""
    parameters = inspect.signature(init).parameters.values()
    known = tuple(p.name for p in parameters if p.name != "self" and p.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        unknown = [key for key in kwargs if key not in known]
        if unknown:
            caller = sys._getframe(1)
            where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
            self._unknown_keywords = tuple((key, where) for key in unknown)
            kwargs = {key: value for key, value in kwargs.items() if key in known}
        init(self, *args, **kwargs)

    checked.__tsmigrate_keywords__ = known  # type: ignore[attr-defined]
    return cast(_Init, checked)


def keyword_problems(declaration: Any) -> list[tuple[str, str, str]]:
    """(rule, message, fix) for each unknown keyword a declaration was given."""
    kind = type(declaration)
    known = getattr(kind.__init__, "__tsmigrate_keywords__", ())
    return [
        ("model.keyword", f"{kind.__name__}() has no keyword {key!r} ({where})",
         f"{did_you_mean(key, known)}")
        for key, where in getattr(declaration, "_unknown_keywords", ())
    ]


class _Declaration:
    """Base of everything declared in a model's class body."""

    name: str = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        # On the class: the declaration itself. On an instance without a value: None.
        return self if obj is None else None


class PrimaryKey(_Declaration):
    @_keywords_checked_later
    def __init__(
        self,
        type: Any,
        *,
        auto_increment: bool = False,
        derive: Derivation | None = None,
        name: str | None = None,
    ):
        self.python_type = type
        self.type = column_type(type)
        self.auto_increment = auto_increment
        self.derive = derive
        self.column_name = name

    def compile(self) -> schema.PrimaryKeyColumn:
        return schema.PrimaryKeyColumn(
            name=self.column_name or self.name,
            type=self.type,
            auto_increment=self.auto_increment,
            derivation=self.derive,
        )


class Column(_Declaration):
    """An attribute column. ``defined=True`` makes it a predefined column (needed by indexes).

    ``Column(datetime)`` is stored as epoch milliseconds (INTEGER); ``Column(Decimal, scale=2)``
    is money stored as an INTEGER of minor units (cents), never as a DOUBLE.
    """

    @_keywords_checked_later
    def __init__(
        self, type: Any, *, defined: bool = False, name: str | None = None, scale: int | None = None
    ):
        self.python_type = type
        self.type = column_type(type)
        self.defined = defined
        self.column_name = name
        self.scale = scale

    @property
    def column(self) -> str:
        return self.column_name or self.name


class _SecondaryIndex(_Declaration):
    index_type: ClassVar[str]

    @_keywords_checked_later
    def __init__(
        self,
        keys: Sequence[str],
        include: Sequence[str] = (),
        *,
        name: str | None = None,
        include_base_data: bool = True,
    ):
        self.keys = tuple(keys) if not isinstance(keys, str) else (keys,)
        self.include = tuple(include) if not isinstance(include, str) else (include,)
        self.index_name = name
        self.include_base_data = include_base_data

    def compile(self) -> schema.SecondaryIndex:
        return schema.SecondaryIndex(
            name=self.index_name or self.name,
            keys=self.keys,
            include=self.include,
            type=self.index_type,
            include_base_data=self.include_base_data,
        )


class GlobalIndex(_SecondaryIndex):
    """A global secondary index: its own table, any leading column, kept asynchronously."""

    index_type = schema.GLOBAL


class LocalIndex(_SecondaryIndex):
    """A local secondary index: led by the partition key, kept synchronously."""

    index_type = schema.LOCAL


class SearchField:
    """A field of a search index: ``SearchField("battery", "long", sort=True)``."""

    @_keywords_checked_later
    def __init__(
        self,
        column: str,
        type: str,
        *,
        index: bool = True,
        sort: bool = False,
        store: bool = False,
        array: bool = False,
        analyzer: str | None = None,
        analyzer_parameters: Mapping[str, Any] | None = None,
        fields: Sequence[SearchField] = (),
        date_formats: Sequence[str] = (),
        dimension: int | None = None,
        metric: str | None = None,
    ):
        self.ir = schema.SearchField(
            name=column,
            type=str(type).upper(),
            index=index,
            sort_and_agg=sort,
            store=store,
            is_array=array,
            analyzer=analyzer,
            analyzer_parameters=analyzer_parameters or {},
            sub_fields=[f.ir for f in fields],
            date_formats=date_formats,
            vector_dimension=dimension,
            vector_metric=metric,
        )


def _sorter(spec: str) -> schema.IndexSorter:
    """'-ts' -> ts descending; 'pk' / '-pk' -> by primary key; 'tags:max' -> an array field
    sorted by its largest element (min / max / avg)."""
    descending = spec.startswith("-")
    field, _, mode = spec.lstrip("-+").partition(":")
    return schema.IndexSorter(
        field=None if field == "pk" else field,
        order=schema.DESC if descending else schema.ASC,
        mode=mode.upper() or None,
    )


class SearchIndex(_Declaration):
    @_keywords_checked_later
    def __init__(
        self,
        fields: Sequence[SearchField],
        *,
        routing: Sequence[str] = (),
        presort: Sequence[str] = (),
        ttl: Any = "table",
        name: str | None = None,
    ):
        self.fields = tuple(fields)
        self.routing = tuple(routing)
        self.presort = tuple(presort)
        self.ttl = ttl
        self.index_name = name

    def compile(
        self, table_ttl: int, problems: list[tuple[str, str, str]] | None = None
    ) -> schema.SearchIndex:
        """The IR index; declaration mistakes go to ``problems`` as (rule, message, fix)."""
        problems = [] if problems is None else problems
        # By default the index expires data with its table, the only TTL the service accepts
        # for a search index on a table with a TTL.
        try:
            ttl = table_ttl if self.ttl == "table" else parse_duration(self.ttl)
        except (ValueError, TypeError) as exc:
            problems.append(("model.ttl", str(exc), "use ttl='table' (the default), None or '30d'"))
            ttl = table_ttl
        problems.extend(keyword_problems(self))
        for field in self.fields:
            if not isinstance(field, SearchField):
                problems.append((
                    "model.search-field",
                    f"search index fields must be SearchField values, got {field!r}",
                    f"write SearchField({field!r}, 'keyword') (or the type the column needs)",
                ))
            else:
                problems.extend(keyword_problems(field))
        return schema.SearchIndex(
            name=self.index_name or self.name,
            fields=[f.ir for f in self.fields if isinstance(f, SearchField)],
            routing_fields=self.routing,
            index_sort=[_sorter(s) for s in self.presort],
            time_to_live=ttl,
        )


class AccessPattern(_Declaration):
    """A query the service relies on; lint checks the key order or an index can serve it."""

    @_keywords_checked_later
    def __init__(
        self,
        eq: Sequence[str] = (),
        range: str | None = None,
        order_by: str | None = None,
    ):
        self.eq = (eq,) if isinstance(eq, str) else tuple(eq)
        # Checked here, so that a wrong type is an import error at this line, not a crash in lint.
        for column in self.eq:
            if not isinstance(column, str):
                raise ModelError(f"AccessPattern eq must list column names (strings), got {column!r}")
        for argument, value in (("range", range), ("order_by", order_by)):
            if value is not None and not isinstance(value, str):
                raise ModelError(
                    f"AccessPattern {argument} must be one column name (a string), got {value!r}"
                )
        self.range = range
        self.order_by = order_by

    def compile(self) -> schema.AccessPattern:
        return schema.AccessPattern(
            name=self.name, eq=self.eq, range=self.range, order_by=self.order_by
        )


# --- stored values -------------------------------------------------------------------------------


def stored_value(declaration: PrimaryKey | Column, value: Any) -> Any:
    """A field's Python value as Tablestore stores it: a datetime as epoch milliseconds, a
    Decimal as an integer of minor units, a date as 'YYYY-MM-DD'; other values unchanged (None
    stays None)."""
    python_type = declaration.python_type
    if python_type is date and value is not None:
        return _stored_date(declaration, value)
    if value is None or (python_type is not datetime and python_type is not Decimal):
        return value
    if python_type is datetime:
        if not isinstance(value, datetime):
            return value  # epoch milliseconds given directly
        if value.tzinfo is None:
            raise ValueError(
                f"field {declaration.name!r}: a naive datetime has no time zone; "
                "give an aware one (tzinfo=timezone.utc)"
            )
        return epoch_ms(value)
    if isinstance(value, bool) or not isinstance(value, (Decimal, int)):
        raise ValueError(
            f"field {declaration.name!r} is money: give a Decimal (or an int of minor units), "
            f"not {type(value).__name__}"
        )
    if isinstance(value, int):
        return value
    if not value.is_finite():
        raise ValueError(f"field {declaration.name!r} = {value}: money must be a finite number")
    minor = value.scaleb(declaration.scale)
    if minor != minor.to_integral_value():
        raise ValueError(
            f"field {declaration.name!r} = {value} has more than {declaration.scale} decimal "
            "places; round it before storing"
        )
    return int(minor)


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _stored_date(declaration: PrimaryKey | Column, value: Any) -> str:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str) and _ISO_DATE.match(value):
        with suppress(ValueError):  # 'YYYY-MM-DD' given directly, if it is a real day
            return date.fromisoformat(value).isoformat()
    raise ValueError(
        f"field {declaration.name!r} is a date: give a datetime.date or 'YYYY-MM-DD', "
        f"not {type(value).__name__} {value!r}"
    )


def python_value(declaration: PrimaryKey | Column, stored: Any) -> Any:
    """The inverse of ``stored_value``."""
    python_type = declaration.python_type
    if python_type is date and isinstance(stored, str) and _ISO_DATE.match(stored):
        return date.fromisoformat(stored)
    if python_type is datetime and isinstance(stored, int):
        return datetime.fromtimestamp(stored / 1000, tz=timezone.utc)
    if python_type is Decimal and isinstance(stored, int):
        return Decimal(stored).scaleb(-declaration.scale)
    return stored


# --- the Model base ------------------------------------------------------------------------------

_OPTIONS = {
    "table", "ttl", "max_versions", "max_time_deviation", "allow_update", "reserved_read",
    "reserved_write", "stream", "replaces", "abstract", "writes", "lint_ignore",
    "version", "request_id_column", "family",
}
DEFAULT_REQUEST_ID_COLUMN = "_request_id"
WRITE_STYLES = ("put", "update")
_REGISTRY: list[type[Model]] = []


class Model:
    """Base of declarative table models. Class keywords set the table and its options:

    table (physical name; default: the class name in snake_case), ttl ('90d', seconds, None),
    max_versions, max_time_deviation (seconds), allow_update, reserved_read, reserved_write,
    stream (True, False or an expiration such as '24h'), replaces (the table a rewrite replaces),
    writes ('put' or 'update': how services write rows), lint_ignore ({code: reason}),
    abstract (a base class that declares shared fields but no table); for services (see
    ``tsmigrate.service``): version (an int Column field used for optimistic locking),
    request_id_column (where idempotent creates record their request id; default
    '_request_id'), family (``Monthly(...)``: one table per month).
    """

    __tsmigrate_abstract__: ClassVar[bool] = True
    __tsmigrate_options__: ClassVar[dict[str, Any]] = {}
    __tsmigrate_problems__: ClassVar[list[Problem]] = []
    __tsmigrate_table__: ClassVar[schema.Table | None] = None

    def __init_subclass__(cls, **options: Any) -> None:
        unknown = sorted(set(options) - _OPTIONS)
        for key in unknown:
            options.pop(key)
        super().__init_subclass__()
        cls.__tsmigrate_abstract__ = bool(options.pop("abstract", False))
        inherited = {
            k: v for k, v in getattr(cls, "__tsmigrate_options__", {}).items() if k != "table"
        }
        cls.__tsmigrate_options__ = {**inherited, **options}
        cls.__tsmigrate_problems__ = [
            cls._problem("model", "model.option", f"unknown model option {key!r}",
                         did_you_mean(key, sorted(_OPTIONS)))
            for key in unknown
        ]
        cls.__tsmigrate_table__ = None
        # A field named like a Model method would replace it (and compile() itself may be the
        # victim): keep such declarations aside, so compile() can report them as problems.
        shadowing = {
            attr: value
            for attr, value in vars(cls).items()
            if isinstance(value, _Declaration) and attr in RESERVED_NAMES
        }
        for attr in shadowing:
            delattr(cls, attr)
        cls.__tsmigrate_shadowed__ = shadowing
        if not cls.__tsmigrate_abstract__:
            _REGISTRY.append(cls)

    # -- compile -------------------------------------------------------------------------------

    @classmethod
    def _qualname(cls) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"

    @classmethod
    def _problem(cls, field: str, rule: str, message: str, fix: str = "") -> Problem:
        return Problem(
            table=cls.table_name(), field=field, rule=rule, message=message, fix=fix,
            model=cls._qualname(),
        )

    @classmethod
    def table_name(cls) -> str:
        name = cls.__tsmigrate_options__.get("table")
        return name or re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()

    @classmethod
    def declarations(cls) -> list[_Declaration]:
        """Every field of the model and its bases, in declaration order (bases first)."""
        seen: dict[str, _Declaration] = {}
        for klass in reversed(cls.__mro__):
            shadowed = vars(klass).get("__tsmigrate_shadowed__", {})
            for attr, value in (*vars(klass).items(), *shadowed.items()):
                if isinstance(value, _Declaration):
                    seen[attr] = value  # an override keeps the base's position
        return list(seen.values())

    @classmethod
    def _declared(cls, kind: type | tuple[type, ...]) -> list[Any]:
        return [d for d in cls.declarations() if isinstance(d, kind)]

    @classmethod
    def compile(cls) -> tuple[schema.Table, list[Problem]]:
        """The IR table of this model and the declaration problems found on the way."""
        problems = list(cls.__tsmigrate_problems__)
        opts = cls.__tsmigrate_options__

        def duration(key: str, default: Any, unit: int = 1) -> int:
            try:
                return parse_duration(opts.get(key, default), unit)
            except (ValueError, TypeError) as exc:
                problems.append(cls._problem(key, f"model.{key}", str(exc),
                                             duration_fix(key, opts.get(key), unit)))
                return -1 if default is None else parse_duration(default, unit)

        ttl = duration("ttl", None)
        deviation = duration("max_time_deviation", 86400)
        stream_opt = opts.get("stream", False)
        if stream_opt is True:
            stream = schema.StreamSpec(enabled=True)
        elif not stream_opt:
            stream = schema.StreamSpec()
        else:
            stream = schema.StreamSpec(enabled=True, expiration_hours=duration("stream", 24, 3600))
        for key in ("max_versions", "reserved_read", "reserved_write"):
            value = opts.get(key, 1 if key == "max_versions" else 0)
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(cls._problem(key, f"model.{key}", f"{key} must be an integer"))
                opts = {**opts, key: 1 if key == "max_versions" else 0}
        if not isinstance(opts.get("allow_update", True), bool):
            problems.append(cls._problem(
                "allow_update", "model.allow_update",
                f"allow_update must be True or False, got {opts['allow_update']!r}",
            ))

        for declaration in cls.declarations():
            if not isinstance(declaration, SearchIndex):  # its compile() reports its own
                problems.extend(cls._problem(declaration.name, *problem)
                                for problem in keyword_problems(declaration))
            if declaration.name in RESERVED_NAMES:
                problems.append(cls._problem(
                    declaration.name, "model.reserved-name",
                    f"field {declaration.name!r} would hide Model.{declaration.name}",
                    f"rename the attribute and keep the column name with name={declaration.name!r}",
                ))
        columns = cls._declared(Column)
        problems.extend(cls._type_problems())
        problems.extend(cls._duplicate_columns())
        problems.extend(cls._service_option_problems(opts))
        primary_key = []
        for pk in cls._declared(PrimaryKey):
            column = pk.compile()
            if column.derivation is not None and not isinstance(column.derivation, DERIVATIONS):
                problems.append(cls._problem(
                    pk.name, "model.derive",
                    f"derive= must be a key derivation, got {column.derivation!r}",
                    "use HashPrefix, Concat, TimeBucket or Descending from tsmigrate.keys",
                ))
                column = attrs.evolve(column, derivation=None)
            primary_key.append(column)
        search_indexes = []
        for index in cls._declared(SearchIndex):
            found: list[tuple[str, str, str]] = []
            search_indexes.append(index.compile(ttl, found))
            where = f"search index {index.index_name or index.name}"
            problems.extend(cls._problem(where, *problem) for problem in found)
        if not primary_key and not cls.__tsmigrate_abstract__:
            problems.append(
                cls._problem("primary_key", "primary-key.count",
                             "the model declares no PrimaryKey column",
                             "declare one to four PrimaryKey fields; their order is the key order")
            )
        table = schema.Table(
            name=cls.table_name(),
            primary_key=primary_key,
            defined_columns=[
                schema.DefinedColumn(c.column, c.type) for c in columns if c.defined
            ],
            attributes=[schema.AttributeColumn(c.column, c.type) for c in columns if not c.defined],
            options=schema.TableOptions(
                time_to_live=ttl,
                max_versions=opts.get("max_versions", 1),
                max_time_deviation=deviation,
                allow_update=bool(opts.get("allow_update", True)),
            ),
            throughput=schema.ReservedThroughput(
                read=opts.get("reserved_read", 0), write=opts.get("reserved_write", 0)
            ),
            secondary_indexes=[i.compile() for i in cls._declared(_SecondaryIndex)],
            search_indexes=search_indexes,
            stream=stream,
            access_patterns=[p.compile() for p in cls._declared(AccessPattern)],
            replaces=opts.get("replaces"),
            writes=cls._writes(opts, problems),
            lint_ignore=cls._lint_ignore(opts, problems),
            source=cls._qualname(),
        )
        return table, problems

    @classmethod
    def _duplicate_columns(cls) -> list[Problem]:
        """Two fields declaring one column, named by their fields (validate, which sees the
        table only, could name the column alone; compile_models keeps this one)."""
        fields: dict[tuple[bool, str], list[str]] = {}
        for declaration in cls._declared((PrimaryKey, Column)):
            is_key = isinstance(declaration, PrimaryKey)
            column = declaration.column_name or declaration.name if is_key else declaration.column
            fields.setdefault((is_key, column), []).append(declaration.name)
        problems = []
        for (is_key, column), names in fields.items():
            if len(names) < 2:
                continue
            listed = ", ".join(repr(n) for n in names[:-1]) + f" and {names[-1]!r}"
            problems.append(cls._problem(
                column, "primary-key.duplicate" if is_key else "column.duplicate",
                f"{'primary-key column' if is_key else 'column'} {column!r} is declared twice: "
                f"by fields {listed}",
                "give each field its own column (name= sets a field's column name)",
            ))
        return problems

    @classmethod
    def _type_problems(cls) -> list[Problem]:
        problems = []
        for declaration in cls._declared((PrimaryKey, Column)):
            python_type = getattr(declaration, "python_type", None)
            scale = getattr(declaration, "scale", None)
            if python_type is Decimal and not (isinstance(scale, int) and 0 <= scale <= 18):
                problems.append(cls._problem(
                    declaration.name, "model.money-scale",
                    "a Decimal column is money stored in minor units and needs its scale",
                    "write Column(Decimal, scale=2) for cents",
                ))
            elif scale is not None and python_type is not Decimal:
                problems.append(cls._problem(
                    declaration.name, "model.money-scale",
                    "scale= applies to Decimal (money) columns only",
                    "drop scale=, or declare the column as Column(Decimal, scale=...)",
                ))
        return problems

    @classmethod
    def _service_option_problems(cls, opts: Mapping[str, Any]) -> list[Problem]:
        problems = []
        fields = {d.name: d for d in cls._declared((PrimaryKey, Column))}
        version = opts.get("version")
        if version is not None:
            declared = fields.get(version)
            if not isinstance(declared, Column) or declared.python_type is not int:
                problems.append(cls._problem(
                    "version", "model.version",
                    f"version={version!r} must name an int Column of the model",
                    f"declare {version} = Column(int) or name an existing int column",
                ))
        family = opts.get("family")
        if family is not None:
            if not isinstance(family, Monthly):
                problems.append(cls._problem(
                    "family", "model.family", f"family must be Monthly(...), got {family!r}",
                    "write family=Monthly('captured_at', ahead=2)",
                ))
            else:
                declared = fields.get(family.field)
                problems.extend(
                    cls._problem("family", "model.family", text, fix)
                    for text, fix in family.problems(declared.python_type if declared else None)
                )
        return problems

    @classmethod
    def version_field(cls) -> str | None:
        """The int field that holds the row's version for optimistic locking, if any."""
        return cls.__tsmigrate_options__.get("version")

    @classmethod
    def request_id_column(cls) -> str:
        return cls.__tsmigrate_options__.get("request_id_column") or DEFAULT_REQUEST_ID_COLUMN

    @classmethod
    def table_family(cls) -> Monthly | None:
        family = cls.__tsmigrate_options__.get("family")
        return family if isinstance(family, Monthly) else None

    @classmethod
    def _writes(cls, opts: Mapping[str, Any], problems: list[Problem]) -> str:
        writes = opts.get("writes", "put")
        if writes not in WRITE_STYLES:
            problems.append(cls._problem(
                "writes", "model.writes", f"writes must be 'put' or 'update', got {writes!r}",
                "say 'update' when services change rows with UpdateRow (partial writes, increments)",
            ))
            return "put"
        return writes

    @classmethod
    def _lint_ignore(cls, opts: Mapping[str, Any], problems: list[Problem]) -> dict[str, str]:
        ignore = opts.get("lint_ignore", {})
        if not isinstance(ignore, Mapping):
            problems.append(cls._problem(
                "lint_ignore", "model.lint-ignore",
                "lint_ignore must map lint codes to the reason for ignoring them",
                "write lint_ignore={'TS-CL701': 'why this is fine here'}",
            ))
            return {}
        kept = {}
        for code, reason in ignore.items():
            if not isinstance(reason, str) or not reason.strip():
                problems.append(cls._problem(
                    "lint_ignore", "model.lint-ignore",
                    f"suppressing {code} needs a reason",
                    f"write lint_ignore={{{code!r}: 'why this is fine here'}}",
                ))
                continue
            kept[str(code)] = reason.strip()
        return kept

    @classmethod
    def table(cls) -> schema.Table:
        """The validated IR table of this model; raises SchemaError listing every problem."""
        if cls.__tsmigrate_table__ is None:
            cls.__tsmigrate_table__ = compile_models([cls]).tables[0]
        return cls.__tsmigrate_table__

    # -- rows ----------------------------------------------------------------------------------

    @classmethod
    def _field_names(cls) -> frozenset[str]:
        # Cached per class (rows are built in hot loops); declarations are fixed once defined.
        names = cls.__dict__.get("__tsmigrate_fields__")
        if names is None:
            names = frozenset(
                d.name for d in cls.declarations() if isinstance(d, (PrimaryKey, Column))
            )
            cls.__tsmigrate_fields__ = names
        return names

    def __init__(self, **values: Any):
        fields = self._field_names()
        if not values.keys() <= fields:
            unknown = sorted(set(values) - fields)
            raise TypeError(
                f"{type(self).__name__} has no field {', '.join(map(repr, unknown))}; "
                f"fields: {', '.join(sorted(fields))}"
            )
        self.__dict__.update(values)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({shown})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    __hash__ = None  # type: ignore[assignment]  # rows are mutable values

    def values(self) -> dict[str, Any]:
        return {
            d.name: getattr(self, d.name)
            for d in self.declarations()
            if isinstance(d, (PrimaryKey, Column))
        }

    @classmethod
    def key(cls, **values: Any) -> list[tuple[str, Any]]:
        """The primary key for these field values, derivations applied (for reads and writes)."""
        # Derivations name their sources by column name, which name= may set apart from the
        # field name: let them read the values under both.
        declared = cls._declared((PrimaryKey, Column))
        values = {
            name: stored_value(d, values[name]) if (d := _by_name(declared, name)) else values[name]
            for name in values
        }
        by_column = dict(values)
        for declaration in declared:
            column = declaration.column_name or declaration.name
            if declaration.name in values and column not in values:
                by_column[column] = values[declaration.name]
        key = []
        for pk in cls._declared(PrimaryKey):
            column = pk.column_name or pk.name
            if pk.derive is not None:
                key.append((column, pk.derive.derive(by_column)))
            elif values.get(pk.name) is not None:
                key.append((column, values[pk.name]))
            elif pk.auto_increment:
                key.append((column, AUTO_INCREMENT))
            else:
                raise KeyDerivationError(f"{cls.__name__}: primary-key field {pk.name!r} is missing")
        return key

    def primary_key(self) -> list[tuple[str, Any]]:
        return self.key(**self.values())

    def attribute_columns(self) -> list[tuple[str, Any]]:
        """The attribute cells to write: every set Column (None means "not written")."""
        return [
            (c.column, stored_value(c, getattr(self, c.name)))
            for c in self._declared(Column)
            if getattr(self, c.name) is not None
        ]

    @classmethod
    def from_row(
        cls, primary_key: Iterable[tuple[str, Any]], attributes: Iterable[Sequence[Any]] = ()
    ) -> Model:
        """Build a model from a row as the SDK returns it (attribute tuples may carry a
        timestamp). Derived key columns are kept as read; their source fields come from the
        attributes."""
        by_column = {
            (d.column_name or d.name): d
            for d in cls.declarations()
            if isinstance(d, (PrimaryKey, Column))
        }
        values: dict[str, Any] = {}
        for column, value in primary_key:
            if column in by_column:
                values[by_column[column].name] = python_value(by_column[column], value)
        for cell in attributes:
            column, value = cell[0], cell[1]
            if column in by_column:
                values[by_column[column].name] = python_value(by_column[column], value)
        return cls(**values)


def _by_name(declared: Sequence[Any], name: str) -> Any:
    return next((d for d in declared if d.name == name), None)


# Names a field must not take: Model's methods and attributes, private helpers included.
RESERVED_NAMES = frozenset(
    name for name in vars(Model) if not (name.startswith("__") and name.endswith("__"))
)


def compile_models(
    models: Iterable[type[Model]], *, tolerate: Container[str] = ()
) -> schema.Catalog:
    """Compile models to a validated Catalog; raise one SchemaError with every problem, except
    those whose rule is in ``tolerate`` (lint reports those itself, under its own codes)."""
    tables, problems = [], []
    for model in models:
        table, found = model.compile()
        tables.append(table)
        problems.extend(found)
    catalog = schema.Catalog(tables=tables)
    # A fault a model reported (naming its fields) is not reported again by the table's rules.
    reported = {(p.table, p.field, p.rule) for p in problems}
    problems.extend(p for p in validate_catalog(catalog) if (p.table, p.field, p.rule) not in reported)
    # Tolerated problems are reported by lint itself, which it cannot once another stops it:
    # then every problem is raised (lint names as many as validate does).
    if any(p.rule not in tolerate for p in problems):
        raise SchemaError(problems)
    return catalog


def registered_models() -> list[type[Model]]:
    """Every concrete model class defined so far, in definition order."""
    return list(_REGISTRY)


def forget_models(keep: int) -> None:
    """Forget the models defined after the first ``keep`` (classes compiled only to check them,
    such as the models adoption writes)."""
    del _REGISTRY[keep:]
