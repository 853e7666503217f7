#!/usr/bin/env python3
"""Renders deploy/helm/strata (no Helm: deploy/helm/render, Go + Debian's sprig and yaml.v3) with
the default values and with deploy/helm/examples/*.yaml, parses the output as Kubernetes YAML
and checks probes, ports, volumes, resources, LeaderWorkerSet fields, scaling, selectors and the
KV offload tiers' flags and volume.

usage: helm_chart_test.py EXPOSITION_BINARY WORKDIR
Exits 77 (skipped) when Go or the Debian Go sources are missing.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import yaml  # Debian python3-yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promlib  # noqa: E402

HELM = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helm")
CHART = os.path.join(HELM, "strata")
GOPATH = os.environ.get("STRATA_GOPATH", "/usr/share/gocode")  # Debian's Go source tree

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
    return ok


def build_renderer(workdir):
    """Builds deploy/helm/render into workdir; None when Go or Debian's Go sources are missing."""
    go = shutil.which("go")
    sprig = os.path.join(GOPATH, "src", "github.com", "Masterminds", "sprig")
    if not go or not os.path.isdir(sprig):
        return None
    workdir = os.path.abspath(workdir)
    binary = os.path.join(workdir, "strata-helm-render")
    env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH, GOFLAGS="",
               GOCACHE=os.path.join(workdir, "gocache"))
    subprocess.run([go, "build", "-o", binary, "main.go"], cwd=os.path.join(HELM, "render"),
                   env=env, check=True)
    return binary


