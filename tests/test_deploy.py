"""The deployment files under deploy/: a sharded sweep as the engines describe it.

Fast and offline: the files are parsed, and their commands are parsed by the real parsers (the
sweep's through pytest's, with this plugin and pytest-xdist loaded; the merge's through
``neuronsupport``'s), so an option renamed in the plugin breaks these tests, not a sweep on a
cluster.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_neuronsupport.cli import parser
from pytest_neuronsupport.modellist import parse as parse_model_list

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S_SWEEP = DEPLOY / "kubernetes" / "sweep-job.yaml"
K8S_MERGE = DEPLOY / "kubernetes" / "merge-job.yaml"
BATCH_JOB = DEPLOY / "aws-batch" / "job-definition.json"
BATCH_SUBMIT = DEPLOY / "aws-batch" / "submit-array-job.json"
BATCH_MERGE = DEPLOY / "aws-batch" / "merge-job-definition.json"
DOCKERFILE = DEPLOY / "Dockerfile"

NEURONCORE = "aws.amazon.com/neuroncore"
RESULTS = "s3://<bucket>/<prefix>"


def yaml_objects(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def json_object(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def the(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"one {kind} {name!r} expected, found {len(found)}"
    return found[0]


def sweep_job() -> dict[str, Any]:
    return the(yaml_objects(K8S_SWEEP), "Job", "neuronsupport-sweep")


def only_container(job: dict[str, Any]) -> dict[str, Any]:
    containers = job["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def exec_form(container: dict[str, Any]) -> list[str]:
    """The container's command and args: lists of strings (no shell, no numbers)."""
    command, args = container["command"], container.get("args", [])
    assert isinstance(command, list) and isinstance(args, list)
    words = [*command, *args]
    assert all(isinstance(w, str) for w in words), f"every word a string: {words}"
    return words


def after(program: str, words: list[str]) -> list[str]:
    """The arguments after ``program``, which must be the command itself (no wrapper)."""
    assert words[0] == program, f"the command runs {program} directly: {words}"
    return words[1:]


def sweep_config(pytester: pytest.Pytester, args: list[str]) -> pytest.Config:
    """The sweep's arguments parsed by pytest with the plugin and xdist: a UsageError (an
    unknown option, a bad value for one) fails the test. The files they name need not exist."""
    return pytester.parseconfig(*args)


def merge_args(args: list[str]) -> Any:
    try:
        return parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"`neuronsupport {shlex.join(args)}` does not parse: see stderr above")


def env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


# Kubernetes


def test_the_sweep_is_an_indexed_job_retried_per_index() -> None:
    spec = sweep_job()["spec"]
    assert spec["completionMode"] == "Indexed"
    completions = spec["completions"]
    assert isinstance(completions, int) and completions >= 2
    assert 1 <= spec["parallelism"] <= completions
    assert isinstance(spec["backoffLimitPerIndex"], int) and spec["backoffLimitPerIndex"] >= 1
    assert 0 <= spec["maxFailedIndexes"] <= completions
    assert "backoffLimit" not in spec  # per index instead
    # podFailurePolicy needs restartPolicy Never and names the container it reads
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert spec["podReplacementPolicy"] == "Failed"
    name = only_container(sweep_job())["name"]
    actions: dict[int, str] = {}
    for rule in spec["podFailurePolicy"]["rules"]:
        codes = rule.get("onExitCodes")
        if codes:
            assert codes["containerName"] == name and codes["operator"] == "In"
            actions.update(dict.fromkeys(codes["values"], rule["action"]))
    # pytest's exit codes: some model failed (1) and no model (5) are not retried; anything
    # else is, a usage error (4) included (unreadable s3:// results at the start may pass)
    assert actions == {1: "FailIndex", 5: "FailIndex"}


def test_the_sweep_pod_requests_neuroncores_through_the_device_plugin() -> None:
    resources = only_container(sweep_job())["resources"]
    cores = resources["limits"][NEURONCORE]
    assert isinstance(cores, int) and cores >= 1
    assert resources["requests"].get(NEURONCORE, cores) == cores  # extended: request = limit


def test_the_sweep_command_parses_with_the_plugin_and_its_shards_match_completions(
    pytester: pytest.Pytester,
) -> None:
    job = sweep_job()
    args = after("pytest", exec_form(only_container(job)))
    config = sweep_config(pytester, args)
    assert config.getoption("neuron_sweep") is True
    # the option has no type: the plugin reads it as a number when the sweep starts
    assert int(config.getoption("neuron_shards")) == job["spec"]["completions"]
    assert config.getoption("neuron_shard") is None  # the index comes from JOB_COMPLETION_INDEX
    assert config.getoption("neuron_results") == RESULTS
    assert config.getoption("neuron_models") == ["/models/models.toml"]
    assert config.getoption("numprocesses") >= 1


