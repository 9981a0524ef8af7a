"""What every command shares: printing typed errors without a traceback, the common options,
loading the project's models and inspecting the target."""

from __future__ import annotations

import functools
import gc
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from tsmigrate.errors import SchemaError, TsmigrateError

F = TypeVar("F", bound=Callable[..., Any])

# Exit codes beyond 0 (success) and 1 (error): plan --detailed-exitcode's "changes present", and
# "lint found an error" (plan printed it; apply refused to run).
EXIT_CHANGES = 2
EXIT_LINT_ERROR = 3
# stdout closed by its reader (`plan | head -1`): what a shell reports for a tool that SIGPIPE
# ended (128 + 13), as `cat` or `yes` end there. Not 0: the output asked for was not all
# delivered, and 0 or 2 would be a false answer to `plan --detailed-exitcode`; not 1 either:
# nothing went wrong with the target, and no error is printed.
EXIT_BROKEN_PIPE = 141
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


@contextmanager
def imports_uncollected() -> Iterator[None]:
    """Imports without the cyclic garbage collector: importing a command's modules (the SDK's
    above all) makes objects by the hundred thousand and frees few, so the collections they
    trigger walk ever more objects for nothing (apply's imports: 0.8 s of CPU without, 1.0 s
    with them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def reports_errors(command: F) -> F:
    """Print tsmigrate's typed errors plainly (no traceback) and exit with their code."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except SchemaError as exc:
            err_console.print(f"[bold red]error:[/] {len(exc.problems)} schema problem(s)")
            for problem in exc.problems:
                # Messages quote user input and config keys ("[tool.tsmigrate]"): not markup.
                err_console.print(f"  [red]✗[/] {escape(problem.where())}: {escape(problem.message)} "
                                  f"[dim]\\[{escape(problem.rule)}][/]", markup=True)
                if problem.fix:
                    err_console.print(f"      [dim]fix:[/] {escape(problem.fix)}")
            sys.exit(exc.exit_code)
        except TsmigrateError as exc:
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True)
            sys.exit(exc.exit_code)
        except BrokenPipeError:
            _discard_stdout()
            sys.exit(EXIT_BROKEN_PIPE)
        except SystemExit as exc:
            # A rich Console that met a closed stdout has already pointed it at /dev/null and
            # exits 1 from inside its ``except BrokenPipeError``: the same quiet end as above.
            if exc.code == 1 and isinstance(exc.__context__, BrokenPipeError):
                sys.exit(EXIT_BROKEN_PIPE)
            raise

    return wrapper  # type: ignore[return-value]


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered
    does not fail again at exit ("Exception ignored ... BrokenPipeError", status 120)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's captured output)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


models_option = click.option(
    "--models",
    "models",
    multiple=True,
    metavar="MODULE",
    help="Module (or package) defining the models; repeatable. "
    "Default: [tool.tsmigrate] models in pyproject.toml.",
)
project_option = click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Project directory (default: the one holding the nearest pyproject.toml).",
)


target_options = [
    click.option("--target", "target_name", metavar="NAME",
                 help="A target from [tool.tsmigrate.targets] in pyproject.toml."),
    click.option("--endpoint", metavar="URL", help="Instance endpoint (with --instance)."),
    click.option("--instance", metavar="NAME", help="Instance name (with --endpoint)."),
]


def with_target(command: F) -> F:
    """--target, --endpoint and --instance, handed to the command as one ``choice``
    (``tsmigrate.instance.target.TargetChoice``)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from tsmigrate.instance.target import TargetChoice

        kwargs["choice"] = TargetChoice(kwargs.pop("target_name"), kwargs.pop("endpoint"),
                                        kwargs.pop("instance"))
        return command(*args, **kwargs)

    for option in reversed(target_options):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]


@contextmanager
def connected(project_dir: Path | None, choice: Any) -> Iterator[tuple[Any, Any]]:
    """(client, target) for a command's target (a ``TargetChoice``), the SDK's errors turned
    into TargetError."""
    from tsmigrate.instance import adapter
    from tsmigrate.instance.target import connect
    from tsmigrate.schema.config import load_project

    project = load_project(project_dir)
    target = choice.resolve(project)
    with adapter.service_errors(target.describe()), connect(project, target) as client:
        yield client, target


def load_catalog(project_dir: Path | None, models: tuple[str, ...],
                 tolerate: frozenset[str] = frozenset()):
    """The project and the catalog its models compile to."""
    from tsmigrate.schema.config import load_project
    from tsmigrate.schema.discover import import_models
    from tsmigrate.schema.model import compile_models

    project = load_project(project_dir, models)
    return project, compile_models(import_models(project.models, project.root), tolerate=tolerate)


def script_directory(project_dir: Path | None, models: tuple[str, ...] = ()):
    """The project and its migration scripts (``migrations`` of the configuration)."""
    from tsmigrate.schema.config import load_project
    from tsmigrate.versions.scripts import ScriptDirectory

    project = load_project(project_dir, models)
    return project, ScriptDirectory.from_project(project)


def inspect_target(project, choice):
    """The target and its live catalog (read calls only)."""
    from tsmigrate.instance import adapter
    from tsmigrate.instance.apply import live_catalog
    from tsmigrate.instance.target import connect

    target = choice.resolve(project)
    with adapter.service_errors(target.describe()), connect(project, target) as client:
        return target, live_catalog(client)


def plan_inputs(project, choice):
    """The target, its live catalog and the replaced tables whose rewrite has finished (which
    ``--prune`` may drop): what ``make_plan`` needs (read calls only)."""
    from tsmigrate.instance import adapter
    from tsmigrate.instance.apply import finished_rewrites, live_catalog
    from tsmigrate.instance.target import connect

    target = choice.resolve(project)
    with adapter.service_errors(target.describe()), connect(project, target) as client:
        return target, live_catalog(client), finished_rewrites(client)


def lint_config(project):
    """``[tool.tsmigrate.lint]`` of the project (already validated when it was loaded)."""
    from tsmigrate.lint import LintConfig

    return LintConfig.from_settings(project.settings.get("lint", {}))