def render(renderer, *args):
    p = subprocess.run([renderer, "--chart", CHART] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def render_docs(renderer, *args):
    rc, out, err = render(renderer, *args)
    if not check(rc == 0, "render %s failed: %s" % (args, err)):
        return {}
    docs = {}
    for doc in yaml.safe_load_all(out):
        if doc is None:
            continue
        for key in ("apiVersion", "kind", "metadata"):
            check(key in doc, "a rendered document has no %s: %s" % (key, doc))
        name = doc["metadata"].get("name", "")
        check(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63,
              "%s name %r is not a DNS label" % (doc["kind"], name))
        check(doc["kind"] not in docs, "two %s objects" % doc["kind"])
        docs[doc["kind"]] = doc
    return docs


# Fields Kubernetes knows, for the objects the chart builds (a typo would be dropped silently
# by the API server, e.g. `readinessProbes`).
KNOWN = {
    "PodSpec": {"serviceAccountName", "imagePullSecrets", "terminationGracePeriodSeconds",
                "priorityClassName", "securityContext", "containers", "volumes", "nodeSelector",
                "affinity", "tolerations"},
    "Container": {"name", "image", "imagePullPolicy", "args", "command", "ports", "env",
                  "startupProbe", "readinessProbe", "livenessProbe", "resources",
                  "securityContext", "volumeMounts"},
    "Probe": {"httpGet", "grpc", "tcpSocket", "exec", "initialDelaySeconds", "periodSeconds",
              "timeoutSeconds", "failureThreshold", "successThreshold"},
}


def check_known(kind, obj, where):
    unknown = set(obj) - KNOWN[kind]
    check(not unknown, "%s: unknown %s fields %s" % (where, kind, sorted(unknown)))


def check_pod(spec, labels, where, gpus, expect_probe_type="http"):
    check_known("PodSpec", spec, where)
    containers = spec["containers"]
    check(len(containers) == 1, "%s: one container" % where)
    c = containers[0]
    check_known("Container", c, where)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check_known("Probe", c.get(probe, {}), "%s %s" % (where, probe))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports.get("http") == 8000 and ports.get("grpc") == 50051, "%s: ports %s" % (where, ports))
    # Probes: liveness and startup on /health, readiness on /ready (or gRPC health).
    startup, ready, live = c["startupProbe"], c["readinessProbe"], c["livenessProbe"]
    check(startup["httpGet"] == {"path": "/health", "port": "http"}, "%s: startup probe" % where)
    check(startup["periodSeconds"] * startup["failureThreshold"] >= 1800,
          "%s: startup probe allows under 30 min" % where)
    check(live["httpGet"] == {"path": "/health", "port": "http"}, "%s: liveness probe" % where)
    check(live["periodSeconds"] * live["failureThreshold"] >= 60,
          "%s: liveness kills within a minute" % where)
    if expect_probe_type == "grpc":
        check(ready.get("grpc", {}).get("port") == 50051 and "httpGet" not in ready,
              "%s: readiness should be gRPC health: %s" % (where, ready))
    else:
        check(ready.get("httpGet") == {"path": "/ready", "port": "http"},
              "%s: readiness probe %s" % (where, ready))
    # Volumes: memory-backed /dev/shm and the model directory, read-only.
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    check(volumes.get("dshm", {}).get("emptyDir", {}).get("medium") == "Memory",
          "%s: /dev/shm is not a memory emptyDir" % where)
    check(mounts.get("dshm", {}).get("mountPath") == "/dev/shm", "%s: /dev/shm mount" % where)
    check("models" in volumes and mounts.get("models", {}).get("readOnly") is True,
          "%s: model volume" % where)
    model_arg = [a for a in c["args"] if a.startswith("--model=")]
    check(model_arg and model_arg[0][len("--model="):].startswith(mounts["models"]["mountPath"]),
          "%s: --model is not under the model mount: %s" % (where, model_arg))
    # Resources: GPUs as an extended resource, equal in requests and limits.
    res = c["resources"]
    if gpus:
        check(res["limits"].get("nvidia.com/gpu") == gpus and
              res["requests"].get("nvidia.com/gpu") == gpus, "%s: GPU resources %s" % (where, res))
        check(c["image"].endswith(":0.1.0"), "%s: GPU image %s" % (where, c["image"]))
    else:
        check("nvidia.com/gpu" not in str(res), "%s: a CPU pod asks for GPUs" % where)
        check(c["image"].endswith("-cpu"), "%s: CPU image %s" % (where, c["image"]))
    check("memory" in res.get("limits", {}), "%s: no memory limit" % where)
    # Non-root.
    check(spec["securityContext"].get("runAsNonRoot") is True, "%s: may run as root" % where)
    check(c["args"][0] == "serve", "%s: does not run `strata serve`" % where)
    check(labels.items() >= {"app.kubernetes.io/name": "strata"}.items(), "%s: labels" % where)
    return c


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_default(renderer):
    docs = render_docs(renderer, "--name", "prod", "--namespace", "llm")
    check(set(docs) == {"Deployment", "Service", "ServiceAccount", "PodDisruptionBudget"},
          "default kinds: %s" % sorted(docs))
    d = docs["Deployment"]
    check(d["metadata"]["name"] == "prod-strata" and d["metadata"]["namespace"] == "llm",
          "deployment name %s" % d["metadata"])
    pod = d["spec"]["template"]
    labels = pod["metadata"]["labels"]
    check(selects(d["spec"]["selector"]["matchLabels"], labels), "deployment selector")
    c = check_pod(pod["spec"], labels, "default deployment", gpus=8)
    check(not any("--rank" in a or "--coordinator" in a for a in c["args"]),
          "single-node pod has rank flags")
    check(not any(a.startswith("--kv-cache-dtype") for a in c["args"]),
          "kvCacheDtype auto is the server's default and is not passed: %s" % c["args"])
    check(not any(a.startswith("--quantization") for a in c["args"]),
          "no quantization by default: %s" % c["args"])
    check(not any(a.startswith("--files-dir") for a in c["args"]),
          "no batch files volume by default: %s" % c["args"])
    check("--device=cuda" in c["args"] and "--replicas=8" in c["args"],
          "single-node GPU pod does not serve one replica per GPU: %s" % c["args"])
    check(pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "prod-strata-models",
          "default claim name")
    check({"name": "NCCL_DEBUG", "value": "WARN"} in c["env"], "NCCL_DEBUG env")
    svc = docs["Service"]
    check({(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]} ==
          {("http", 8000, "http"), ("grpc", 50051, "grpc")}, "service ports")
    check(selects(svc["spec"]["selector"], labels), "service selects the pods")
    check(svc["spec"]["sessionAffinity"] == "None", "default session affinity")
    sticky = render_docs(renderer, "--set", "service.sessionAffinity=ClientIP")
    check(sticky["Service"]["spec"]["sessionAffinity"] == "ClientIP",
          "service.sessionAffinity=ClientIP not passed")
    check(selects(docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"], labels)
          and docs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1, "pdb")
    check(pod["spec"]["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"],
          "service account")


def check_multi_node(renderer, exported):
    docs = render_docs(renderer, "-f", os.path.join(HELM, "examples", "multi-node.yaml"),
                       "--name", "k3")
    check("Deployment" not in docs, "multi-node renders a Deployment")
    lws = docs.get("LeaderWorkerSet")
    if not check(lws, "multi-node: no LeaderWorkerSet (kinds %s)" % sorted(docs)):
        return
    check(lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1", "LWS apiVersion")
    spec = lws["spec"]
    tmpl = spec["leaderWorkerTemplate"]
    check(tmpl["size"] == 2, "LWS group size %s" % tmpl["size"])
    check(tmpl["restartPolicy"] == "RecreateGroupOnPodRestart", "LWS restartPolicy")
    check(spec["startupPolicy"] == "LeaderCreated", "LWS startupPolicy")
    check("replicas" not in spec, "LWS replicas set while KEDA scales it")
    for role in ("leader", "worker"):
        pod = tmpl[role + "Template"]
        labels = pod["metadata"]["labels"]
        check(labels["app.kubernetes.io/component"] == role, "%s label" % role)
        c = check_pod(pod["spec"], labels, "LWS " + role, gpus=8, expect_probe_type="grpc")
        # One rank per local GPU (expert parallelism on the devices), the group's pods as nodes.
        for flag in ("--device=cuda", "--local-ranks=8", "--num-nodes=$(LWS_GROUP_SIZE)",
                     "--node-rank=$(LWS_WORKER_INDEX)",
                     "--coordinator=$(LWS_LEADER_ADDRESS):29500"):
            check(flag in c["args"], "LWS %s: no %s in %s" % (role, flag, c["args"]))
        check({p["name"]: p["containerPort"] for p in c["ports"]}.get("coordinator") == 29500,
              "LWS %s: coordinator port" % role)
        env = {e["name"]: e.get("value") for e in c["env"]}
        check(env.get("NCCL_IB_HCA") == "mlx5" and env.get("NCCL_SOCKET_IFNAME") == "eth0"
              and "NCCL_IB_DISABLE" not in env, "LWS %s: NCCL env %s" % (role, env))
        check(pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"},
              "LWS %s: nodeSelector" % role)
        check(selects(docs["Service"]["spec"]["selector"], labels),
              "the Service does not select LWS %s pods" % role)
    sm = docs.get("ServiceMonitor")
    if check(sm, "multi-node: no ServiceMonitor"):
        check(sm["spec"]["endpoints"][0]["port"] == "http" and
              sm["spec"]["endpoints"][0]["path"] == "/metrics", "ServiceMonitor endpoint")
        check(selects(sm["spec"]["selector"]["matchLabels"], docs["Service"]["metadata"]["labels"]),
              "ServiceMonitor selects the Service")
        check(sm["metadata"]["labels"].get("release") == "kube-prometheus-stack",
              "ServiceMonitor extra labels")
    so = docs.get("ScaledObject")
    if check(so, "multi-node: no KEDA ScaledObject"):
        ref = so["spec"]["scaleTargetRef"]
        check(ref == {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                      "name": lws["metadata"]["name"]}, "ScaledObject target %s" % ref)
        trigger = so["spec"]["triggers"][0]
        metrics, _ = promlib.promql_names(trigger["metadata"]["query"])
        check(metrics == {"strata:num_requests_waiting"} and metrics <= exported,
              "KEDA query metric %s" % metrics)
        check(trigger["metadata"]["threshold"] == "8", "KEDA threshold")


def check_cpu(renderer):
    docs = render_docs(renderer, "-f", os.path.join(HELM, "examples", "cpu.yaml"))
    d = docs.get("Deployment")
    if not check(d, "cpu: no Deployment"):
        return
    pod = d["spec"]["template"]
    c = check_pod(pod["spec"], pod["metadata"]["labels"], "cpu deployment", gpus=0)
    check(pod["spec"]["volumes"][0].get("hostPath", {}).get("path") == "/srv/models", "hostPath")
    check(not any(e["name"].startswith("NCCL_") for e in c["env"]), "cpu: NCCL env left")
    check(not any(a.startswith("--device") or a.startswith("--replicas") for a in c["args"]),
          "cpu: GPU flags in %s" % c["args"])
    check("--kv-cache-dtype=bf16" in c["args"], "cpu: server.kvCacheDtype not passed: %s" % c["args"])
    check("--quantization=mxfp4,int8" in c["args"], "cpu: server.quantization not passed: %s" % c["args"])
    check(not any(a.startswith("--speculative-config") for a in c["args"]),
          "cpu: speculative decoding on by default: %s" % c["args"])
    # As a YAML map (--set parses the flow map) or as JSON text (a quoted string): one argument
    # holding that JSON object either way.
    want = {"method": "ngram", "num_speculative_tokens": 4}
    for value in ('{"method": "ngram", "num_speculative_tokens": 4}',
                  '\'{"method": "ngram", "num_speculative_tokens": 4}\''):
        docs = render_docs(renderer, "-f", os.path.join(HELM, "examples", "cpu.yaml"), "--set",
                           "server.speculativeConfig=" + value)
        if not docs.get("Deployment"):
            continue
        args = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
        spec = [a for a in args if a.startswith("--speculative-config=")]
        check(len(spec) == 1 and json.loads(spec[0].split("=", 1)[1]) == want,
              "cpu: server.speculativeConfig %s passed as %s" % (value, spec))
    # The Files and Batches API's directory on its own claim, for one server.
    kept = render_docs(renderer, "-f", os.path.join(HELM, "examples", "cpu.yaml"), "--set",
                       "autoscaling.enabled=false", "--set", "batchFiles.persistence=true",
                       "--set", "batchFiles.keepResponses=true", "--name", "prod")
    if check(kept.get("Deployment") and kept.get("PersistentVolumeClaim"),
             "cpu + batchFiles.persistence: no Deployment or claim: %s" % sorted(kept)):
        pod = kept["Deployment"]["spec"]["template"]["spec"]
        c = pod["containers"][0]
        check("--files-dir=/var/lib/strata/files" in c["args"], "--files-dir: %s" % c["args"])
        check("--responses-dir=/var/lib/strata/files/responses" in c["args"],
              "--responses-dir: %s" % c["args"])
        check({"name": "batch-files", "mountPath": "/var/lib/strata/files"} in c["volumeMounts"],
              "batch files mount: %s" % c["volumeMounts"])
        claim = kept["PersistentVolumeClaim"]
        check(claim["metadata"]["name"] == "prod-strata-batch-files" and
              claim["spec"]["accessModes"] == ["ReadWriteOnce"], "batch files claim %s" % claim)
        check({"name": "batch-files",
               "persistentVolumeClaim": {"claimName": "prod-strata-batch-files"}} in pod["volumes"],
              "batch files volume: %s" % pod["volumes"])
    check("replicas" not in d["spec"], "Deployment replicas set while the HPA scales it")
    hpa = docs.get("HorizontalPodAutoscaler")
    if check(hpa, "cpu: no HPA"):
        check(hpa["apiVersion"] == "autoscaling/v2", "HPA apiVersion")
        check(hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                               "name": d["metadata"]["name"]}, "HPA target")
        m = hpa["spec"]["metrics"][0]
        check(m["pods"]["metric"]["name"] == "strata_num_requests_waiting" and
              m["pods"]["target"] == {"type": "AverageValue", "averageValue": "8"}, "HPA metric")


def kv_offload_parts(pod_spec):
    """(--kv-offload-* args, the kv-offload mount, the kv-offload volume) of a pod spec."""
    c = pod_spec["containers"][0]
    args = [a for a in c["args"] if a.startswith("--kv-offload")]
    mounts = [m for m in c.get("volumeMounts", []) if m["name"] == "kv-offload"]
    volumes = [v for v in pod_spec.get("volumes", []) if v["name"] == "kv-offload"]
    return args, mounts, volumes


def check_kv_offload(renderer):
    """kvOffload: off by default; on, the tiers' flags and the disk tier's volume at its dir."""
    cpu = ["-f", os.path.join(HELM, "examples", "cpu.yaml")]
    for where, args in (("default", []), ("cpu", cpu)):
        docs = render_docs(renderer, *args)
        if check(docs.get("Deployment"), "%s: no Deployment" % where):
            got = kv_offload_parts(docs["Deployment"]["spec"]["template"]["spec"])
            check(got == ([], [], []), "%s: kvOffload is off but renders %s" % (where, got))
    # Both tiers, the disk tier on an emptyDir (the default volume).
    docs = render_docs(renderer, *cpu, "--set", "kvOffload.enabled=true",
                       "--set", "kvOffload.memory=8GiB", "--set", "kvOffload.disk=100GiB")
    if check(docs.get("Deployment"), "kvOffload emptyDir: no Deployment"):
        args, mounts, volumes = kv_offload_parts(docs["Deployment"]["spec"]["template"]["spec"])
        check(args == ["--kv-offload-memory=8GiB", "--kv-offload-dir=/var/cache/strata-kv",
                       "--kv-offload-disk=100GiB"], "kvOffload emptyDir: args %s" % args)
        check(mounts == [{"name": "kv-offload", "mountPath": "/var/cache/strata-kv"}],
              "kvOffload emptyDir: mount %s" % mounts)
        check(volumes == [{"name": "kv-offload", "emptyDir": {}}],
              "kvOffload emptyDir: volume %s" % volumes)
        check("PersistentVolumeClaim" not in docs, "kvOffload emptyDir: a claim is created")
    docs = render_docs(renderer, *cpu, "--set", "kvOffload.enabled=true",
                       "--set", "kvOffload.disk=90GiB",
                       "--set", "kvOffload.volume.emptyDir.sizeLimit=100Gi")
    if check(docs.get("Deployment"), "kvOffload sizeLimit: no Deployment"):
        _, _, volumes = kv_offload_parts(docs["Deployment"]["spec"]["template"]["spec"])
        check(volumes == [{"name": "kv-offload", "emptyDir": {"sizeLimit": "100Gi"}}],
              "kvOffload sizeLimit: volume %s" % volumes)
    # Host memory only: no volume.
    docs = render_docs(renderer, *cpu, "--set", "kvOffload.enabled=true",
                       "--set", "kvOffload.memory=512MiB", "--set", "kvOffload.dir=")
    if check(docs.get("Deployment"), "kvOffload host only: no Deployment"):
        got = kv_offload_parts(docs["Deployment"]["spec"]["template"]["spec"])
        check(got == (["--kv-offload-memory=512MiB"], [], []), "kvOffload host only: %s" % (got,))
    # A created claim, for one server; an existing claim is used as is.
    one = cpu + ["--set", "autoscaling.enabled=false", "--set", "kvOffload.enabled=true",
                 "--set", "kvOffload.volume.type=pvc", "--set", "kvOffload.dir=/kv",
                 "--name", "prod"]
    docs = render_docs(renderer, *one, "--set", "kvOffload.volume.pvc.storageClassName=nvme")
    if check(docs.get("Deployment") and docs.get("PersistentVolumeClaim"),
             "kvOffload pvc: no Deployment or claim: %s" % sorted(docs)):
        args, mounts, volumes = kv_offload_parts(docs["Deployment"]["spec"]["template"]["spec"])
        check(args == ["--kv-offload-dir=/kv"], "kvOffload pvc: args %s" % args)
        check(mounts == [{"name": "kv-offload", "mountPath": "/kv"}], "kvOffload pvc: mount %s"
              % mounts)
        check(volumes == [{"name": "kv-offload",
                           "persistentVolumeClaim": {"claimName": "prod-strata-kv-offload"}}],
              "kvOffload pvc: volume %s" % volumes)
        claim = docs["PersistentVolumeClaim"]
        check(claim["metadata"]["name"] == "prod-strata-kv-offload" and
              claim["spec"]["accessModes"] == ["ReadWriteOnce"] and
              claim["spec"]["storageClassName"] == "nvme" and
              claim["spec"]["resources"]["requests"]["storage"] == "256Gi",
              "kvOffload pvc: claim %s" % claim)
    docs = render_docs(renderer, *one, "--set", "kvOffload.volume.pvc.claimName=kv-cache")
    if check(docs.get("Deployment"), "kvOffload existing claim: no Deployment"):
        _, _, volumes = kv_offload_parts(docs["Deployment"]["spec"]["template"]["spec"])
        check(volumes == [{"name": "kv-offload",
                           "persistentVolumeClaim": {"claimName": "kv-cache"}}],
              "kvOffload existing claim: volume %s" % volumes)
        check("PersistentVolumeClaim" not in docs, "kvOffload existing claim: a claim is created")
    # Eight GPUs a pod (the default): its eight engine ranks share the pod's tiers.
    docs = render_docs(renderer, "--set", "kvOffload.enabled=true")
    if check(docs.get("Deployment"), "kvOffload 8 GPUs: no Deployment"):
        spec = docs["Deployment"]["spec"]["template"]["spec"]
        args, _, volumes = kv_offload_parts(spec)
        check(args == ["--kv-offload-dir=/var/cache/strata-kv"] and len(volumes) == 1 and
              "--replicas=8" in spec["containers"][0]["args"],
              "kvOffload 8 GPUs: args %s, volumes %s" % (args, volumes))
    # Multi-node with one GPU a pod (one engine rank a process): every pod of the group, on a
    # node's local disk.
    docs = render_docs(renderer, "-f", os.path.join(HELM, "examples", "multi-node.yaml"),
                       "--set", "gpu.count=1", "--set", "kvOffload.enabled=true",
                       "--set", "kvOffload.volume.type=hostPath")
    lws = docs.get("LeaderWorkerSet")
    if check(lws, "kvOffload multi-node: no LeaderWorkerSet"):
        for role in ("leader", "worker"):
            spec = lws["spec"]["leaderWorkerTemplate"][role + "Template"]["spec"]
            args, mounts, volumes = kv_offload_parts(spec)
            check(args == ["--kv-offload-dir=/var/cache/strata-kv"],
                  "kvOffload LWS %s: args %s" % (role, args))
            check(mounts == [{"name": "kv-offload", "mountPath": "/var/cache/strata-kv"}],
                  "kvOffload LWS %s: mount %s" % (role, mounts))
            check(volumes == [{"name": "kv-offload",
                               "hostPath": {"path": "/mnt/strata-kv", "type": "Directory"}}],
                  "kvOffload LWS %s: volume %s" % (role, volumes))


def check_parallelism(renderer):
    """parallelism.*: tensor (and decode context) parallelism instead of whole-model replicas."""
    def single_args(*extra):
        docs = render_docs(renderer, *extra)
        if not check(docs.get("Deployment"), "parallelism %s: no Deployment" % (extra,)):
            return []
        return docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]

    def parallel(args):
        return [a for a in args if a.startswith(("--device", "--replicas", "--tensor-parallel",
                                                 "--data-parallel", "--decode-context"))]

    got = parallel(single_args("--set", "parallelism.tensorParallelSize=8"))
    check(got == ["--device=cuda", "--tensor-parallel-size=8"], "TP 8 on 8 GPUs: %s" % got)
    got = parallel(single_args("--set", "parallelism.tensorParallelSize=4",
                               "--set", "parallelism.decodeContextParallelSize=2"))
    check(got == ["--device=cuda", "--tensor-parallel-size=4", "--data-parallel-size=2",
                  "--decode-context-parallel-size=2"], "TP 4 x DCP 2 on 8 GPUs: %s" % got)
    got = parallel(single_args("-f", os.path.join(HELM, "examples", "cpu.yaml"),
                               "--set", "parallelism.tensorParallelSize=2"))
    check(got == ["--tensor-parallel-size=2"], "TP 2 on the CPU: %s" % got)
    docs = render_docs(renderer, "-f", os.path.join(HELM, "examples", "multi-node.yaml"),
                       "--set", "parallelism.tensorParallelSize=8")
    lws = docs.get("LeaderWorkerSet")
    if check(lws, "parallelism multi-node: no LeaderWorkerSet"):
        for role in ("leader", "worker"):
            args = lws["spec"]["leaderWorkerTemplate"][role + "Template"]["spec"]["containers"][0][
                "args"]
            check("--tensor-parallel-size=8" in args and "--local-ranks=8" in args,
                  "parallelism multi-node %s: %s" % (role, args))
        check(docs["Service"]["spec"]["selector"].get("app.kubernetes.io/component") is None,
              "TP within pods: every pod serves: %s" % docs["Service"]["spec"]["selector"])
    # TP16 over two 8-GPU nodes: one tensor-parallel group per LeaderWorkerSet group. The
    # leader's process leads it and answers requests; the worker's computes only (no HTTP): no
    # probes there, and the Service selects leaders.
    docs = render_docs(renderer, "-f", os.path.join(HELM, "examples", "multi-node.yaml"),
                       "--set", "parallelism.tensorParallelSize=16",
                       "--set", "parallelism.decodeContextParallelSize=8")
    lws = docs.get("LeaderWorkerSet")
    if check(lws, "TP across pods: no LeaderWorkerSet"):
        for role in ("leader", "worker"):
            container = lws["spec"]["leaderWorkerTemplate"][role + "Template"]["spec"][
                "containers"][0]
            args = container["args"]
            for flag in ("--tensor-parallel-size=16", "--local-ranks=8",
                         "--decode-context-parallel-size=8", "--num-nodes=$(LWS_GROUP_SIZE)",
                         "--node-rank=$(LWS_WORKER_INDEX)"):
                check(flag in args, "TP across pods %s: %s not in %s" % (role, flag, args))
            probes = [k for k in container if k.endswith("Probe")]
            want = ["startupProbe", "readinessProbe", "livenessProbe"] if role == "leader" else []
            check(sorted(probes) == sorted(want), "TP across pods %s probes: %s" % (role, probes))
        check(docs["Service"]["spec"]["selector"].get("app.kubernetes.io/component") == "leader",
              "TP across pods: the Service selects leaders: %s" % docs["Service"]["spec"])


