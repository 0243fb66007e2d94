"""Model lists: parsing, and every malformed entry stopping collection with a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_neuronsupport.bundled import bundled_dir
from pytest_neuronsupport.modellist import (
    ModelListError,
    check_unique,
    default_lists,
    parse,
    resolve_paths,
)
from pytest_neuronsupport.runners import Runners


def write(tmp_path: Path, text: str, name: str = "models.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_entries_parse_in_order_with_their_lines(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    path = write(
        tmp_path,
        """# a comment
[[model]]
id = "Qwen/Qwen3-0.6B"
selection_rank = 1

[[model]]
id = "zoo:bert-mlm"
runner = "run_encoder"

[[model]]  # local checkpoint
id = "acme/local"
path = "ckpt"
runner = "dense"
revision = "v1"
task = "text-generation"
cores = 2
""",
    )
    specs = parse(path)
    assert [s.id for s in specs] == ["Qwen/Qwen3-0.6B", "zoo:bert-mlm", "acme/local"]
    assert [s.line for s in specs] == [2, 6, 10]
    assert specs[0].selection_rank == 1 and specs[0].runner is None
    assert specs[1].runner == "encoder" and specs[1].is_zoo
    assert specs[2].path == str((tmp_path / "ckpt").resolve())
    assert (specs[2].runner, specs[2].revision, specs[2].task, specs[2].cores) == (
        "dense",
        "v1",
        "text-generation",
        2,
    )
    assert specs[2].where == f"{path}:10"


def test_the_bundled_tiny_list_parses() -> None:
    (tiny,) = default_lists()
    specs = parse(tiny)
    assert specs and all(s.is_zoo for s in specs)


def test_a_bundled_list_is_found_by_its_name_and_only_tiny_is_the_default(tmp_path: Path) -> None:
    architectures = bundled_dir() / "architectures.toml"
    assert resolve_paths(["architectures"], tmp_path) == [architectures.resolve()]
    assert resolve_paths(["architectures.toml"], tmp_path) == [architectures.resolve()]
    assert default_lists() == [bundled_dir() / "tiny.toml"]  # the README's default sweep
    (tmp_path / "architectures.toml").write_text('[[model]]\nid = "zoo:gpt2"\n')
    assert resolve_paths(["architectures.toml"], tmp_path) == [tmp_path / "architectures.toml"]
    with pytest.raises(ModelListError, match=r"no bundled list has that name.*architectures"):
        resolve_paths(["nope"], tmp_path)


def test_a_sweep_names_the_architecture_list(pytester: pytest.Pytester) -> None:
    expected = len(parse(bundled_dir() / "architectures.toml"))
    result = pytester.runpytest(
        "--neuron-sweep", "--neuron-models", "architectures", "--collect-only", "-q"
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"*{expected} tests collected*"])
    result.stdout.fnmatch_lines(["*::zoo:arch/LlamaForCausalLM"])


@pytest.mark.parametrize(
    ("model_id", "problem"),
    [
        ("zoo:arch/NopeForCausalLM", "unknown tiny architecture 'NopeForCausalLM'"),
        ("zoo:arch/DbrxForCausalLM", "'DbrxForCausalLM' cannot be built: AttributeError"),
        ("zoo:arch/", "unknown tiny architecture ''"),
    ],
)
def test_an_architecture_id_names_a_class_that_builds(
    tmp_path: Path, model_id: str, problem: str
) -> None:
    assert parse(write(tmp_path, '[[model]]\nid = "zoo:arch/LlamaForCausalLM"\n'))
    with pytest.raises(ModelListError, match=problem):
        parse(write(tmp_path, f'[[model]]\nid = "{model_id}"\n'))


def test_runner_column_uses_the_dataset_cards_spelling() -> None:
    runners = Runners.builtin()
    assert runners.get("dense").column == "run_dense"
    assert runners.get("run_encoder").column == "run_encoder"
    assert runners.get("run_encoder").name == "encoder"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[model]]\nid = "a/b"\nrunner = ', "invalid TOML"),
        ('[[model]]\ntask = "fill-mask"\n', ":1: entry 1: missing 'id'"),
        (
            '[[model]]\nid = "a/b"\n\n[[model]]\nid = 3\n',
            ":4: entry 2: 'id' must be a non-empty string",
        ),
        (
            '[[model]]\nid = "a/b"\nrunner = "vision"\n',
            ":1: entry 1 ('a/b'): unknown runner 'vision'",
        ),
        ('[[model]]\nid = "not a repo id"\n', "'not a repo id' is not a valid Hub repo id"),
        ('[[model]]\nid = "a//b"\n', "'a//b' is not a valid Hub repo id"),
        ('[[model]]\nid = "zoo:nope"\n', "unknown zoo model 'nope'"),
        (
            '[[model]]\nid = "a/b"\n\n[[model]]\nid = "a/b"\n',
            ":4: entry 2 ('a/b'): duplicate id (first at ",
        ),
        ('[[model]]\nid = "a/b"\nrevison = "main"\n', "unknown key(s) revison"),
        (
            '[[model]]\nid = "a/b"\nselection_rank = 0\n',
            "'selection_rank' must be a positive integer",
        ),
        ('[[model]]\nid = "a/b"\ncores = 3\n', "'cores' must be a power of two"),
        ('[[model]]\nid = "a/b"\npath = "missing"\n', "path 'missing' is not a directory nor"),
        ('[[model]]\nid = "a/b"\npackages = "sentencepiece"\n', "'packages' must be a list"),
        (
            '[[model]]\nid = "a/b"\npackages = ["--index-url=http://evil"]\n',
            "'packages' must be a list of package names",
        ),
        ('[[model]]\nid = "a/b"\npackages = ["x; rm -rf /"]\n', "'packages' must be a list"),
        ('[[model]]\nid = "a/b"\nexclusion = ""\n', "'exclusion' must be a non-empty string"),
        ("models = []\n", "unknown top-level key(s) models"),
        ('model = "x"\n', "'model' must be an array of tables"),
    ],
)
def test_malformed_lists_name_the_file_line_and_entry(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ModelListError) as info:
        parse(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)


def test_invalid_toml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[[model]]\nid = "a/b"\n\n[[model]]\nid = "c/d\n')
    with pytest.raises(ModelListError, match=r"models.toml:5: invalid TOML: .* \(column 10\)"):
        parse(path)


def test_a_model_in_two_lists_is_refused(tmp_path: Path) -> None:
    one = parse(write(tmp_path, '[[model]]\nid = "a/b"\n', "one.toml"))
    two = parse(write(tmp_path, '[[model]]\nid = "c/d"\n\n[[model]]\nid = "a/b"\n', "two.toml"))
    with pytest.raises(
        ModelListError, match=r"two.toml:4: 'a/b': duplicate id \(also listed at .*one.toml:1\)"
    ):
        check_unique([*one, *two])


#: A list with a problem in each entry but the third (one a test names in its issue).
BAD_LIST = """[[model]]
id = "zoo:llama"
taks = "text-generation"

