"""deploy/k8s, tested without a Kubernetes cluster: render each kustomization with `kubectl kustomize`,
validate every object against the Kubernetes OpenAPI schemas offline (kubernetes-validate, strict: unknown
fields fail), and check that every container runs a `parallel-rl` command that parses.

What the manifests assume about the network, these checks alone cannot prove; tests/test_hosts.py runs the
rendered commands on separate hosts (network namespaces): the Service name `coordinator` that the coordinator
advertises and the workers' PARALLEL_RL_COORDINATOR name (resolved to the coordinator's host), each worker's
`--advertise http://$(POD_IP):9000` (its own address, reached from the coordinator's host), the roles bound to
0.0.0.0, and each readiness probe's path answering at the pod's address from another host
(`test_the_kubernetes_manifests_commands_work_across_hosts`). Not checked there: the probes' timings, the
resources, the volumes' access modes, and the Secret (the token is passed as the variable it fills)."""

import copy
import functools
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

K8S = Path(__file__).resolve().parent.parent / "deploy" / "k8s"
KUSTOMIZATIONS = ["base", "overlays/shared-volume", "overlays/s3"]
K8S_VERSION = "1.30.0"  # a version every maintained cluster is at or past


def render(directory: str) -> list:
    """The objects ``kubectl kustomize`` renders (a fresh copy each call: tests may change them)."""
    return copy.deepcopy(_render(directory))


@functools.lru_cache(maxsize=None)
def _render(directory: str) -> list:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl not found: `make test` installs Debian's kubernetes-client (make kubectl)"
    proc = subprocess.run([kubectl, "kustomize", str(K8S / directory)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@pytest.fixture(scope="module", params=KUSTOMIZATIONS)
def rendered(request):
    return request.param, render(request.param)


def by_kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def container(deployment):
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def test_every_object_is_valid_in_strict_mode(rendered):
    import kubernetes_validate

    _, objects = rendered
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_strict_validation_refuses_unknown_fields():
    """The check above can fail: a misspelt field is an error."""
    import kubernetes_validate

    deployment = by_kind(render("base"), "Deployment")["collector"]
    container(deployment)["readinesProbe"] = container(deployment).pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_roles_probes_resources_and_token(rendered):
    _, objects = rendered
    deployments = by_kind(objects, "Deployment")
    assert set(deployments) == {"coordinator", "learner", "collector"}
    assert deployments["coordinator"]["spec"]["replicas"] == 1 and deployments["learner"]["spec"]["replicas"] == 1
    assert deployments["collector"]["spec"]["replicas"] >= 1  # the scale lever: kubectl scale deploy/collector
    for name, deployment in deployments.items():
        c = container(deployment)
        port = 8000 if name == "coordinator" else 9000
        health = "/api/v1/health" if name == "coordinator" else "/slave/v1/health"
        assert c["ports"] == [{"name": "http", "containerPort": port}]
        for probe in ("readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"] == {"path": health, "port": "http"}, (name, probe)
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]), name
        env = {e["name"]: e for e in c["env"]}
        assert env["PARALLEL_RL_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "parallel-rl-token", "key": "token"}
        assert env["PARALLEL_RL_CONFIG"]["value"].startswith("/app/configs/")  # absolute: the image's configs
        if name != "coordinator":
            assert env["PARALLEL_RL_COORDINATOR"]["value"] == "http://coordinator:8000"
            assert "hostPort" not in str(c)  # replicas on one node must not collide
    (service,) = by_kind(objects, "Service").values()
    assert service["metadata"]["name"] == "coordinator"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http"}]
    labels = deployments["coordinator"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def parse(c, monkeypatch):
    """The container's command line as our CLI parses it, under the container's plain env values."""
    from parallel_rl.cli import build_parser

    for e in c["env"]:
        if "value" in e:
            monkeypatch.setenv(e["name"], e["value"])
    return build_parser().parse_args(c["args"])


def test_every_container_runs_a_parallel_rl_command_that_parses(rendered, monkeypatch):
    _, objects = rendered
    for name, deployment in by_kind(objects, "Deployment").items():
        c = container(deployment)
        assert c["command"] == ["parallel-rl"], name
        args = parse(c, monkeypatch)
        assert args.command == name and args.host == "0.0.0.0"
        assert args.port == (8000 if name == "coordinator" else 9000)
        if name == "coordinator":
            assert args.advertise == "http://coordinator:8000"
        else:
            assert args.advertise == "http://$(POD_IP):9000"  # expanded by Kubernetes from the env var
            assert args.shared_dir is None  # workers learn the store from the coordinator


def test_shared_volume_overlay_mounts_one_read_write_many_claim_everywhere(monkeypatch):
    objects = render("overlays/shared-volume")
    (claim,) = by_kind(objects, "PersistentVolumeClaim").values()
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for name, deployment in by_kind(objects, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"], name
        assert {"name": "shared", "mountPath": "/shared"} in container(deployment)["volumeMounts"], name
    coordinator = container(by_kind(objects, "Deployment")["coordinator"])
    assert parse(coordinator, monkeypatch).shared_dir == "/shared"


def test_s3_overlay_shares_no_volume(monkeypatch):
    from parallel_rl.storage import split_url

    objects = render("overlays/s3")
    assert not by_kind(objects, "PersistentVolumeClaim")
    for name, deployment in by_kind(objects, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        assert all("persistentVolumeClaim" not in v for v in pod["volumes"]), name
        assert container(deployment)["envFrom"] == [{"secretRef": {"name": "parallel-rl-s3"}}], name
    coordinator = container(by_kind(objects, "Deployment")["coordinator"])
    assert split_url(parse(coordinator, monkeypatch).shared_dir)[0] == "s3"
