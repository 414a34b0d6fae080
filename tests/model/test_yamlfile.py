"""One reader for every YAML configuration file: the same three errors, naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fusesched.cli.main import app
from fusesched.yamlfile import YamlFileError, read_yaml


def test_a_mapping_and_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\nb: [x, y]\n")
    assert read_yaml(path, "thing") == {"a": 1, "b": ["x", "y"]}
    path.write_text("")
    assert read_yaml(path, "thing") is None


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(YamlFileError) as caught:
        read_yaml(tmp_path / "nope.yaml", "tenancy configuration")
    error = caught.value
    assert str(error) == (
        f"cannot read the tenancy configuration {tmp_path / 'nope.yaml'}: No such file or directory"
    )
    assert error.line is None and error.reason == "No such file or directory"


def test_a_folder_and_a_binary_file(tmp_path: Path) -> None:
    with pytest.raises(YamlFileError, match="Is a directory"):
        read_yaml(tmp_path, "scenario")
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xa5\x00\xff" * 10)
    with pytest.raises(YamlFileError, match=f"^cannot read the scenario {binary}: not UTF-8 text$"):
        read_yaml(binary, "scenario")


def test_a_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("policy: idle-timeout\nmin_warm: {gpu: [1\n")
    with pytest.raises(YamlFileError) as caught:
        read_yaml(path, "power configuration")
    error = caught.value
    assert str(error).startswith(f"{path}:3: not valid YAML: ")
    assert error.line == 3 and error.reason.startswith("not valid YAML: ")


@pytest.mark.parametrize(
    "argv",
    [
        ["controller", "--port", "0", "--tenancy", "bad.yaml"],
        ["controller", "--port", "0", "--power", "bad.yaml"],
        ["controller", "--port", "0", "--pools", "bad.yaml"],
        ["agent", "--config", "bad.yaml"],
    ],
)
def test_every_config_option_reports_the_same_error(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # short paths: messages are not wrapped inside them
    Path("bad.yaml").write_text("a: [1\n")
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "bad.yaml:2: not valid YAML: expected ',' or ']'" in " ".join(result.output.split())
    assert "Traceback" not in result.output