def check_rejections(renderer):
    for args, message in ((["--set", "mode=cluster"], "mode must be single or multi"),
                          (["--set", "parallelism.tensorParallelSize=3"],
                           "parallelism.tensorParallelSize 3 must divide gpu.count 8"),
                          (["--set", "parallelism.tensorParallelSize=16"],
                           "parallelism.tensorParallelSize 16 is above gpu.count 8: a "
                           "tensor-parallel group across pods needs mode multi with "
                           "multiNode.groupSize x gpu.count = 16"),
                          (["--set", "mode=multi", "--set", "multiNode.groupSize=4",
                            "--set", "parallelism.tensorParallelSize=16"],
                           "multiNode.groupSize x gpu.count = 16"),
                          (["--set", "parallelism.tensorParallelSize=8",
                            "--set", "parallelism.decodeContextParallelSize=3"],
                           "decodeContextParallelSize 3 must divide tensorParallelSize 8"),
                          (["--set", "gpu.count=0", "--set", "mode=multi",
                            "--set", "parallelism.tensorParallelSize=2"],
                           "tensorParallelSize above 1 in multi mode needs GPUs"),
                          (["--set", "model.servedName="], "model.servedName is required"),
                          (["--set", "model.source=nfs"], "model.source must be"),
                          (["--set", "service.sessionAffinity=Sticky"],
                           "service.sessionAffinity must be None or ClientIP"),
                          (["--set", "autoscaling.enabled=true", "--set", "autoscaling.type=x"],
                           "autoscaling.type must be"),
                          (["--set", "batchFiles.persistence=true", "--set", "replicaCount=2"],
                           "batchFiles.persistence needs one server"),
                          (["--set", "batchFiles.persistence=true", "--set", "mode=multi"],
                           "batchFiles.persistence needs one server"),
                          (["--set", "batchFiles.keepResponses=true"],
                           "batchFiles.keepResponses keeps stored responses on the batchFiles "
                           "volume: it needs batchFiles.persistence"),
                          (["--set", "gpu.count=1", "--set", "kvOffload.enabled=true",
                            "--set", "kvOffload.dir="],
                           "kvOffload.enabled needs a tier"),
                          (["--set", "gpu.count=1", "--set", "kvOffload.enabled=true",
                            "--set", "kvOffload.memory=64Gi"],
                           "kvOffload.memory must be a size like 512MiB or 64GiB (strata "
                           "serve's units, not Kubernetes' 64Gi), not \"64Gi\""),
                          (["--set", "gpu.count=1", "--set", "kvOffload.enabled=true",
                            "--set", "kvOffload.disk=1Ti"], "kvOffload.disk must be a size"),
                          (["--set", "gpu.count=1", "--set", "kvOffload.enabled=true",
                            "--set", "kvOffload.dir=", "--set", "kvOffload.memory=1GiB",
                            "--set", "kvOffload.disk=1GiB"],
                           "kvOffload.disk sizes the disk tier: it needs kvOffload.dir"),
                          (["--set", "gpu.count=1", "--set", "kvOffload.enabled=true",
                            "--set", "kvOffload.volume.type=nfs"],
                           'kvOffload.volume.type must be emptyDir, pvc or hostPath, not "nfs"'),
                          (["--set", "gpu.count=1", "--set", "kvOffload.enabled=true",
                            "--set", "kvOffload.volume.type=pvc", "--set", "replicaCount=2"],
                           "kvOffload.volume.type pvc needs one server"),
                          (["--set", "gpu.count=1", "--set", "mode=multi",
                            "--set", "kvOffload.enabled=true",
                            "--set", "kvOffload.volume.type=pvc"],
                           "kvOffload.volume.type pvc needs one server"),
                          (["--set", "gpu.count=1", "--set", "kvOffload.enabled=true",
                            "--set", "kvOffload.volume.emptyDir.sizeLimit=100Gi"],
                           "kvOffload.disk is required with kvOffload.volume.emptyDir.sizeLimit")):
        rc, _, err = render(renderer, *args)
        check(rc != 0 and message in err, "%s: expected failure %r, got rc %d %s"
              % (args, message, rc, err))


