"""Running the ``threadstore`` command in-process, as the CLI tests do."""

from __future__ import annotations

from typer.testing import CliRunner

from threadstore.cli import app

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    """Run the CLI in-process; return (exit code, stdout + stderr).

    Wide columns (tables are not wrapped) and no ``THREADSTORE_DB`` from the
    environment: every test names its database.
    """
    result = runner.invoke(app, list(args), env={"COLUMNS": "200", "THREADSTORE_DB": ""})
    return result.exit_code, result.output
