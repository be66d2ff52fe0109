"""What the CLI says: `db upgrade` what it did (created the schema, upgraded it from one
revision to another, or found it already at the latest); `--model` what it accepts."""

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from click.testing import CliRunner

from dinfer_batch.cli import main
from dinfer_batch.storage import db
from dinfer_engine.choices import FAMILIES


def test_db_upgrade_says_what_it_did(tmp_path):
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    scripts = ScriptDirectory.from_config(db.alembic_config())
    head = scripts.get_current_head()
    previous = scripts.get_revision(head).down_revision

    def upgrade() -> str:
        result = CliRunner().invoke(main, ["db", "upgrade"],
                                    env={"DINFER_BATCH_DATABASE_URL": url})
        assert result.exit_code == 0, result.output
        return result.output.strip()

    assert upgrade() == f"{url}: created the schema at revision {head}"
    assert upgrade() == f"{url}: already at revision {head}, the latest"
    config = db.alembic_config()
    with db.db_engine(url).begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, previous)
    assert upgrade() == f"{url}: upgraded from revision {previous} to {head}"


@pytest.mark.parametrize("command", [["run"], ["submit"], ["schedule", "add"], ["worker"]])
def test_every_model_option_says_it_takes_a_directory_or_a_name(command):
    result = CliRunner().invoke(main, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0
    help_text = " ".join(result.output.split())
    assert "--model TEXT" in help_text
    assert "A checkpoint directory" in help_text
    assert "a model name under DINFER_BATCH_MODEL_DIR" in help_text
    for family in FAMILIES.values():  # every family the engine builds, DiffusionGemma too
        assert family.name in help_text


def test_the_commands_help_names_every_family():
    help_text = " ".join(CliRunner().invoke(main, ["--help"], terminal_width=200).output.split())
    assert all(family.name in help_text for family in FAMILIES.values())