def leaf_paths(value, prefix=""):
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from leaf_paths(v, prefix + "." + k if prefix else k)
    else:
        yield prefix


def check_values_documented():
    """Every value (or an enclosing map) has a row in the chart's README table."""
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = yaml.safe_load(f)
    with open(os.path.join(CHART, "README.md")) as f:
        documented = set(re.findall(r"^\| `([^`]+)` \|", f.read(), re.M))
    for path in leaf_paths(values):
        parts = path.split(".")
        prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        check(prefixes & documented, "values.yaml %s is not in the chart README" % path)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    workdir = sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    renderer = build_renderer(workdir)
    if renderer is None:
        print("SKIP: needs golang-go and golang-github-masterminds-sprig-dev "
              "(Go sources under %s)" % GOPATH)
        sys.exit(77)
    exposition = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    exported, _ = promlib.exported_names(exposition)
    check_values_documented()
    for case, args in ((check_default, ()), (check_multi_node, (exported,)), (check_cpu, ()),
                       (check_kv_offload, ()), (check_parallelism, ()), (check_rejections, ())):
        try:
            case(renderer, *args)
        except (KeyError, IndexError, TypeError) as e:  # a field the checks expect is missing
            failures.append("%s: rendered objects lack %r" % (case.__name__, e))
    for f in failures:
        print("FAIL:", f)
    print("helm chart: %d failures" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