def test_the_model_list_configmap_is_mounted_where_the_command_reads_it() -> None:
    objects = yaml_objects(K8S_SWEEP)
    configmap = the(objects, "ConfigMap", "neuronsupport-models")
    pod = sweep_job()["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v.get("configMap"))
    assert volume["configMap"]["name"] == "neuronsupport-models"
    mount = next(
        m for m in only_container(sweep_job())["volumeMounts"] if m["name"] == volume["name"]
    )
    assert mount["mountPath"] == "/models"
    text = configmap["data"]["models.toml"]
    specs = parse_model_list(Path("configmap/models.toml"), text=text)
    assert len(specs) >= 2


def test_the_sweep_environment_shares_the_compile_cache_and_may_have_a_token() -> None:
    variables = env(only_container(sweep_job()))
    assert variables["NEURON_COMPILE_CACHE_URL"]["value"].startswith("s3://")
    token = variables["HF_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token["optional"] is True  # the pods start without the secret
    image = only_container(sweep_job())["image"]
    assert re.fullmatch(r"<account>\.dkr\.ecr\.<region>\.amazonaws\.com/neuronsupport:\S+", image)


def test_the_kubernetes_merge_runs_neuronsupport_merge_on_the_same_results() -> None:
    job = the(yaml_objects(K8S_MERGE), "Job", "neuronsupport-merge")
    container = only_container(job)
    args = merge_args(after("neuronsupport", exec_form(container)))
    assert args.command == "merge" and args.results == RESULTS
    assert NEURONCORE not in container.get("resources", {}).get("limits", {})
    assert container["image"] == only_container(sweep_job())["image"]


# AWS Batch


def test_the_batch_job_definition_retries_and_runs_the_sweep_without_a_shard_count(
    pytester: pytest.Pytester,
) -> None:
    definition = json_object(BATCH_JOB)
    assert definition["type"] == "container"
    retry = definition["retryStrategy"]
    assert retry["attempts"] >= 2
    rules = retry["evaluateOnExit"]
    assert len(rules) <= 5  # Batch takes at most 5
    exits = {r["onExitCode"] for r in rules if r["action"] == "EXIT" and "onExitCode" in r}
    assert exits == {"1", "5"}  # a failed model, or no model, is not retried; the rest is
    words = definition["containerProperties"]["command"]
    assert all(isinstance(w, str) for w in words)
    args = after("pytest", words)
    assert not any(a.startswith("--neuron-shard") for a in args)  # Batch gives index and size
    config = sweep_config(pytester, args)
    assert config.getoption("neuron_sweep") is True
    assert config.getoption("neuron_shards") is None
    assert config.getoption("neuron_results") == RESULTS


def test_the_batch_job_maps_the_neuron_devices() -> None:
    container = json_object(BATCH_JOB)["containerProperties"]
    devices = container["linuxParameters"]["devices"]
    assert [d["hostPath"] for d in devices] == [f"/dev/neuron{i}" for i in range(len(devices))]
    assert all(d["containerPath"] == d["hostPath"] for d in devices)
    assert all(set(d["permissions"]) == {"READ", "WRITE"} for d in devices)
    variables = {e["name"]: e["value"] for e in container["environment"]}
    assert variables["NEURON_COMPILE_CACHE_URL"].startswith("s3://")


def test_the_batch_submission_is_an_array_of_the_definition() -> None:
    submit = json_object(BATCH_SUBMIT)
    assert submit["arrayProperties"]["size"] >= 2
    assert submit["jobDefinition"] == json_object(BATCH_JOB)["jobDefinitionName"]


def test_the_batch_merge_runs_neuronsupport_merge_on_the_same_results() -> None:
    definition = json_object(BATCH_MERGE)
    container = definition["containerProperties"]
    args = merge_args(after("neuronsupport", container["command"]))
    assert args.command == "merge" and args.results == RESULTS
    assert "linuxParameters" not in container  # no Neuron device
    assert container["image"] == json_object(BATCH_JOB)["containerProperties"]["image"]


@pytest.mark.parametrize(
    ("path", "operation"),
    [
        (BATCH_JOB, "RegisterJobDefinition"),
        (BATCH_MERGE, "RegisterJobDefinition"),
        (BATCH_SUBMIT, "SubmitJob"),
    ],
    ids=["job-definition", "merge-job-definition", "submit-array-job"],
)
def test_the_batch_files_are_valid_requests_of_the_batch_api(path: Path, operation: str) -> None:
    """Checked against the Batch API's own request shapes, as botocore ships them (offline):
    unknown keys, missing required ones and wrong types are errors."""
    session = pytest.importorskip("botocore.session")
    validate = pytest.importorskip("botocore.validate")
    shape = session.get_session().get_service_model("batch").operation_model(operation)
    report = validate.ParamValidator().validate(json_object(path), shape.input_shape)
    assert not report.has_errors(), report.generate_report()


# The image


def test_the_dockerfile_copies_files_that_exist_and_installs_the_extras_it_needs() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    arguments = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.MULTILINE))
    for line in re.findall(r"^COPY (.+)$", text, flags=re.MULTILINE):
        *sources, _target = line.split()
        for source in sources:
            source = re.sub(r"\$\{(\w+)\}", lambda m: arguments[m.group(1)], source)
            assert (ROOT / source).exists(), f"COPY {source}: not in the checkout"
    installed = re.search(r"pytest-neuronsupport\[([\w,]+)\]", text)
    assert installed, "the Dockerfile installs the package with its extras"
    extras = installed.group(1).split(",")
    assert {"neuron", "s3"} <= set(extras)  # TorchNeuron; boto3 for s3:// results and merge
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert set(extras) <= set(declared["project"]["optional-dependencies"])