[[model]]
id = "zoo:gpt2"
cores = "two"
packages = "sentencepiece"

[[model]]
id = "zoo:bert"

[[model]]
id = "zoo:bert"
"""


def bad_list_lines(path: Path) -> list[str]:
    """The lines of :data:`BAD_LIST`'s usage error, once it is at ``path``."""
    return [
        f"ERROR: neuronsupport: {path}:1: entry 1 ('zoo:llama'): unknown key(s) taks "
        "(did you mean 'task'?); allowed: cores, *",
        f"ERROR: neuronsupport: {path}:5: entry 2 ('zoo:gpt2'): 'cores' must be a positive "
        "integer, not 'two'",
        f"ERROR: neuronsupport: {path}:5: entry 2 ('zoo:gpt2'): 'packages' must be a list *",
        f"ERROR: neuronsupport: {path}:13: entry 4 ('zoo:bert'): duplicate id (first at {path}:10)",
    ]


def test_every_problem_of_a_list_is_found_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, BAD_LIST)
    with pytest.raises(ModelListError) as info:
        parse(path)
    assert len(info.value.problems) == 4
    assert str(info.value).splitlines() == info.value.problems
    assert [p.split(": ")[1] for p in info.value.problems] == [
        "entry 1 ('zoo:llama')",
        "entry 2 ('zoo:gpt2')",
        "entry 2 ('zoo:gpt2')",
        "entry 4 ('zoo:bert')",
    ]


