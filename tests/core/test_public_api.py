"""The public API (README "Public API"): the six public modules and their names, exactly; and
every module path that existed at a832d9a and moved since, importable under its old name with a
DeprecationWarning naming the new one. Removing, moving or adding a public name, or an alias,
is a change to this file."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
import warnings

import pytest

import tsmigrate
import tsmigrate.service

PUBLIC = {
    "tsmigrate": [
        "AccessPattern", "Column", "GlobalIndex", "LocalIndex", "Model", "Monthly", "PrimaryKey",
        "SearchField", "SearchIndex", "__version__",
    ],
    "tsmigrate.keys": [
        "Concat", "Derivation", "Descending", "HashPrefix", "KeyDerivationError", "TimeBucket",
        "derivation_from_dict",
    ],
    "tsmigrate.service": [
        "AlreadyExists", "AsyncRows", "Attr", "BatchError", "BatchGetResult", "BatchResult",
        "ConditionFailed", "Exists", "Failure", "Match", "Prefix", "QueryError", "Range",
        "RoutingError", "RoutingUnavailable", "RowError", "RowValueError", "Rows", "Update",
        "UpdateNotAllowed", "VersionConflict", "WriteUnconfirmed", "WritesHeld", "between",
        "create_tables",
    ],
    "tsmigrate.schema": [
        "ANALYZERS", "ANALYZER_DEFAULTS", "ASC", "AccessPattern", "AttributeColumn", "BINARY",
        "BOOLEAN", "Catalog", "DEFINED_COLUMN_TYPES", "DESC", "DOUBLE", "DefinedColumn",
        "FORMAT_VERSION", "GLOBAL", "INDEX_TYPES", "INTEGER", "IndexSorter", "LOCAL", "NO_TTL",
        "PRIMARY_KEY_TYPES", "PrimaryKeyColumn", "ReservedThroughput", "SEARCH_FIELD_TYPES",
        "STRING", "SearchField", "SearchIndex", "SecondaryIndex", "StreamSpec", "Table",
        "TableOptions", "catalog_from_dict", "catalog_to_dict", "fingerprint", "physical",
        "physical_table", "search_index_from_dict", "search_index_to_dict", "table_from_dict",
        "table_to_dict",
    ],
    "tsmigrate.local.testing": ["HeldRequest", "LocalTablestore", "local_tablestore"],
    "tsmigrate.local.faults": ["FaultPlan", "KINDS", "Rule"],
}

# Old path -> the module(s) it became (b856fd5 split service/family.py; 969969e moved the rest).
MOVED = {
    "tsmigrate.adapter": ("tsmigrate.instance.adapter",),
    "tsmigrate.adopt": ("tsmigrate.schema.adopt",),
    "tsmigrate.apply": ("tsmigrate.instance.apply",),
    "tsmigrate.config": ("tsmigrate.schema.config",),
    "tsmigrate.discover": ("tsmigrate.schema.discover",),
    "tsmigrate.drift": ("tsmigrate.planning.drift",),
    "tsmigrate.families": ("tsmigrate.schema.families",),
    "tsmigrate.familyplan": ("tsmigrate.planning.familyplan",),
    "tsmigrate.history": ("tsmigrate.instance.history",),
    "tsmigrate.model": ("tsmigrate.schema.model",),
    "tsmigrate.ops": ("tsmigrate.planning.ops",),
    "tsmigrate.pacing": ("tsmigrate.instance.pacing",),
    "tsmigrate.pipeprogress": ("tsmigrate.instance.pipeprogress",),
    "tsmigrate.plan": ("tsmigrate.planning.plan",),
    "tsmigrate.planfile": ("tsmigrate.planning.planfile",),
    "tsmigrate.planrender": ("tsmigrate.planning.planrender",),
    "tsmigrate.rawclient": ("tsmigrate.instance.rawclient",),
    "tsmigrate.records": ("tsmigrate.instance.records",),
    "tsmigrate.render": ("tsmigrate.schema.render",),
    "tsmigrate.retry": ("tsmigrate.instance.retry",),
    "tsmigrate.scaffold": ("tsmigrate.commands.scaffold",),
    "tsmigrate.state": ("tsmigrate.instance.state",),
    "tsmigrate.status": ("tsmigrate.instance.status",),
    "tsmigrate.target": ("tsmigrate.instance.target",),
    "tsmigrate.validate": ("tsmigrate.schema.validate",),
    "tsmigrate.service.family": ("tsmigrate.instance.archive", "tsmigrate.service.restore"),
    # The wire protocol's own layer (#40)
    "tsmigrate.local.plainbuffer": ("tsmigrate.wire.plainbuffer",),
    "tsmigrate.local.protoext": ("tsmigrate.wire.protoext",),
    "tsmigrate.local.search_protocol": ("tsmigrate.wire.search_protocol",),
    "tsmigrate.local.table_protocol": ("tsmigrate.wire.table_protocol",),
    "tsmigrate.instance.protowire": ("tsmigrate.wire.protowire",),
    "tsmigrate.service.wire": ("tsmigrate.wire.rows",),
    # The rewrite's contract, out of the engine (#40)
    "tsmigrate.rewrite.functions": ("tsmigrate.contract.functions",),
    "tsmigrate.rewrite.rekey": ("tsmigrate.contract.rekey",),
    "tsmigrate.rewrite.rowbytes": ("tsmigrate.contract.rowbytes",),
    "tsmigrate.rewrite.shapes": ("tsmigrate.contract.shapes",),
    "tsmigrate.rewrite.transform": ("tsmigrate.contract.transform",),
}

# What the old modules the README and services named defined at a832d9a.
OLD_NAMES = {
    "tsmigrate.families": [
        "EPOCH", "FamilyValueError", "MILLISECOND", "Month", "Monthly", "add_months",
        "archive_problem", "epoch_ms", "month_of_ms", "sorts_by_date",
    ],
    "tsmigrate.retry": [
        "AMBIGUOUS_CODES", "AMBIGUOUS_STATUSES", "FIRST_CONTACT_RETRIES", "IDEMPOTENT_APIS",
        "IDEMPOTENT_WRITE_APIS", "NETWORK_ERRORS", "READ_APIS", "REJECTED_CODES", "RETRY_POLICY",
        "RetryingConnection", "SINGLE_ATTEMPT", "T", "THROTTLING_CODES", "TOO_FREQUENT",
        "TsmigrateRetryPolicy", "ambiguous", "install", "policy_of", "rejected", "retryable",
        "retrying", "unreachable",
    ],
    "tsmigrate.model": [
        "AUTO_INCREMENT", "AccessPattern", "CONVERTED_TYPES", "Column", "DEFAULT_REQUEST_ID_COLUMN",
        "DERIVATIONS", "FOREVER", "GlobalIndex", "LocalIndex", "Model", "PYTHON_TYPES",
        "PrimaryKey", "RESERVED_NAMES", "SearchField", "SearchIndex", "WRITE_STYLES",
        "column_type", "compile_models", "forget_models", "parse_duration", "python_value",
        "registered_models", "stored_value",
    ],
    "tsmigrate.service.family": [
        "ARCHIVE_FORMAT", "ArchiveError", "Progress", "RestoreResult", "archive_location",
        "archive_table", "archived_table", "open_archive", "read_archive", "restore_archive",
        "verify_archive",
    ],
}


@pytest.mark.parametrize("path", PUBLIC)
def test_a_public_module_exports_exactly_its_listed_names(path):
    module = importlib.import_module(path)
    assert sorted(module.__all__) == sorted(PUBLIC[path])
    assert len(set(module.__all__)) == len(module.__all__)
    for name in PUBLIC[path]:
        assert getattr(module, name) is not None, name
    namespace: dict[str, object] = {}
    exec(f"from {path} import *", namespace)
    assert set(PUBLIC[path]) <= set(namespace)


def test_the_declarations_give_monthly():
    from tsmigrate.schema.families import Monthly

    assert tsmigrate.Monthly is Monthly


def _exceptions(package):
    for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException)
                    and value.__module__ == module.__name__):
                yield name, value


def test_every_error_the_service_modules_define_is_exported_by_the_service_package():
    defined = dict(_exceptions(tsmigrate.service))
    assert {"RoutingUnavailable", "WritesHeld", "WriteUnconfirmed", "BatchError"} <= set(defined)
    assert set(defined) <= set(tsmigrate.service.__all__)
    for name, error in defined.items():
        assert getattr(tsmigrate.service, name) is error


def test_the_public_modules_and_their_names_import_without_a_deprecation_warning():
    """A fresh interpreter, so nothing was imported before: the public paths warn of nothing."""
    code = (
        "import tsmigrate, tsmigrate.service, tsmigrate.keys, tsmigrate.schema, "
        "tsmigrate.local.testing, tsmigrate.local.faults\n"
        "for module in (tsmigrate, tsmigrate.service, tsmigrate.keys, tsmigrate.schema, "
        "tsmigrate.local.testing, tsmigrate.local.faults):\n"
        "    [getattr(module, name) for name in module.__all__]\n"
    )
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_aliases_are_the_ones_listed_here():
    assert tsmigrate._MOVED == MOVED


@pytest.mark.parametrize("old", MOVED)
def test_a_moved_path_imports_with_one_deprecation_warning_naming_its_new_path(old, monkeypatch):
    homes = [importlib.import_module(home) for home in MOVED[old]]  # their own warnings first
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported fresh, as by a service
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        __import__(old)
    alias = sys.modules[old]
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert [str(w.message) for w in deprecations] == [
        f"{old} moved to {' and '.join(MOVED[old])}; import it from there (this alias goes in a "
        "later release)"
    ]
    assert deprecations[0].filename == __file__  # the importing line, not tsmigrate's
    if len(homes) == 1:
        assert alias is homes[0]
    names = OLD_NAMES.get(old, [n for home in homes for n in vars(home) if not n.startswith("_")])
    for name in names:
        home = next(home for home in homes if hasattr(home, name))
        assert getattr(alias, name) is getattr(home, name), name


def test_the_names_services_imported_from_the_old_paths_work():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from tsmigrate.families import Monthly
        from tsmigrate.retry import RETRY_POLICY, install, retrying
        from tsmigrate.service.family import restore_archive

    from tsmigrate.instance import retry
    from tsmigrate.service.restore import restore_archive as restore

    assert Monthly is tsmigrate.Monthly
    assert (RETRY_POLICY, install, retrying) == (retry.RETRY_POLICY, retry.install, retry.retrying)
    assert restore_archive is restore


def test_a_path_that_never_existed_is_still_not_found():
    with pytest.raises(ModuleNotFoundError):
        __import__("tsmigrate.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        __import__("tsmigrate.service.no_such_module")