@pytest.mark.parametrize("xdist", [False, True], ids=["one process", "-n 2"])
def test_a_bad_list_is_a_usage_error_with_all_its_problems(
    pytester: pytest.Pytester, xdist: bool
) -> None:
    """Under ``-n 2`` the controller, which collects nothing, finds them before any worker
    starts: one error, not one per worker."""
    path = (pytester.path / "bad.toml").resolve()
    path.write_text(BAD_LIST)
    (pytester.path / "good.toml").write_text('[[model]]\nid = "zoo:llama"\n')
    args = ["--neuron-sweep", "--neuron-models", "good.toml", "bad.toml", "-p", "no:cacheprovider"]
    if xdist:
        result = pytester.runpytest_subprocess(*args, "-n", "2")
    else:
        result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.errlines if line] == [
        line for line in result.errlines if line.startswith("ERROR: neuronsupport: ")
    ]
    result.stderr.fnmatch_lines(bad_list_lines(path))
    everything = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in everything and "Traceback" not in everything
    assert not (pytester.path / "results" / "data").exists()


def test_an_unreadable_list_is_a_usage_error(pytester: pytest.Pytester) -> None:
    (pytester.path / "binary.toml").write_bytes(b"\xff\xfe")
    (pytester.path / "broken.toml").write_text('[[model]]\nid = "a/b\n')
    result = pytester.runpytest("--neuron-sweep", "--neuron-models", "binary.toml", "broken.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: neuronsupport: */binary.toml: cannot read model list: 'utf-8' codec *",
            "ERROR: neuronsupport: */broken.toml:2: invalid TOML: Illegal character * (column 10)",
        ]
    )
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_missing_list_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--neuron-sweep", "--neuron-models", "nope.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*neuronsupport: model list 'nope.toml' not found*"])


def test_a_model_in_two_lists_stops_the_sweep(pytester: pytest.Pytester) -> None:
    (pytester.path / "one.toml").write_text('[[model]]\nid = "zoo:llama"\n')
    (pytester.path / "two.toml").write_text('[[model]]\nid = "zoo:llama"\n')
    result = pytester.runpytest("--neuron-sweep", "--neuron-models", "one.toml", "two.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    twice = "'zoo:llama': duplicate id (also listed at *one.toml:1)"
    result.stderr.fnmatch_lines([f"ERROR: neuronsupport: *two.toml:1: {twice}"])


def test_packages_and_a_decided_exclusion(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[[model]]\nid = "a/b"\npackages = ["tiktoken>=0.7", "sentencepiece", "tiktoken>=0.7"]\n'
        '\n[[model]]\nid = "c/d"\nexclusion = "gated"\nnotes = "gated repository"\n',
    )
    first, second = parse(path)
    assert first.packages == ("sentencepiece", "tiktoken>=0.7") and first.exclusion is None
    assert second.exclusion == "gated" and second.notes == "gated repository"


def test_a_list_outside_the_rootdir_names_its_file_in_the_node_ids(
    pytester: pytest.Pytester,
) -> None:
    """The bundled list when pytest runs outside the clone: ids keep a file part."""
    result = pytester.runpytest("--neuron-sweep", "--neuron-models", "tiny", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    tiny = (bundled_dir() / "tiny.toml").resolve().as_posix()
    result.stdout.fnmatch_lines([f"{tiny}::zoo:llama"])
    assert not [line for line in result.outlines if line.startswith("::")]


def test_a_path_names_a_checkpoint_folder_or_a_gguf_file(tmp_path: Path) -> None:
    """A GGUF file (dequantized into the cache when planned) is a path as a folder is; any
    other file is refused, naming the entry."""
    (tmp_path / "weights.gguf").write_bytes(b"GGUF")
    (tmp_path / "weights.bin").write_bytes(b"")
    (spec,) = parse(write(tmp_path, '[[model]]\nid = "a/b"\npath = "weights.gguf"\n'))
    assert spec.path == str(tmp_path / "weights.gguf")
    with pytest.raises(ModelListError, match=r"models.toml:1: entry 1 \('a/b'\): path 'weights"):
        parse(write(tmp_path, '[[model]]\nid = "a/b"\npath = "weights.bin"\n'))
